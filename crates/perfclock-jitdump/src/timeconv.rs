//! The conversion record written next to a jitdump (`jit-<pid>.dump.timeconv`).
//!
//! A jitdump with `JITDUMP_FLAGS_ARCH_TIMESTAMP` holds raw counter values; `perf inject --jit`
//! converts them with the recording's `PERF_RECORD_TIME_CONV`, which `perf record` omits where
//! the kernel withholds the conversion. This record carries the conversion the writer's clock
//! used, so `perfclock inject-time-conv` can add the missing `PERF_RECORD_TIME_CONV`.
//!
//! Format: ASCII, one `key=value` per line, first line exactly [`MAGIC_LINE`]:
//! ```text
//! perfclock-timeconv 1
//! pid=4242
//! boot_id=0b3f4c5e-...
//! mode=calibrated
//! counter=tsc
//! time_mult=...
//! time_shift=...
//! time_zero=...
//! time_cycles=...
//! time_mask=...
//! cap_user_time_short=0
//! error_bound_ns=...
//! written_counter=...
//! clock=arch
//! pvclock=TSC_TIMESTAMP,SYSTEM_TIME,MUL,SHIFT,OFFSET_NS
//! ```
//! `boot_id` is the writer's boot id in the kernel's spelling ([`BootId`]); a record whose
//! `boot_id` is not one does not parse. Every key is required once, except `clock` (the dump's
//! [`JitClock`]; absent in records of writers that had only `arch`, which it then defaults to)
//! and `pvclock` (paravirt mode: the pvclock entry's parameters and the boot's offset `C`, from
//! which a reader derives the conversion anchored wherever it needs it,
//! [`TimeConvRecord::conversion_at`]); unknown keys are ignored so later versions can add some.

use std::fmt;
use std::io::{self, Write};
use std::path::Path;

use perfclock_core::pvclock::PvclockParams;
use perfclock_core::{BootId, TimeConversion};

use crate::error::TimeConvError;
use crate::JitClock;

/// The first line of every record.
pub const MAGIC_LINE: &str = "perfclock-timeconv 1";

/// The suffix appended to the dump's file name to name its record.
pub const SUFFIX: &str = ".timeconv";

/// Which conversion the writer's clock used: the writer's [`perfclock::Mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeConvMode {
    /// The kernel published the conversion: the record is exact.
    Kernel,
    /// A KVM guest's pvclock read as the kernel reads it (the record carries the entry and
    /// the offset, `pvclock`): exact, within `error_bound_ns` (the offset's bound).
    Paravirt,
    /// perfclock fitted the conversion; readings are within `error_bound_ns`.
    Calibrated,
    /// A `perfclock serve` of the machine fitted it; within `error_bound_ns`.
    Shared,
}

impl TimeConvMode {
    /// The name the record spells it with.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeConvMode::Kernel => "kernel",
            TimeConvMode::Paravirt => "paravirt",
            TimeConvMode::Calibrated => "calibrated",
            TimeConvMode::Shared => "shared",
        }
    }
}

impl From<perfclock::Mode> for TimeConvMode {
    fn from(mode: perfclock::Mode) -> Self {
        match mode {
            perfclock::Mode::Kernel => TimeConvMode::Kernel,
            perfclock::Mode::Paravirt => TimeConvMode::Paravirt,
            perfclock::Mode::Calibrated => TimeConvMode::Calibrated,
            perfclock::Mode::Shared => TimeConvMode::Shared,
        }
    }
}

/// A paravirt-mode record's pvclock entry parameters and the boot's offset `C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PvclockConversion {
    /// The entry's parameters.
    pub params: PvclockParams,
    /// `C`, ns.
    pub offset_ns: i64,
}

/// One conversion record: the fields of the file, in the order they are written.
///
/// The format promises new keys (readers ignore the ones they do not know), so the fields are
/// private and the type is `#[non_exhaustive]`: [`TimeConvRecord::new`] takes the keys every
/// record has, and a key added later, absent from older records, gets a `with_` setter and a
/// default, as `clock` did ([`TimeConvRecord::with_clock`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimeConvRecord {
    pid: u32,
    boot_id: BootId,
    mode: TimeConvMode,
    counter: String,
    conversion: TimeConversion,
    error_bound_ns: u64,
    written_counter: u64,
    clock: JitClock,
    pvclock: Option<PvclockConversion>,
}

