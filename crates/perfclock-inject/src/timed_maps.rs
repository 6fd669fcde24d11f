//! Each perf map followed during the recording ([`crate::perfmap`]) made into a jitdump of its
//! sampled lines, each load at the counter its line was stamped with, and mapped into its
//! process for `perf inject --jit`.
//!
//! - A process whose own jitdump was copied gets none: its runtime's dump names its code
//!   already, with times.
//! - Only the lines whose code the samples touched become loads (as for dumps; every line with
//!   `--all-jit-code` or user stacks), their zeros at most [`crate::dumps::MAX_DUMP_BYTES`] in
//!   all.
//! - A line stamped before the recording's first sample (there when its map was first found)
//!   is loaded at that sample's time: perf takes it for the whole recording, and so does this.
//! - The dump is written into the copies' directory as `map-<n>/jit-<pid>.dump` and mapped by a
//!   copy of the process's first map record in the recording naming it: perf inject reads it
//!   when it meets that record, as a runtime's own dump. A process of another pid namespace is
//!   handled as its dump would be ([`crate::dumps`]): the record is pid 0's and its anonymous
//!   maps move to pid 0.
//! - The map itself is left as it is, and perf still reads it for what the dump does not name.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use perfclock_core::TimeConversion;
use perfclock_jitdump::{write_timed_dump, JitDumpError, TimedLoad};
use perfclock_os::untrusted_file::Root;
use perfclock_perfdata::{maps_of, Layout, Patch, SampledAddresses};

use crate::copies::LazyCopies;
use crate::dumps::MAX_DUMP_BYTES;
use crate::output::OutputError;
use crate::perfmap::{FollowedMap, MapWarning};

/// What became of one perf map followed during the recording.
#[derive(Debug)]
pub struct MapReport {
    /// The process, as the recording names it.
    pub process: u32,
    /// Its pid in its own pid namespace (another than `process` in a container).
    pub pid: u32,
    /// The map as the process names it.
    pub path: PathBuf,
    /// Where its path resolved: [`Root::Process`] for a process in another mount namespace.
    pub root: Root,
    /// How many lines were followed.
    pub lines: usize,
    /// What was wrong with the map.
    pub warnings: Vec<MapWarning>,
    /// What became of it.
    pub outcome: MapOutcome,
}

/// What became of a followed map.
#[derive(Debug)]
#[non_exhaustive]
pub enum MapOutcome {
    /// Made into a timed jitdump, which the output maps into its process.
    Timed {
        /// The dump.
        dump: PathBuf,
        /// How many loads it holds.
        loads: usize,
        /// How many sampled lines were left out past the dump's bound.
        over_bound: usize,
        /// How many samples of its process lie in the code it names (`None`: the samples
        /// could not be read).
        samples: Option<u64>,
    },
    /// Not made into a dump; perf reads the map as it would have.
    Untimed(Untimed),
}

/// Why a followed map was not made into a dump.
#[derive(Debug)]
#[non_exhaustive]
pub enum Untimed {
    /// Its process's own jitdump was injected.
    HasJitDump,
    /// No sample touched its code.
    NotSampled,
    /// The recording maps nothing into its process to insert a map beside.
    NoMapRecord,
    /// The dump could not be written from its lines.
    Dump(JitDumpError),
}

impl fmt::Display for Untimed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HasJitDump => f.write_str("its process's jitdump names its code already"),
            Self::NotSampled => f.write_str("no sample lies in the code it names"),
            Self::NoMapRecord => f.write_str("the recording maps nothing into its process"),
            Self::Dump(error) => write!(f, "its dump could not be made ({error})"),
        }
    }
}

/// What the maps are made into dumps with.
pub(crate) struct Timing<'a, 'c> {
    /// The recording.
    pub input: &'a mut File,
    /// Its layout.
    pub layout: &'a Layout,
    /// The conversion the output carries.
    pub conversion: &'a TimeConversion,
    /// The recording's first sample, ns.
    pub first_sample_ns: Option<u64>,
    /// The sampled addresses, if they could be read.
    pub sampled: Option<&'a SampledAddresses>,
    /// Whether only the sampled lines are kept.
    pub filter: bool,
    /// The processes whose own jitdump was copied.
    pub with_dumps: &'a [u32],
    /// The copies' directory.
    pub copies: &'a mut LazyCopies<'c>,
}

