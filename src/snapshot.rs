//! The perf clock read together with `CLOCK_MONOTONIC`, `CLOCK_BOOTTIME` and `CLOCK_REALTIME`,
//! so a default-clock `perf.data` can be aligned with other traces and with wall-clock time.
//!
//! A default-clock recording stamps `local_clock()`, which is none of those clocks (on KVM guests
//! it is milliseconds from `CLOCK_MONOTONIC` and drifts from it), and carries no wall-clock
//! anchor: `perf script --tod` refuses such a file. One [`ClockSnapshot`] taken while recording
//! supplies the anchor: `wall_ns = perf_ns + snapshot.realtime.offset_ns`.
//!
//! Perfetto's trace processor names the default perf clock `BUILTIN_CLOCK_PERF` (10) and aligns
//! it through `ClockSnapshot` packets; a snapshot maps onto one directly:
//! ```text
//! packet {
//!   clock_snapshot {
//!     clocks { clock_id: 10 timestamp: <perf_ns> }          # BUILTIN_CLOCK_PERF
//!     clocks { clock_id: 6  timestamp: <boottime.ns> }      # BUILTIN_CLOCK_BOOTTIME
//!     clocks { clock_id: 3  timestamp: <monotonic.ns> }     # BUILTIN_CLOCK_MONOTONIC
//!     clocks { clock_id: 1  timestamp: <realtime.ns> }      # BUILTIN_CLOCK_REALTIME
//!   }
//! }
//! ```

use perfclock_core::counter::read_counter_ordered;
use perfclock_core::ReadError;
use perfclock_os::time::{self, ClockId};

use crate::error::SnapshotError;
use crate::Clock;

/// Brackets taken per clock; the narrowest is kept. A bracket is two ordered counter reads
/// around one vDSO `clock_gettime` (a few tens of ns), and a few tries skip one that a preemption
/// or an interrupt widened.
pub const SNAPSHOT_TRIES: usize = 16;

/// Largest rate difference assumed between the perf clock and another clock while the snapshot
/// is taken, in parts per million (NTP slews `CLOCK_MONOTONIC`/`CLOCK_REALTIME` by at most 500
/// ppm), used to bound the error of moving a pairing to the snapshot's common perf instant.
const MAX_RATE_DIFFERENCE_PPM: u64 = 500;

/// The perf clock paired with three system clocks, each as the other clock's reading at the
/// instant the perf clock read [`ClockSnapshot::perf_ns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSnapshot {
    /// The perf clock (the domain of `PERF_SAMPLE_TIME`), ns.
    pub perf_ns: u64,
    /// `CLOCK_MONOTONIC` at `perf_ns`.
    pub monotonic: PairedClock,
    /// `CLOCK_BOOTTIME` at `perf_ns`.
    pub boottime: PairedClock,
    /// `CLOCK_REALTIME` (ns since the Unix epoch) at `perf_ns`.
    pub realtime: PairedClock,
    /// The perf clock's own error bound when the snapshot was taken (0 in kernel mode); already
    /// included in each pairing's `uncertainty_ns`.
    pub error_bound_ns: u64,
}

/// Another clock's reading at the snapshot's perf instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairedClock {
    /// The clock's reading, ns.
    pub ns: u64,
    /// `ns - perf_ns`: add it to a perf timestamp to get this clock's time.
    pub offset_ns: i64,
    /// Bound on the error of `ns` (and `offset_ns`): half the narrowest bracket, plus the perf
    /// clock's error bound, plus the rate allowance for moving the pairing to `perf_ns`.
    pub uncertainty_ns: u64,
}

/// A snapshot of the process-wide clock, opening it on first use. See [`ClockSnapshot::take`].
///
/// # Errors
/// [`SnapshotError::Clock`] if the clock cannot be opened; otherwise as [`ClockSnapshot::take`].
pub fn snapshot() -> Result<ClockSnapshot, SnapshotError> {
    ClockSnapshot::take(crate::init().map_err(SnapshotError::Clock)?)
}

/// The narrowest bracket found for one clock, in perf ns.
#[derive(Clone, Copy)]
struct Bracket {
    before_ns: u64,
    after_ns: u64,
    clock_ns: u64,
}

impl Bracket {
    fn width(&self) -> u64 {
        self.after_ns - self.before_ns
    }