impl TimeConvRecord {
    /// A record of the keys every record has; its clock is [`JitClock::Arch`], the clock of
    /// records that have no `clock` key (see [`TimeConvRecord::with_clock`]).
    ///
    /// `counter` is the counter's name as written (`tsc`, `cntvct_el0`); `written_counter` the
    /// counter's value when the record is written.
    pub fn new(
        pid: u32,
        boot_id: BootId,
        mode: TimeConvMode,
        counter: impl Into<String>,
        conversion: TimeConversion,
        error_bound_ns: u64,
        written_counter: u64,
    ) -> Self {
        TimeConvRecord {
            pid,
            boot_id,
            mode,
            counter: counter.into(),
            conversion,
            error_bound_ns,
            written_counter,
            clock: JitClock::Arch,
            pvclock: None,
        }
    }

    /// The record with paravirt mode's exact form (the entry and `C`) added.
    #[must_use]
    pub fn with_pvclock(mut self, pvclock: PvclockConversion) -> Self {
        self.pvclock = Some(pvclock);
        self
    }

    /// Paravirt mode's exact form, where the writer was in it.
    pub fn pvclock(&self) -> Option<PvclockConversion> {
        self.pvclock
    }

    /// The conversion in perf's form, exact at counter value `anchor`: for a paravirt record
    /// the pvclock anchored there (its rounded slope drifts only with the distance from
    /// `anchor`, whatever the uptime), for the others [`TimeConvRecord::conversion`].
    pub fn conversion_at(&self, anchor: u64) -> TimeConversion {
        self.pvclock
            .and_then(|pv| pv.params.time_conversion_at(pv.offset_ns, anchor).ok())
            .unwrap_or(self.conversion)
    }

    /// How far [`TimeConvRecord::conversion_at`]`(anchor)` can be from the writer's clock at
    /// counter value `cycles`, in ns, on top of `error_bound_ns`'s share for the clock itself.
    pub fn conversion_error_at_ns(&self, cycles: u64, anchor: u64) -> u64 {
        self.pvclock.map_or(0, |pv| {
            pv.params.time_conversion_error_at_ns(cycles, anchor)
        })
    }

    /// The counter value at perf-clock time `ns` (exact in paravirt mode, perf's inverse
    /// otherwise): where to anchor [`TimeConvRecord::conversion_at`] for a time.
    pub fn cycles_at(&self, ns: u64) -> u64 {
        match self.pvclock {
            Some(pv) => pv.params.perf_ns_to_cycles(ns, pv.offset_ns),
            None => self.conversion.ns_to_cycles(ns),
        }
    }

    /// The record with the dump's clock set to `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: JitClock) -> Self {
        self.clock = clock;
        self
    }

    /// The process that wrote the jitdump.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The boot the record was written in (`/proc/sys/kernel/random/boot_id` then): counter
    /// values from another boot mean nothing under this conversion.
    pub fn boot_id(&self) -> BootId {
        self.boot_id
    }

    /// Kernel-published or calibrated conversion.
    pub fn mode(&self) -> TimeConvMode {
        self.mode
    }

    /// The counter the jitdump's timestamps were read from (`tsc`, `cntvct_el0`).
    pub fn counter(&self) -> &str {
        &self.counter
    }

    /// The conversion (`time_mult`, `time_shift`, `time_zero`, `time_cycles`, `time_mask`,
    /// `cap_user_time_short`).
    pub fn conversion(&self) -> TimeConversion {
        self.conversion
    }

    /// Bound on the conversion's error in ns (0 in kernel mode).
    pub fn error_bound_ns(&self) -> u64 {
        self.error_bound_ns
    }

    /// The counter value when the record was written.
    pub fn written_counter(&self) -> u64 {
        self.written_counter
    }

    /// The clock of the dump's timestamps: only `arch` dumps need this record's conversion.
    pub fn clock(&self) -> JitClock {
        self.clock
    }
}

