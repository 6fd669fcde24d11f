//! What [`inject`](crate::inject) did: the TIME_CONV's source, each dump's fate, the warnings,
//! and the copies' directory, which the caller keeps once OUT is in place.

use std::fmt;
use std::path::{Path, PathBuf};

use perfclock_core::untrusted::Untrusted;
use perfclock_perfdata::ClockData;

use crate::clock_data::ClockDataWarning;
use crate::copies::CopiesDir;
use crate::dumps::{DumpOutcome, DumpReport, Writer};
use crate::input::shown;
use crate::output::TempFiles;
use crate::time_conv::{BootWarning, TimeConvSource};
use crate::timed_maps::{MapOutcome, MapReport};

/// What was written, and the copies the output names.
#[derive(Debug)]
pub struct Injected {
    /// What was done.
    pub outcome: Outcome,
    /// The HEADER_CLOCK_DATA added, if any.
    pub clock_data: Option<ClockData>,
    /// The copies' directory, which the output names: removed when dropped, unless kept
    /// ([`Injected::keep_copies`]) once the output is in place.
    pub copies: Option<CopiesDir>,
}

impl Injected {
    /// Keeps the copies' directory (if one was made): where it is.
    pub fn keep_copies(self, temps: &dyn TempFiles) -> Option<PathBuf> {
        self.copies.map(|copies| copies.keep(temps))
    }
}

/// What was done.
#[derive(Debug)]
#[non_exhaustive]
pub struct Outcome {
    /// Where OUT's TIME_CONV comes from.
    pub time_conv: TimeConvSource,
    /// Each dump the recording maps, and what became of it.
    pub dumps: Vec<DumpReport>,
    /// Each perf map followed during the recording, and what became of it.
    pub maps: Vec<MapReport>,
    /// For a recording made without following its perf maps, those of its processes here: they
    /// are left to perf report, untimed.
    pub untimed_maps: Vec<PathBuf>,
    /// Why the dumps kept every code load, if they did.
    pub unfiltered: Option<Unfiltered>,
    /// What was noticed and did not stop the step.
    pub warnings: Vec<Warning>,
}

/// Why every code load went to perf inject.
#[derive(Debug)]
#[non_exhaustive]
pub enum Unfiltered {
    /// `--all-jit-code` asked for it.
    Asked,
    /// The samples carry user stacks (`--call-graph dwarf`), which perf unwinds only when it
    /// reports.
    UserStacks,
    /// The samples could not be read.
    Unreadable(perfclock_perfdata::PerfDataError),
}

impl fmt::Display for Unfiltered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Asked => f.write_str("--all-jit-code"),
            Self::UserStacks => f.write_str(
                "the samples carry user stacks (--call-graph dwarf), which perf unwinds only \
                 when it reports: which JIT code those frames reach is not known before",
            ),
            Self::Unreadable(error) => write!(f, "the samples could not be read ({error})"),
        }
    }
}

/// Something noticed that did not stop the step.
#[derive(Debug)]
#[non_exhaustive]
pub enum Warning {
    /// The jitdump maps are inside compressed records (`perf record -z`), which perf inject
    /// does not look into.
    CompressedMaps,
    /// The sidecars' boot against this machine's.
    Boot(BootWarning),
    /// The clock data's step check.
    ClockData(ClockDataWarning),
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CompressedMaps => f.write_str(
                "IN's jitdump maps are inside compressed records (perf record -z); perf inject \
                 --jit (6.1 at least) does not look inside them and will inject no jitted code: \
                 record without -z for perf inject",
            ),
            Self::Boot(warning) => write!(f, "{warning}"),
            Self::ClockData(warning) => write!(f, "{warning}"),
        }
    }
}

impl Outcome {
    /// Whether OUT maps a jitdump for `perf inject --jit`.
    pub fn maps_jitdumps(&self) -> bool {
        self.dumps
            .iter()
            .any(|dump| matches!(dump.outcome, DumpOutcome::Copied { .. }))
            || self
                .maps
                .iter()
                .any(|map| matches!(map.outcome, MapOutcome::Timed { .. }))
    }