    /// The perf instant the clock reading is paired with: the bracket's midpoint.
    fn mid(&self) -> u64 {
        self.before_ns + self.width() / 2
    }
}

const CLOCKS: [(ClockId, &str); 3] = [
    (ClockId::Monotonic, "CLOCK_MONOTONIC"),
    (ClockId::Boottime, "CLOCK_BOOTTIME"),
    (ClockId::Realtime, "CLOCK_REALTIME"),
];

impl ClockSnapshot {
    /// Reads `clock` around each of `CLOCK_MONOTONIC`, `CLOCK_BOOTTIME` and `CLOCK_REALTIME`,
    /// [`SNAPSHOT_TRIES`] times, and keeps each clock's narrowest bracket. The brackets use
    /// ordered counter reads (`lfence; rdtsc` / `isb; mrs`), so neither read can move across the
    /// `clock_gettime` it brackets. Makes no system call where `clock_gettime` is served by the
    /// vDSO; takes a few microseconds.
    ///
    /// # Errors
    /// [`SnapshotError::Read`], [`SnapshotError::NoCounter`], [`SnapshotError::ClockGettime`],
    /// [`SnapshotError::RealtimeBeforeEpoch`].
    pub fn take(clock: &Clock) -> Result<ClockSnapshot, SnapshotError> {
        let mut best: [Option<Bracket>; 3] = [None; 3];
        for _ in 0..SNAPSHOT_TRIES {
            for (slot, &(id, name)) in best.iter_mut().zip(CLOCKS.iter()) {
                let before = read_counter_ordered().ok_or(SnapshotError::NoCounter)?;
                let clock_ns = clock_gettime_ns(id, name)?;
                let after = read_counter_ordered().ok_or(SnapshotError::NoCounter)?;
                // One conversion for both ends: a republish between them cannot skew the width.
                let conversion = clock.exact_conversion().map_err(SnapshotError::Read)?;
                let (before_ns, after_ns) = (
                    conversion.cycles_to_ns(before),
                    conversion.cycles_to_ns(after),
                );
                if after_ns < before_ns {
                    continue;
                }
                let candidate = Bracket {
                    before_ns,
                    after_ns,
                    clock_ns: clock_ns.ok_or(SnapshotError::RealtimeBeforeEpoch)?,
                };
                if slot.is_none_or(|b| candidate.width() < b.width()) {
                    *slot = Some(candidate);
                }
            }
        }
        let [Some(monotonic), Some(boottime), Some(realtime)] = best else {
            return Err(SnapshotError::Read(ReadError::Contended));
        };
        let error_bound_ns = clock.error_bound_ns();
        let perf_ns = monotonic.mid();
        Ok(ClockSnapshot {
            perf_ns,
            monotonic: pair(&monotonic, perf_ns, error_bound_ns),
            boottime: pair(&boottime, perf_ns, error_bound_ns),
            realtime: pair(&realtime, perf_ns, error_bound_ns),
            error_bound_ns,
        })
    }
}

/// Moves a bracket's pairing to `perf_ns` (the clocks advance together, within
/// [`MAX_RATE_DIFFERENCE_PPM`]).
fn pair(bracket: &Bracket, perf_ns: u64, error_bound_ns: u64) -> PairedClock {
    let shift = i128::from(perf_ns) - i128::from(bracket.mid());
    let ns = (i128::from(bracket.clock_ns) + shift).clamp(0, i128::from(u64::MAX));
    let offset = (ns - i128::from(perf_ns)).clamp(i128::from(i64::MIN), i128::from(i64::MAX));
    let rate_allowance = shift
        .unsigned_abs()
        .saturating_mul(u128::from(MAX_RATE_DIFFERENCE_PPM))
        .div_ceil(1_000_000);
    PairedClock {
        // Both clamped into range just above.
        ns: u64::try_from(ns).unwrap_or(u64::MAX),
        offset_ns: i64::try_from(offset).unwrap_or(i64::MAX),
        uncertainty_ns: bracket
            .width()
            .div_ceil(2)
            .saturating_add(error_bound_ns)
            .saturating_add(u64::try_from(rate_allowance).unwrap_or(u64::MAX)),
    }
}