/// Makes each of `maps` into a dump as the [module docs](self) say; what became of each.
///
/// # Errors
/// [`OutputError`] where the output as a whole cannot be written: a dump, the patch.
pub(crate) fn time_all(
    maps: Vec<FollowedMap>,
    timing: &mut Timing<'_, '_>,
    patch: &mut Patch<'_>,
) -> Result<Vec<MapReport>, OutputError> {
    let processes: Vec<u32> = maps.iter().map(|map| map.process).collect();
    let mut first_records: HashMap<u32, u64> = HashMap::new();
    if !processes.is_empty() {
        let records = maps_of(timing.input, timing.layout, |pid, _| {
            processes.contains(&pid)
        })
        .map_err(OutputError::Patch)?;
        for record in records {
            first_records.entry(record.pid).or_insert(record.offset);
        }
    }
    // Lines there before the first sample count from it.
    let floor = timing
        .first_sample_ns
        .map_or(0, |ns| timing.conversion.ns_to_cycles(ns.saturating_sub(1)));
    let mut reports = Vec::with_capacity(maps.len());
    for (index, map) in maps.into_iter().enumerate() {
        let outcome = time_one(
            &map,
            index,
            floor,
            first_records.get(&map.process),
            timing,
            patch,
        )?;
        reports.push(MapReport {
            process: map.process,
            pid: map.pid,
            path: map.path,
            root: map.root,
            lines: map.lines.len(),
            warnings: map.warnings,
            outcome,
        });
    }
    Ok(reports)
}

fn time_one(
    map: &FollowedMap,
    index: usize,
    floor: u64,
    first_record: Option<&u64>,
    timing: &mut Timing<'_, '_>,
    patch: &mut Patch<'_>,
) -> Result<MapOutcome, OutputError> {
    if timing.with_dumps.contains(&map.process) {
        return Ok(MapOutcome::Untimed(Untimed::HasJitDump));
    }
    let sampled = timing.sampled.filter(|_| timing.filter);
    let mut code_bytes = 0u64;
    let mut over_bound = 0;
    let mut kept: Vec<TimedLoad<'_>> = Vec::new();
    for line in &map.lines {
        if sampled.is_some_and(|sampled| !sampled.any_in(map.process, line.start, line.size)) {
            continue;
        }
        if code_bytes + line.size > MAX_DUMP_BYTES {
            over_bound += 1;
            continue;
        }
        code_bytes += line.size;
        kept.push(TimedLoad {
            counter: line.counter.max(floor),
            address: line.start,
            size: line.size,
            name: &line.name,
        });
    }
    if kept.is_empty() {
        return Ok(MapOutcome::Untimed(Untimed::NotSampled));
    }
    let Some(&first_record) = first_record else {
        return Ok(MapOutcome::Untimed(Untimed::NoMapRecord));
    };
    let dir = timing.copies.path()?.join(format!("map-{index}"));
    let dump = dir.join(format!("jit-{}.dump", map.process));
    match write_dump(&dir, &dump, map.process, &kept) {
        Ok(()) => {}
        Err(Failure::Write(error)) => {
            let _ = fs::remove_dir_all(&dir);
            return Err(OutputError::Copy { path: dump, error });
        }
        Err(Failure::Dump(error)) => {
            let _ = fs::remove_dir_all(&dir);
            return Ok(MapOutcome::Untimed(Untimed::Dump(error)));
        }
    }
    let namespaced = map.pid != map.process;
    patch
        .insert_map_copy(
            timing.input,
            first_record,
            dump.as_os_str().as_encoded_bytes(),
            namespaced.then_some(0),
        )
        .map_err(OutputError::Patch)?;
    let ranges: Vec<(u64, u64)> = kept.iter().map(|load| (load.address, load.size)).collect();
    Ok(MapOutcome::Timed {
        dump,
        loads: kept.len(),
        over_bound,
        samples: timing
            .sampled
            .map(|sampled| sampled.samples_in(map.process, &ranges)),
    })
}