    /// One line per warning, one per dump of another writer (copied where to, or left out
    /// why), one for perfclock's dumps together (how many of their code loads the samples
    /// touched, which alone reach `perf inject --jit`), one per perf map followed (and one per
    /// thing wrong with it), and one per runtime: its dumps and the samples in their code.
    /// Paths and names are escaped for a terminal.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .warnings
            .iter()
            .map(|warning| format!("warning: {warning}"))
            .collect();
        let (mut own, mut own_loads, mut own_kept) = (0usize, 0usize, 0usize);
        for dump in &self.dumps {
            match &dump.outcome {
                DumpOutcome::Copied {
                    writer: Writer::Perfclock,
                    loads,
                    ..
                } => {
                    own += 1;
                    own_loads += loads.loads;
                    own_kept += loads.kept;
                }
                DumpOutcome::Copied {
                    writer: Writer::Other,
                    copy,
                    loads,
                    retimed_bound_ns,
                    ..
                } => lines.push(other_line(&dump.path, copy, loads, *retimed_bound_ns)),
                DumpOutcome::Skipped(reason) => lines.push(format!(
                    "warning: {}: not injected: {}",
                    shown(&dump.path),
                    perfclock::error_chain(reason)
                )),
            }
        }
        if own > 0 {
            lines.push(format!(
                "perfclock's jitdumps: {own_kept} of {own_loads} code loads in {own} dump(s) hold \
                 sampled code; only those become images for perf report"
            ));
        }
        if let Some(why) = &self.unfiltered {
            lines.push(format!("every code load goes to perf inject --jit: {why}"));
        }
        for map in &self.maps {
            lines.extend(map_lines(map));
        }
        for map in &self.untimed_maps {
            lines.push(format!(
                "{}: a perf map, with no time for its lines: perf report names each address \
                 after one of them whenever the sample was; record with `perfclock record`, \
                 which stamps each line as it appears, to name code that moved",
                shown(map)
            ));
        }
        lines.extend(self.runtime_lines());
        lines
    }

    /// Per runtime (the command name of the processes whose dumps were copied), its dumps and
    /// the samples whose IP lies in the code copied.
    pub fn runtime_lines(&self) -> Vec<String> {
        let mut runtimes: Vec<(String, usize, Option<u64>)> = Vec::new();
        for dump in &self.dumps {
            let DumpOutcome::Copied { samples, .. } = &dump.outcome else {
                continue;
            };
            let name = dump.command.clone().unwrap_or_else(|| "?".to_owned());
            match runtimes.iter_mut().find(|(runtime, ..)| *runtime == name) {
                Some((_, dumps, total)) => {
                    *dumps += 1;
                    *total = total.zip(*samples).map(|(a, b)| a + b);
                }
                None => runtimes.push((name, 1, *samples)),
            }
        }
        runtimes
            .into_iter()
            .map(|(name, dumps, samples)| {
                let samples = samples.map_or("unknown".to_owned(), |s| s.to_string());
                format!(
                    "JIT code of {}: {dumps} dump(s), {samples} sample(s) with their IP in it \
                     (call chains not counted)",
                    Untrusted::str(&name)
                )
            })
            .collect()
    }
}

/// A followed map's line, and one per thing wrong with it.
fn map_lines(map: &MapReport) -> Vec<String> {
    let name = format!("process {}'s perf map {}", map.process, shown(&map.path));
    let mut lines: Vec<String> = map
        .warnings
        .iter()
        .map(|warning| format!("warning: {name}: {warning}"))
        .collect();
    let summary = match &map.outcome {
        MapOutcome::Timed {
            dump,
            loads,
            over_bound,
            samples,
        } => {
            if *over_bound > 0 {
                lines.push(format!(
                    "warning: {name}: {over_bound} sampled line(s) left out: their code would \
                     take the dump past {} GiB",
                    crate::dumps::MAX_DUMP_BYTES >> 30
                ));
            }
            let samples = samples.map_or("unknown".to_owned(), |s| s.to_string());
            format!(
                "{name}: {} line(s) followed and stamped as they appeared; the {loads} sampled \
                 are named in time through {} ({samples} sample(s) with their IP in them)",
                map.lines,
                shown(dump)
            )
        }
        MapOutcome::Untimed(why) => format!(
            "{name}: {} line(s) followed, not timed: {why}; perf reads the map as it is",
            map.lines
        ),
    };
    lines.push(summary);
    lines
}