/// The keys, in file order.
const KEYS: [&str; 12] = [
    "pid",
    "boot_id",
    "mode",
    "counter",
    "time_mult",
    "time_shift",
    "time_zero",
    "time_cycles",
    "time_mask",
    "cap_user_time_short",
    "error_bound_ns",
    "written_counter",
];

/// A record's optional lines: `clock` and `pvclock`.
#[derive(Default)]
struct Optional<'a> {
    clock: Option<&'a str>,
    pvclock: Option<&'a str>,
}

/// The values of a record's lines, by [`KEYS`] slot, and its optional lines' values; lines of
/// other keys are skipped.
fn fields(text: &str) -> Result<([Option<&str>; KEYS.len()], Optional<'_>), TimeConvError> {
    // Lines end at '\n' only: `str::lines` would also drop a '\r' before it, so a value ending
    // in '\r' would lose one at every rewrite (found by the fuzz target).
    let mut lines = text.split('\n');
    let first_line = lines.next().unwrap_or("");
    if first_line != MAGIC_LINE {
        return Err(TimeConvError::NotARecord {
            expected: MAGIC_LINE,
        });
    }
    let mut values: [Option<&str>; KEYS.len()] = [None; KEYS.len()];
    let mut optional = Optional::default();
    for (index, line) in lines.enumerate() {
        if line.is_empty() {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or(TimeConvError::MalformedLine { line: index + 2 })?;
        let optional_slot = match key {
            "clock" => Some((&mut optional.clock, "clock")),
            "pvclock" => Some((&mut optional.pvclock, "pvclock")),
            _ => None,
        };
        if let Some((slot, name)) = optional_slot {
            if slot.replace(value).is_some() {
                return Err(TimeConvError::DuplicateKey(name));
            }
            continue;
        }
        let Some(slot) = KEYS.iter().position(|known| *known == key) else {
            continue;
        };
        if values[slot].replace(value).is_some() {
            return Err(TimeConvError::DuplicateKey(KEYS[slot]));
        }
    }
    Ok((values, optional))
}

/// The `pvclock` line's value: the entry's `tsc_timestamp`, `system_time`, `mul`, `shift`
/// and the offset `C`, comma-separated (the last two may be negative).
fn pvclock(value: &str) -> Result<PvclockConversion, TimeConvError> {
    let invalid = || TimeConvError::InvalidValue { key: "pvclock" };
    let parts: Vec<&str> = value.split(',').collect();
    let [tsc_timestamp, system_time, mul, shift, offset] = parts[..] else {
        return Err(invalid());
    };
    let signed = |text: &str| -> Result<i64, TimeConvError> {
        let digits = text.strip_prefix('-').unwrap_or(text);
        let magnitude: i64 = number("pvclock", digits).map_err(|_| invalid())?;
        Ok(if text.starts_with('-') {
            -magnitude
        } else {
            magnitude
        })
    };
    let shift = i8::try_from(signed(shift)?).map_err(|_| invalid())?;
    let params = PvclockParams::new(
        number("pvclock", tsc_timestamp)?,
        number("pvclock", system_time)?,
        number("pvclock", mul)?,
        shift,
        0,
    )
    .map_err(|_| invalid())?;
    Ok(PvclockConversion {
        params,
        offset_ns: signed(offset)?,
    })
}

/// The choice `value` names among `choices`.
fn one_of<T: Copy>(
    key: &'static str,
    value: &str,
    choices: &[(&str, T)],
) -> Result<T, TimeConvError> {
    choices
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, choice)| *choice)
        .ok_or(TimeConvError::InvalidValue { key })
}

fn number<T: std::str::FromStr>(key: &'static str, value: &str) -> Result<T, TimeConvError> {
    // `from_str` accepts a leading '+'; the format is plain decimal digits.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TimeConvError::InvalidValue { key });
    }
    value
        .parse()
        .map_err(|_| TimeConvError::InvalidValue { key })
}