/// `clock_gettime(id)` in ns; `Ok(None)` for a time before 1970.
fn clock_gettime_ns(id: ClockId, name: &'static str) -> Result<Option<u64>, SnapshotError> {
    let ns = time::clock_gettime_ns(id).map_err(|error| SnapshotError::ClockGettime {
        clock: name,
        errno: error.raw_os_error().unwrap_or(0),
    })?;
    Ok(u64::try_from(ns).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairing_moves_with_the_perf_instant() {
        let b = Bracket {
            before_ns: 1_000,
            after_ns: 1_100,
            clock_ns: 50_000,
        };
        let p = pair(&b, 1_050, 7);
        assert_eq!((p.ns, p.offset_ns, p.uncertainty_ns), (50_000, 48_950, 57));
        // 1 ms later: the clock reads 1 ms more, with 500 ns of rate allowance.
        let p = pair(&b, 1_001_050, 7);
        assert_eq!(
            (p.ns, p.offset_ns, p.uncertainty_ns),
            (1_050_000, 48_950, 557)
        );
    }

    /// Kernel-stamped ground truth, independent of the clock's calibration: around each
    /// `prctl(PR_SET_NAME)` the test reads the three system clocks; the kernel's COMM stamp
    /// (perf clock), moved into each clock by the snapshot's offset, must fall between the
    /// readings before and after, widened by the pairing's uncertainty and a 500 ppm rate
    /// allowance over the time since the snapshot.
    // The kernel's stamps are read with the calibration's ground truth.
    #[cfg(feature = "calibrated")]
    #[test]
    fn pairings_hold_against_kernel_stamped_comm_records() {
        use perfclock_calib::{GroundTruth, RecordKind};
        use perfclock_testutil::{ok_or_skip, skip, Need};
        // A machine without perf events skips (loudly) unless PERFCLOCK_REQUIRE_PERF=1 (CI).
        let what = "snapshot vs kernel COMM stamps";
        let Some(clock) = ok_or_skip(what, Need::Perf, crate::init()) else {
            return;
        };
        let mut truth = match GroundTruth::open(&[RecordKind::Comm]) {
            Ok(truth) => truth,
            Err(e) => {
                skip(what, Need::Perf, e);
                return;
            }
        };
        let snap = ClockSnapshot::take(clock).expect("snapshot");
        let read_all =
            &mut || CLOCKS.map(|(id, name)| clock_gettime_ns(id, name).unwrap().unwrap());
        let pairs = [snap.monotonic, snap.boottime, snap.realtime];
        let mut checked = 0;
        let mut worst_margin = [i128::MAX; 3];
        while checked < 300 {
            let stamped = match truth.bracket_with(RecordKind::Comm, read_all) {
                Ok(stamped) => stamped,
                Err(e) if e.is_transient() => continue,
                Err(e) => panic!("bracket: {e}"),
            };
            let elapsed = stamped.kernel_ns.abs_diff(snap.perf_ns);
            for (i, pair) in pairs.iter().enumerate() {
                let allowed = i128::from(pair.uncertainty_ns)
                    + i128::from(elapsed.div_ceil(1_000_000 / MAX_RATE_DIFFERENCE_PPM));
                let kernel_in_clock = i128::from(stamped.kernel_ns) + i128::from(pair.offset_ns);
                let (before, after) = (i128::from(stamped.before[i]), i128::from(stamped.after[i]));
                let margin =
                    (kernel_in_clock - before + allowed).min(after - kernel_in_clock + allowed);
                worst_margin[i] = worst_margin[i].min(margin);
                assert!(
                    margin >= 0,
                    "{}: kernel stamp {} -> {kernel_in_clock} outside [{before}, {after}] +- {allowed} ns ({snap:?})",
                    CLOCKS[i].1,
                    stamped.kernel_ns
                );
            }
            checked += 1;
        }
        println!(
            "{checked} COMM stamps inside every pairing; smallest margins (ns) monotonic {} boottime {} realtime {}; uncertainties {} {} {}",
            worst_margin[0],
            worst_margin[1],
            worst_margin[2],
            snap.monotonic.uncertainty_ns,
            snap.boottime.uncertainty_ns,
            snap.realtime.uncertainty_ns
        );
    }

    #[test]
    fn clocks_are_read() {
        for (id, name) in CLOCKS {
            assert!(clock_gettime_ns(id, name).unwrap().unwrap() > 0, "{name}");
        }
    }
}