fn other_line(
    dump: &Path,
    copy: &Path,
    loads: &perfclock_jitdump::foreign::CopyCounts,
    retimed_bound_ns: Option<u64>,
) -> String {
    match retimed_bound_ns {
        Some(bound) => format!(
            "{}: CLOCK_MONOTONIC timestamps (another writer's): converted to counter values \
             within {bound} ns, {} of its {} code loads sampled, into {}, which the output maps \
             instead",
            shown(dump),
            loads.kept,
            loads.loads,
            shown(copy)
        ),
        None => format!(
            "{}: counter timestamps (another writer's): {} of its {} code loads sampled, copied \
             into {}, which the output maps instead",
            shown(dump),
            loads.kept,
            loads.loads,
            shown(copy)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dumps::DumpError;
    use crate::perfmap::MapWarning;
    use crate::timed_maps::Untimed;
    use perfclock_core::BootId;
    use perfclock_jitdump::foreign::CopyCounts;
    use perfclock_os::untrusted_file::Root;

    /// A path with a newline and an escape sequence in it, and how it is printed.
    const HOSTILE: &str = "/tmp/a\nb\x1b[2J";
    const HOSTILE_SHOWN: &str = "/tmp/a\\nb\\x1b[2J";

    fn outcome() -> Outcome {
        Outcome {
            time_conv: TimeConvSource::NotNeeded,
            dumps: Vec::new(),
            maps: Vec::new(),
            untimed_maps: Vec::new(),
            unfiltered: None,
            warnings: Vec::new(),
        }
    }

    fn dump(path: &str, command: Option<&str>, outcome: DumpOutcome) -> DumpReport {
        DumpReport {
            path: PathBuf::from(path),
            process: 42,
            command: command.map(str::to_owned),
            file: None,
            root: Root::Here,
            outcome,
        }
    }

    fn copied(
        writer: Writer,
        copy: &str,
        loads: usize,
        kept: usize,
        samples: Option<u64>,
    ) -> DumpOutcome {
        DumpOutcome::Copied {
            writer,
            copy: PathBuf::from(copy),
            loads: CopyCounts { loads, kept },
            samples,
            retimed_bound_ns: None,
        }
    }

    fn map(path: &str, warnings: Vec<MapWarning>, outcome: MapOutcome) -> MapReport {
        MapReport {
            process: 7,
            pid: 7,
            path: PathBuf::from(path),
            root: Root::Here,
            lines: 12,
            warnings,
            outcome,
        }
    }

    /// No line holds a raw newline or escape byte.
    fn assert_escaped(lines: &[String]) {
        for line in lines {
            assert!(!line.contains(['\n', '\x1b']), "{line:?}");
        }
    }

    #[test]
    fn a_skipped_dump_is_a_warning_naming_it_escaped() {
        let mut outcome = outcome();
        outcome.dumps.push(dump(
            HOSTILE,
            None,
            DumpOutcome::Skipped(DumpError::NoPairing),
        ));
        let lines = outcome.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with(&format!(
                "warning: {HOSTILE_SHOWN}: not injected: has CLOCK_MONOTONIC timestamps"
            )),
            "{lines:?}"
        );
        assert_escaped(&lines);
        assert!(!outcome.maps_jitdumps());
    }

    #[test]
    fn another_writers_copy_names_the_dump_and_the_copy_escaped() {
        let mut outcome = outcome();
        let mut retimed = copied(Writer::Other, "/out/copy\x07.dump", 10, 3, Some(5));
        if let DumpOutcome::Copied {
            retimed_bound_ns, ..
        } = &mut retimed
        {
            *retimed_bound_ns = Some(1_500);
        }
        outcome.dumps.push(dump(HOSTILE, Some("node"), retimed));
        let lines = outcome.lines();
        assert_eq!(
            lines[0],
            format!(
                "{HOSTILE_SHOWN}: CLOCK_MONOTONIC timestamps (another writer's): converted to \
                 counter values within 1500 ns, 3 of its 10 code loads sampled, into \
                 /out/copy\\x07.dump, which the output maps instead"
            )
        );
        assert_eq!(
            lines[1],
            "JIT code of node: 1 dump(s), 5 sample(s) with their IP in it (call chains not \
             counted)"
        );
        assert_eq!(lines.len(), 2);
        assert!(outcome.maps_jitdumps());
    }

    #[test]
    fn perfclocks_dumps_are_one_line_and_runtimes_sum_their_samples() {
        let mut outcome = outcome();
        outcome.dumps.push(dump(
            "/tmp/jit-1.dump",
            Some("java\x1b"),
            copied(Writer::Perfclock, "/o/1", 10, 3, Some(5)),
        ));
        outcome.dumps.push(dump(
            "/tmp/jit-2.dump",
            Some("java\x1b"),
            copied(Writer::Perfclock, "/o/2", 20, 4, Some(6)),
        ));
        outcome.dumps.push(dump(
            "/tmp/jit-3.dump",
            None,
            copied(Writer::Perfclock, "/o/3", 1, 1, None),
        ));
        let lines = outcome.lines();
        assert_eq!(
            lines,
            [
                "perfclock's jitdumps: 8 of 31 code loads in 3 dump(s) hold sampled code; only \
                 those become images for perf report",
                "JIT code of java\\x1b: 2 dump(s), 11 sample(s) with their IP in it (call chains \
                 not counted)",
                "JIT code of ?: 1 dump(s), unknown sample(s) with their IP in it (call chains not \
                 counted)",
            ]
        );
    }

    #[test]
    fn warnings_come_first_and_a_boot_warning_names_the_sidecar_escaped() {
        let mut outcome = outcome();
        let (written_on, this_boot) = (BootId::from_words([1, 2]), BootId::from_words([1, 3]));
        outcome.warnings.push(Warning::Boot(BootWarning::OtherBoot {
            path: PathBuf::from(HOSTILE),
            written_on,
            this_boot,
        }));
        outcome.warnings.push(Warning::CompressedMaps);
        outcome.unfiltered = Some(Unfiltered::Asked);
        let lines = outcome.lines();
        assert!(
            lines[0].starts_with(&format!(
                "warning: {HOSTILE_SHOWN} was written on boot {written_on}, this machine is on boot \
                 {this_boot}"
            )),
            "{lines:?}"
        );
        assert!(lines[1].starts_with("warning: IN's jitdump maps are inside compressed records"));
        assert_eq!(
            lines[2],
            "every code load goes to perf inject --jit: --all-jit-code"
        );
        assert_eq!(lines.len(), 3);
        assert_escaped(&lines);
    }

    #[test]
    fn a_timed_map_names_its_dump_and_its_warnings_escaped() {
        let mut outcome = outcome();
        outcome.maps.push(map(
            HOSTILE,
            vec![MapWarning::Replaced],
            MapOutcome::Timed {
                dump: PathBuf::from("/o/map-0/jit-7\n.dump"),
                loads: 4,
                over_bound: 2,
                samples: Some(9),
            },
        ));
        let lines = outcome.lines();
        let name = format!("process 7's perf map {HOSTILE_SHOWN}");
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with(&format!("warning: {name}: ")),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with(&format!("warning: {name}: 2 sampled line(s) left out")),
            "{lines:?}"
        );
        assert_eq!(
            lines[2],
            format!(
                "{name}: 12 line(s) followed and stamped as they appeared; the 4 sampled are \
                 named in time through /o/map-0/jit-7\\n.dump (9 sample(s) with their IP in them)"
            )
        );
        assert_escaped(&lines);
        assert!(outcome.maps_jitdumps());
    }

    #[test]
    fn an_untimed_map_says_why_and_maps_no_jitdump() {
        let mut outcome = outcome();
        outcome.maps.push(map(
            "/tmp/perf-7.map",
            Vec::new(),
            MapOutcome::Untimed(Untimed::NotSampled),
        ));
        outcome.untimed_maps.push(PathBuf::from(HOSTILE));
        let lines = outcome.lines();
        assert_eq!(
            lines[0],
            "process 7's perf map /tmp/perf-7.map: 12 line(s) followed, not timed: no sample \
             lies in the code it names; perf reads the map as it is"
        );
        assert!(
            lines[1].starts_with(&format!("{HOSTILE_SHOWN}: a perf map, with no time")),
            "{lines:?}"
        );
        assert_eq!(lines.len(), 2);
        assert_escaped(&lines);
        assert!(!outcome.maps_jitdumps());
    }
}