impl TimeConvRecord {
    /// Parses a record.
    ///
    /// # Errors
    /// [`TimeConvError`] for a wrong first line, a line that is not `key=value`, a missing,
    /// duplicate or unparsable key, or a conversion no kernel would publish.
    pub fn parse(text: &str) -> Result<Self, TimeConvError> {
        let (values, optional) = fields(text)?;
        // Every key asked for is one of KEYS; one that is not would read as missing.
        let get = |key: &'static str| {
            KEYS.iter()
                .zip(values)
                .find(|(known, _)| **known == key)
                .and_then(|(_, value)| value)
                .ok_or(TimeConvError::MissingKey(key))
        };
        let mode = one_of(
            "mode",
            get("mode")?,
            &[
                ("kernel", TimeConvMode::Kernel),
                ("paravirt", TimeConvMode::Paravirt),
                ("calibrated", TimeConvMode::Calibrated),
                ("shared", TimeConvMode::Shared),
            ],
        )?;
        let short = one_of(
            "cap_user_time_short",
            get("cap_user_time_short")?,
            &[("0", false), ("1", true)],
        )?;
        let mult = number("time_mult", get("time_mult")?)?;
        let shift = number("time_shift", get("time_shift")?)?;
        let zero = number("time_zero", get("time_zero")?)?;
        let cycles = number("time_cycles", get("time_cycles")?)?;
        let mask = number("time_mask", get("time_mask")?)?;
        let conversion = if short {
            TimeConversion::new_short(mult, shift, zero, cycles, mask)
        } else {
            TimeConversion::new(mult, shift, zero)
        }
        .map_err(TimeConvError::InvalidConversion)?;
        let clock = match optional.clock {
            None => JitClock::Arch,
            Some(name) => name
                .parse()
                .map_err(|_| TimeConvError::InvalidValue { key: "clock" })?,
        };
        Ok(TimeConvRecord {
            pid: number("pid", get("pid")?)?,
            boot_id: BootId::parse(get("boot_id")?)
                .ok_or(TimeConvError::InvalidValue { key: "boot_id" })?,
            mode,
            counter: get("counter")?.to_owned(),
            conversion,
            error_bound_ns: number("error_bound_ns", get("error_bound_ns")?)?,
            written_counter: number("written_counter", get("written_counter")?)?,
            clock,
            pvclock: optional.pvclock.map(pvclock).transpose()?,
        })
    }

    /// Writes the record to `path` atomically: a temporary file in the same directory, renamed
    /// over `path`, so readers see the old record or the new one, never a mix.
    ///
    /// # Errors
    /// The I/O error of creating, writing or renaming the temporary file (a directory that is
    /// missing, not writable, or full).
    pub fn write_atomic(&self, path: &Path) -> io::Result<()> {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut file = tempfile::Builder::new()
            .prefix(".timeconv-")
            .tempfile_in(dir)?;
        file.write_all(self.to_string().as_bytes())?;
        // Readers (and `perf`) run as other users; the default temp mode would be 0600. Through
        // the descriptor: a chmod by name would follow whatever another user put at the name.
        file.as_file()
            .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
        file.persist(path).map_err(|error| error.error)?;
        Ok(())
    }
}