/// Why a dump was not written: its lines' fault or the write's.
enum Failure {
    Dump(JitDumpError),
    Write(io::Error),
}

/// `dir` made (0700) and the dump of `loads` written into `dump`.
fn write_dump(dir: &Path, dump: &Path, pid: u32, loads: &[TimedLoad<'_>]) -> Result<(), Failure> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(Failure::Write)?;
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dump)
        .map_err(Failure::Write)?;
    let mut out = BufWriter::new(file);
    write_timed_dump(&mut out, dump, pid, loads.iter().copied()).map_err(|error| match error {
        JitDumpError::Io { source, .. } => Failure::Write(source),
        other => Failure::Dump(other),
    })?;
    out.flush().map_err(Failure::Write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Child, Command};

    use perfclock_jitdump::foreign::DumpReader;
    use perfclock_perfdata::read_layout;
    use perfclock_perfdata::synth::{mmap2, Synth};

    use crate::NoSignals;

    /// A process of this test's own (so no other test writes its perf map), with a perf map
    /// of three lines in `/tmp`; killed and its map removed when dropped.
    struct Mapped {
        child: Child,
        map: PathBuf,
    }

    impl Mapped {
        fn new() -> Mapped {
            let child = Command::new("sleep").arg("600").spawn().expect("run sleep");
            let map = PathBuf::from(format!("/tmp/perf-{}.map", child.id()));
            Mapped { child, map }
        }

        fn pid(&self) -> u32 {
            self.child.id()
        }

        /// The map followed as a recording would: line `a` there when it was first opened
        /// (at counter 500), `b` appearing at 9000, `c` at 12000.
        fn followed(&self) -> FollowedMap {
            let mut writer = File::create(&self.map).unwrap();
            writer.write_all(b"1000 10 a\n").unwrap();
            let mut map = FollowedMap::open(self.pid(), 500).unwrap().unwrap();
            writer.write_all(b"2000 20 b\n").unwrap();
            map.read_new_stamped(|| 9_000);
            writer.write_all(b"3000 30 c\n").unwrap();
            map.read_new_stamped(|| 12_000);
            let stamps: Vec<u64> = map.lines.iter().map(|line| line.counter).collect();
            assert_eq!(stamps, [500, 9_000, 12_000]);
            map
        }
    }

    impl Drop for Mapped {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = fs::remove_file(&self.map);
        }
    }

    /// A recording (in `dir`) of `records`, opened.
    fn recording(dir: &Path, records: Vec<Vec<u8>>) -> File {
        let path = dir.join("in.data");
        let synth = Synth {
            records,
            ..Synth::default()
        };
        fs::write(&path, synth.build().bytes).unwrap();
        File::open(path).unwrap()
    }

    /// `maps` timed against a recording of `records` whose first sample is at 1000 ns (1 ns
    /// per counter tick), keeping every line; the reports and whether the recording was
    /// patched.
    fn time(
        dir: &Path,
        records: Vec<Vec<u8>>,
        maps: Vec<FollowedMap>,
        with_dumps: &[u32],
    ) -> (Vec<MapReport>, bool, Option<crate::CopiesDir>) {
        let mut input = recording(dir, records);
        let layout = read_layout(&mut input).unwrap();
        let mut patch = Patch::new(&layout);
        let conversion = TimeConversion::new(1 << 31, 31, 0).unwrap();
        let output = dir.join("out.data");
        let mut copies = LazyCopies::new(&output, &NoSignals);
        let mut timing = Timing {
            input: &mut input,
            layout: &layout,
            conversion: &conversion,
            first_sample_ns: Some(1_000),
            sampled: None,
            filter: false,
            with_dumps,
            copies: &mut copies,
        };
        let reports = time_all(maps, &mut timing, &mut patch).unwrap();
        let patched = !patch.is_empty();
        (reports, patched, copies.into_dir())
    }

    #[test]
    fn a_followed_maps_lines_become_loads_at_their_stamps() {
        let mapped = Mapped::new();
        let pid = mapped.pid();
        let dir = tempfile::tempdir().unwrap();
        let records = vec![mmap2(pid, "/usr/bin/sleep")];
        let (reports, patched, copies) = time(dir.path(), records, vec![mapped.followed()], &[]);
        let copies = copies.expect("the dump's directory");
        assert_eq!(reports.len(), 1);
        let report = &reports[0];
        assert_eq!((report.process, report.lines), (pid, 3));
        let MapOutcome::Timed {
            dump,
            loads,
            over_bound,
            samples,
        } = &report.outcome
        else {
            panic!("{:?}", report.outcome);
        };
        assert_eq!(
            *dump,
            copies.path().join("map-0").join(format!("jit-{pid}.dump"))
        );
        assert_eq!((*loads, *over_bound, *samples), (3, 0, None));
        // The recording maps the dump into the process.
        assert!(patched);

        let file = File::open(dump).unwrap();
        let len = file.metadata().unwrap().len();
        let mut reader = DumpReader::new(file, len).unwrap();
        assert_eq!(reader.pid(), pid);
        assert!(reader.has_arch_timestamps());
        let mut loads = Vec::new();
        while let Some(record) = reader.next_record().unwrap() {
            if record.kind == 0 {
                loads.push((record.timestamp, record.code));
            }
        }
        // Line a, there before the first sample (counter 1000), counts from just before it.
        assert_eq!(
            loads,
            [
                (999, Some((0x1000, 0x10))),
                (9_000, Some((0x2000, 0x20))),
                (12_000, Some((0x3000, 0x30))),
            ]
        );
    }

    #[test]
    fn a_process_with_its_own_dump_gets_none() {
        let mapped = Mapped::new();
        let pid = mapped.pid();
        let dir = tempfile::tempdir().unwrap();
        let records = vec![mmap2(pid, "/usr/bin/sleep")];
        let (reports, patched, copies) = time(dir.path(), records, vec![mapped.followed()], &[pid]);
        assert!(matches!(
            reports[0].outcome,
            MapOutcome::Untimed(Untimed::HasJitDump)
        ));
        assert!(!patched);
        assert!(copies.is_none());
    }

    #[test]
    fn a_process_the_recording_maps_nothing_into_gets_none() {
        let mapped = Mapped::new();
        let dir = tempfile::tempdir().unwrap();
        // Another process's map only.
        let records = vec![mmap2(mapped.pid() + 1, "/usr/bin/sleep")];
        let (reports, patched, _) = time(dir.path(), records, vec![mapped.followed()], &[]);
        assert!(matches!(
            reports[0].outcome,
            MapOutcome::Untimed(Untimed::NoMapRecord)
        ));
        assert!(!patched);
    }

    #[test]
    fn unsampled_lines_make_no_dump_when_filtered() {
        let mapped = Mapped::new();
        let pid = mapped.pid();
        let dir = tempfile::tempdir().unwrap();
        let mut input = recording(dir.path(), vec![mmap2(pid, "/usr/bin/sleep")]);
        let layout = read_layout(&mut input).unwrap();
        let mut patch = Patch::new(&layout);
        let conversion = TimeConversion::new(1 << 31, 31, 0).unwrap();
        let output = dir.path().join("out.data");
        let mut copies = LazyCopies::new(&output, &NoSignals);
        let no_samples = SampledAddresses::default();
        let mut timing = Timing {
            input: &mut input,
            layout: &layout,
            conversion: &conversion,
            first_sample_ns: Some(1_000),
            sampled: Some(&no_samples),
            filter: true,
            with_dumps: &[],
            copies: &mut copies,
        };
        let reports = time_all(vec![mapped.followed()], &mut timing, &mut patch).unwrap();
        assert!(matches!(
            reports[0].outcome,
            MapOutcome::Untimed(Untimed::NotSampled)
        ));
        assert!(patch.is_empty());
        assert!(copies.into_dir().is_none());
    }
}