impl fmt::Display for TimeConvRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.conversion;
        writeln!(f, "{MAGIC_LINE}")?;
        writeln!(f, "pid={}", self.pid)?;
        writeln!(f, "boot_id={}", self.boot_id)?;
        writeln!(f, "mode={}", self.mode.as_str())?;
        writeln!(f, "counter={}", self.counter)?;
        writeln!(f, "time_mult={}", c.mult())?;
        writeln!(f, "time_shift={}", c.shift())?;
        writeln!(f, "time_zero={}", c.zero())?;
        writeln!(f, "time_cycles={}", c.cycles())?;
        writeln!(f, "time_mask={}", c.mask())?;
        writeln!(f, "cap_user_time_short={}", u8::from(c.is_short()))?;
        writeln!(f, "error_bound_ns={}", self.error_bound_ns)?;
        writeln!(f, "written_counter={}", self.written_counter)?;
        writeln!(f, "clock={}", self.clock)?;
        if let Some(pv) = self.pvclock {
            let p = pv.params;
            writeln!(
                f,
                "pvclock={},{},{},{},{}",
                p.tsc_timestamp(),
                p.system_time(),
                p.mul(),
                p.shift(),
                pv.offset_ns
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::ParamError;
    use std::fs;

    fn sample() -> TimeConvRecord {
        TimeConvRecord {
            pid: 4242,
            boot_id: BootId::parse("0b3f4c5e-1111-2222-3333-444455556666").unwrap(),
            mode: TimeConvMode::Calibrated,
            counter: "tsc".into(),
            conversion: TimeConversion::new(2_796_202_667, 31, 18_446_743_000_000_000_000).unwrap(),
            error_bound_ns: 612,
            written_counter: 123_456_789_012,
            clock: JitClock::Arch,
            pvclock: None,
        }
    }

    #[test]
    fn a_paravirt_record_carries_its_entry_and_anchors_anywhere() {
        let params = PvclockParams::new(1 << 40, 1 << 50, 3_221_225_472, -1, 0).unwrap();
        let record = TimeConvRecord {
            mode: TimeConvMode::Paravirt,
            ..sample()
        }
        .with_pvclock(PvclockConversion {
            params,
            offset_ns: -103_409_420,
        });
        let text = record.to_string();
        assert!(text.contains("mode=paravirt\n"), "{text}");
        assert!(
            text.contains("pvclock=1099511627776,1125899906842624,3221225472,-1,-103409420\n"),
            "{text}"
        );
        let parsed = TimeConvRecord::parse(&text).unwrap();
        assert_eq!(parsed, record);
        // Anchored 30 days of a 3 GHz TSC after the entry: exact there (to perf's floor).
        let anchor = (1u64 << 40) + 30 * 86_400 * 3_000_000_000;
        let conversion = parsed.conversion_at(anchor);
        let exact = params.perf_ns(anchor, -103_409_420);
        assert!(conversion.cycles_to_ns(anchor).abs_diff(exact) <= 1);
        assert_eq!(
            parsed.cycles_at(exact),
            params.perf_ns_to_cycles(exact, -103_409_420)
        );
        assert!(parsed.conversion_error_at_ns(anchor + 3_000_000_000, anchor) <= 4);
        // The same record anchored at its entry is far off there.
        assert!(parsed.conversion().cycles_to_ns(anchor).abs_diff(exact) > 100_000);
        for bad in [
            "1,2,3",
            "1,2,0,0,0",
            "1,2,3,99,0",
            "1,2,3,x,0",
            "1,2,3,-1,+5",
        ] {
            let text = text.replace(
                "pvclock=1099511627776,1125899906842624,3221225472,-1,-103409420",
                &format!("pvclock={bad}"),
            );
            assert!(
                matches!(
                    TimeConvRecord::parse(&text),
                    Err(TimeConvError::InvalidValue { key: "pvclock", .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn round_trips() {
        let record = sample();
        let text = record.to_string();
        assert!(text.starts_with("perfclock-timeconv 1\npid=4242\n"));
        assert!(text.contains("\ntime_mask=18446744073709551615\ncap_user_time_short=0\n"));
        assert_eq!(TimeConvRecord::parse(&text).unwrap(), record);

        let short = TimeConvRecord {
            mode: TimeConvMode::Kernel,
            counter: "cntvct_el0".into(),
            conversion: TimeConversion::new_short(1_398_101_333, 22, 77, 1 << 40, (1 << 56) - 1)
                .unwrap(),
            error_bound_ns: 0,
            ..sample()
        };
        assert_eq!(TimeConvRecord::parse(&short.to_string()).unwrap(), short);
    }

    #[test]
    fn the_clock_key_is_optional_and_checked() {
        let text = sample().to_string();
        let without = text.replace("clock=arch\n", "");
        assert_eq!(TimeConvRecord::parse(&without).unwrap(), sample());
        let perf = text.replace("clock=arch", "clock=perf");
        assert_eq!(TimeConvRecord::parse(&perf).unwrap().clock, JitClock::Perf);
        assert_eq!(
            TimeConvRecord::parse(&text.replace("clock=arch", "clock=tsc")),
            Err(TimeConvError::InvalidValue { key: "clock" })
        );
        assert_eq!(
            TimeConvRecord::parse(&format!("{text}clock=perf\n")),
            Err(TimeConvError::DuplicateKey("clock"))
        );
    }

    #[test]
    fn values_ending_in_carriage_returns_round_trip() {
        let record = TimeConvRecord {
            counter: "tsc\r\r".into(),
            ..sample()
        };
        let parsed = TimeConvRecord::parse(&record.to_string()).unwrap();
        assert_eq!(parsed, record);
        assert_eq!(TimeConvRecord::parse(&parsed.to_string()).unwrap(), record);
    }

    #[test]
    fn ignores_unknown_keys_and_blank_lines() {
        let text = format!("{}future_key=whatever\n\n", sample());
        assert_eq!(TimeConvRecord::parse(&text).unwrap(), sample());
    }

    #[test]
    fn rejects_each_missing_key_by_name() {
        let text = sample().to_string();
        for key in KEYS {
            let without: String = text
                .lines()
                .filter(|line| !line.starts_with(&format!("{key}=")))
                .map(|line| format!("{line}\n"))
                .collect();
            assert_eq!(
                TimeConvRecord::parse(&without),
                Err(TimeConvError::MissingKey(key))
            );
        }
    }

    #[test]
    fn rejects_duplicates_and_garbage() {
        let text = sample().to_string();
        let twice = format!("{text}time_zero=5\n");
        assert_eq!(
            TimeConvRecord::parse(&twice),
            Err(TimeConvError::DuplicateKey("time_zero"))
        );
        for (key, bad) in [
            ("pid", "-1"),
            ("time_mult", "4294967296"),
            ("time_shift", "+3"),
            ("time_zero", "1e9"),
            ("time_zero", ""),
            ("mode", "exact"),
            ("cap_user_time_short", "2"),
        ] {
            let edited: String = text
                .lines()
                .map(|line| {
                    if line.starts_with(&format!("{key}=")) {
                        format!("{key}={bad}\n")
                    } else {
                        format!("{line}\n")
                    }
                })
                .collect();
            match TimeConvRecord::parse(&edited) {
                Err(TimeConvError::InvalidValue { key: k }) => assert_eq!(k, key, "{bad}"),
                other => panic!("{key}={bad}: {other:?}"),
            }
        }
        let zero_mult = text.replace("time_mult=2796202667", "time_mult=0");
        assert_eq!(
            TimeConvRecord::parse(&zero_mult),
            Err(TimeConvError::InvalidConversion(ParamError::ZeroMultiplier))
        );
        assert!(matches!(
            TimeConvRecord::parse("perfclock-timeconv 2\n"),
            Err(TimeConvError::NotARecord { .. })
        ));
        assert!(matches!(
            TimeConvRecord::parse(""),
            Err(TimeConvError::NotARecord { .. })
        ));
        assert_eq!(
            TimeConvRecord::parse(&format!("{text}no equals sign\n")),
            Err(TimeConvError::MalformedLine { line: 15 })
        );
    }

    #[test]
    fn a_boot_id_that_is_not_one_is_refused_at_parse() {
        let text = sample().to_string();
        assert!(
            text.contains("\nboot_id=0b3f4c5e-1111-2222-3333-444455556666\n"),
            "{text}"
        );
        for bad in [
            "",
            "b",
            "0b3f4c5e-1111-2222-3333-44445555666",
            "0b3f4c5e-1111-2222-3333-4444555566667",
            "0b3f4c5e-1111-2222-3333-44445555666g",
            "\x1b]52;c;eA==\x07",
        ] {
            let edited = text.replace(
                "boot_id=0b3f4c5e-1111-2222-3333-444455556666",
                &format!("boot_id={bad}"),
            );
            assert_eq!(
                TimeConvRecord::parse(&edited),
                Err(TimeConvError::InvalidValue { key: "boot_id" }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn writes_atomically_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jit-1.dump.timeconv");
        sample().write_atomic(&path).unwrap();
        let newer = TimeConvRecord {
            written_counter: 9,
            ..sample()
        };
        newer.write_atomic(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(TimeConvRecord::parse(&text).unwrap(), newer);
        // Only the record is left: the temporary file was renamed, not copied.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn write_into_a_missing_directory_fails() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent/jit-1.dump.timeconv");
        assert!(sample().write_atomic(&path).is_err());
    }
}
