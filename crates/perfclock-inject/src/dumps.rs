//! Every jitdump the recording maps, read once and copied into perfclock's private directory:
//! the only file `perf inject --jit` reads for it.
//!
//! A dump is another process's file (another user's, when root records the machine). It is
//! opened as an untrusted file ([`perfclock_os::untrusted_file`]: no link followed, a regular
//! file with one name, at most [`MAX_DUMP_BYTES`] and not mostly holes, read with its owner's
//! credentials), inside the root of the process that mapped it when that process lives in
//! another mount namespace (a container). It is read as a stream and written to
//! `COPIES/dump-N/jit-<pid>.dump` ([`perfclock_jitdump::foreign::copy`]) with only the code
//! loads the recording's samples or call chains touched, and, for another writer's
//! `CLOCK_MONOTONIC` dump, each timestamp moved to the counter value the output's TIME_CONV
//! converts to the same perf time ([`Pairings`]). The recording is then pointed at the copy
//! (a map of the copy inserted, the original's maps disabled: `/jit-` becomes `/jiX-`), so
//! `perf inject --jit` never opens the original, and writes its `jitted-*.so` beside the copy.
//!
//! A dump that cannot be read, or whose clock cannot be told, is a [`DumpOutcome::Skipped`]
//! naming why; its maps are disabled and the rest is injected. Only a failure to write the
//! copies or the output ends the whole step.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use perfclock_core::TimeConversion;
use perfclock_jitdump::foreign::{self, CopyCounts, CopyPolicy, DumpReader, Record};
use perfclock_jitdump::ForeignDumpError;
use perfclock_os::untrusted_file::{open_untrusted, Root, UntrustedFile, UntrustedFileError};
use perfclock_perfdata::{JitDumpMap, Patch, SampledAddresses};

use crate::copies::LazyCopies;
use crate::output::OutputError;
use crate::pairings::Pairings;
use crate::sidecar::SidecarError;

/// The longest dump read: a runtime writes a few MB an hour; a dump past this is not one.
pub const MAX_DUMP_BYTES: u64 = 4 << 30;

/// Who wrote a dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// perfclock's writer (its time conversion record beside it): counter timestamps.
    Perfclock,
    /// Another runtime's (no record beside it): its header says which clock.
    Other,
}

/// Why a dump was left out.
#[derive(Debug)]
#[non_exhaustive]
pub enum DumpError {
    /// Its time conversion record is there but unusable.
    Sidecar(SidecarError),
    /// It could not be opened as an untrusted file.
    Open(UntrustedFileError),
    /// Its process lived in another pid namespace and has exited: the dump was in its mount
    /// namespace, which is gone, and a file at that path here is not it.
    ProcessGone {
        /// The process, as the recording names it.
        process: u32,
        /// Its pid in its own namespace (the dump's name's).
        pid: u32,
    },
    /// Its header names another process than its file name.
    OtherPid {
        /// The header's pid.
        header: u32,
        /// The name's.
        name: u32,
    },
    /// It is not a jitdump perfclock can read.
    Read(ForeignDumpError),
    /// A record's stamp is no `CLOCK_MONOTONIC` reading of this boot.
    NotMonotonic {
        /// The stamp.
        stamp: u64,
        /// `CLOCK_MONOTONIC` at the latest pairing.
        latest: u64,
    },
    /// No `CLOCK_MONOTONIC`/perf-clock pairing (or no TIME_CONV) to convert with.
    NoPairing,
    /// Its map is inside a compressed record (`perf record -z`), which cannot be pointed
    /// elsewhere.
    CompressedMap,
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sidecar(error) => write!(f, "{error}"),
            Self::Open(_) => f.write_str(
                "cannot be read where the recording names it (if it moved since, pass \
                 --dump-dir with its directory)",
            ),
            Self::ProcessGone { process, pid } => write!(
                f,
                "its process ({process}, pid {pid} in its own namespace) has exited, and its \
                 dump was in its mount namespace: copy it while the process lives (perfclock \
                 record does)"
            ),
            Self::OtherPid { header, name } => write!(
                f,
                "its header names pid {header}, its file name pid {name}: not that process's dump"
            ),
            Self::Read(_) => f.write_str("is not a readable jitdump"),
            Self::NotMonotonic { stamp, latest } => write!(
                f,
                "has neither counter timestamps (JITDUMP_FLAGS_ARCH_TIMESTAMP) nor \
                 CLOCK_MONOTONIC ones of this boot: a record says {stamp}, CLOCK_MONOTONIC was \
                 {latest} after the recording; its clock cannot be told, so its code is not \
                 named (record the JIT with -k 1 if it stamps another clock)"
            ),
            Self::NoPairing => f.write_str(
                "has CLOCK_MONOTONIC timestamps and there is no CLOCK_MONOTONIC/perf-clock \
                 pairing to convert them with",
            ),
            Self::CompressedMap => f.write_str(
                "its map is inside a compressed record (perf record -z): record without -z",
            ),
        }
    }
}

impl std::error::Error for DumpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Sidecar(error) => std::error::Error::source(error),
            Self::Open(error) => Some(error),
            Self::Read(error) => Some(error),
            Self::ProcessGone { .. }
            | Self::OtherPid { .. }
            | Self::NotMonotonic { .. }
            | Self::NoPairing
            | Self::CompressedMap => None,
        }
    }
}

/// What became of one dump.
#[derive(Debug)]
#[non_exhaustive]
pub enum DumpOutcome {
    /// Copied: the output maps the copy instead.
    Copied {
        /// Who wrote it.
        writer: Writer,
        /// The copy.
        copy: PathBuf,
        /// Its code loads, and how many the copy keeps.
        loads: CopyCounts,
        /// How many samples of its process lie in the code the copy keeps (`None`: the
        /// samples could not be read).
        samples: Option<u64>,
        /// Where its timestamps were `CLOCK_MONOTONIC`, the largest error bound of one moved
        /// to a counter value, ns.
        retimed_bound_ns: Option<u64>,
    },
    /// Not injected, for the reason given; its maps were disabled.
    Skipped(DumpError),
}

/// One dump the recording maps, and what is known of it before it is read.
#[derive(Debug)]
pub(crate) struct Dump<'a> {
    /// Its maps.
    pub map: &'a JitDumpMap,
    /// Where its path resolves.
    pub root: Root,
    /// Its writer, or why it is left out already.
    pub writer: Result<Writer, DumpError>,
    /// The dump, opened while its process lived.
    pub held: Option<UntrustedFile>,
    /// Its process's command name, if known.
    pub command: Option<String>,
}

/// One dump the recording maps, and what became of it.
#[derive(Debug)]
pub struct DumpReport {
    /// The dump as the recording names it.
    pub path: PathBuf,
    /// The process that mapped it, as the recording names it.
    pub process: u32,
    /// That process's command name (`comm`), where it was seen.
    pub command: Option<String>,
    /// The file read: its owner's uid, its device and inode (`None`: none was read).
    pub file: Option<(u32, (u64, u64))>,
    /// Where its path resolved: [`Root::Process`] for a process in another mount namespace.
    pub root: Root,
    /// What became of it.
    pub outcome: DumpOutcome,
}

/// How each dump is copied.
pub(crate) struct Copying<'a> {
    /// The recording.
    pub input: &'a mut File,
    /// The conversion the output carries (`CLOCK_MONOTONIC` dumps need one).
    pub conversion: Option<&'a TimeConversion>,
    /// The pairings for `CLOCK_MONOTONIC` dumps.
    pub pairings: &'a Pairings,
    /// The sampled addresses, if they could be read.
    pub sampled: Option<&'a SampledAddresses>,
    /// Whether only the sampled loads are kept.
    pub filter: bool,
    /// Where a dump is looked for when it is not where the recording names it.
    pub dump_dirs: &'a [PathBuf],
    /// The copies' directory.
    pub copies: LazyCopies<'a>,
}

impl<'a> Copying<'a> {
    /// How a `CLOCK_MONOTONIC` dump is retimed: none without a conversion or a pairing.
    fn retime(&self) -> Option<Retime<'a>> {
        Some(Retime {
            conversion: self.conversion?,
            pairings: self.pairings,
            latest: self.pairings.latest()?,
        })
    }
}

/// Copies each of `dumps` as the [module docs](self) say; what became of each.
///
/// # Errors
/// [`OutputError`] only where the output as a whole cannot be written: a copy, the patch.
pub(crate) fn copy_all(
    dumps: Vec<Dump<'_>>,
    copying: &mut Copying<'_>,
    patch: &mut Patch<'_>,
) -> Result<Vec<DumpReport>, OutputError> {
    let mut outcomes = Vec::with_capacity(dumps.len());
    for (index, dump) in dumps.into_iter().enumerate() {
        let mut file = None;
        let outcome = match dump.writer {
            Ok(writer) => {
                let source = match dump.held {
                    Some(file) => Source::Held(file),
                    None => Source::Path(dump.root),
                };
                copy_one(dump.map, source, writer, index, copying, patch, &mut file)?
            }
            Err(error) => DumpOutcome::Skipped(error),
        };
        if let DumpOutcome::Skipped(_) = outcome {
            patch
                .disable_jitdump(dump.map)
                .map_err(OutputError::Patch)?;
        }
        outcomes.push(DumpReport {
            path: dump.map.path.clone(),
            process: dump.map.process,
            command: dump.command,
            file,
            root: dump.root,
            outcome,
        });
    }
    Ok(outcomes)
}

/// Where a dump is read from.
enum Source {
    /// Its path, resolved under this root.
    Path(Root),
    /// The file opened while its process lived.
    Held(UntrustedFile),
}

impl Source {
    /// The dump opened (again, when held: its size is taken anew) within its bound.
    fn open(self, map: &JitDumpMap, dump_dirs: &[PathBuf]) -> Result<UntrustedFile, DumpError> {
        match self {
            Source::Path(root) => locate(map, root, dump_dirs),
            Source::Held(mut file) => file
                .refresh(MAX_DUMP_BYTES)
                .map(|()| file)
                .map_err(DumpError::Open),
        }
    }
}

/// A dump's copy made and the recording pointed at it, or why it was left out.
fn copy_one(
    map: &JitDumpMap,
    source: Source,
    writer: Writer,
    index: usize,
    copying: &mut Copying<'_>,
    patch: &mut Patch<'_>,
    file: &mut Option<(u32, (u64, u64))>,
) -> Result<DumpOutcome, OutputError> {
    if map.first_record.is_none() {
        return Ok(DumpOutcome::Skipped(DumpError::CompressedMap));
    }
    let opened = match source.open(map, copying.dump_dirs) {
        Ok(opened) => opened,
        Err(error) => return Ok(DumpOutcome::Skipped(error)),
    };
    *file = Some((opened.uid, opened.id));
    let mut reader = match DumpReader::new(BufReader::new(opened.file), opened.len) {
        Ok(reader) => reader,
        Err(error) => return Ok(DumpOutcome::Skipped(DumpError::Read(error))),
    };
    if reader.pid() != map.pid {
        return Ok(DumpOutcome::Skipped(DumpError::OtherPid {
            header: reader.pid(),
            name: map.pid,
        }));
    }
    let monotonic = writer == Writer::Other && !reader.has_arch_timestamps();
    let retime = match (monotonic, copying.retime()) {
        (false, _) => None,
        (true, None) => return Ok(DumpOutcome::Skipped(DumpError::NoPairing)),
        (true, retime) => retime,
    };
    // A process of another pid namespace (a container): its dump names it by its pid there.
    // The copy names it by its pid here, in its header and code loads, so the images perf
    // inject makes are mapped into the process the samples name; and the recording maps the
    // copy as pid 0's, which perf inject takes for a map it synthesized system-wide: it then
    // reads the copy here, neither entering the process's mount namespace (where the copy is
    // not) nor requiring the process to be alive to tell its namespace pid.
    let namespaced = map.process != map.pid;
    let mut policy = Policy {
        sampled: copying
            .sampled
            .filter(|sampled| copying.filter && sampled.has_process(map.process)),
        kept: Vec::new(),
        process: map.process,
        retime,
        bound_ns: 0,
        pid: namespaced.then_some(map.process),
    };
    let dir = copying.copies.path()?.join(format!("dump-{index}"));
    let copy = dir.join(format!("jit-{}.dump", map.process));
    let written = write_copy(&dir, &copy, &mut reader, &mut policy);
    let loads = match written {
        Ok(loads) => loads,
        Err(failure) => {
            let _ = fs::remove_dir_all(&dir);
            return match failure {
                Failure::Write(error) => Err(OutputError::Copy { path: copy, error }),
                Failure::Dump(error) => Ok(DumpOutcome::Skipped(error)),
            };
        }
    };
    patch
        .redirect_jitdump(
            copying.input,
            map,
            copy.as_os_str().as_encoded_bytes(),
            namespaced.then_some(0),
        )
        .map_err(OutputError::Patch)?;
    Ok(DumpOutcome::Copied {
        writer,
        copy,
        loads,
        samples: copying
            .sampled
            .map(|sampled| sampled.samples_in(map.process, &policy.kept)),
        retimed_bound_ns: policy.retime.is_some().then_some(policy.bound_ns),
    })
}

/// The dump opened: where the recording names it (under `root`), else in `dump_dirs` (here).
fn locate(map: &JitDumpMap, root: Root, dump_dirs: &[PathBuf]) -> Result<UntrustedFile, DumpError> {
    if root == Root::Here
        && map.process != map.pid
        && !Path::new(&format!("/proc/{}", map.process)).exists()
    {
        return Err(DumpError::ProcessGone {
            process: map.process,
            pid: map.pid,
        });
    }
    let name = map.path.file_name().unwrap_or_default();
    let elsewhere = dump_dirs.iter().map(|dir| (Root::Here, dir.join(name)));
    let mut first_error = None;
    for (root, path) in std::iter::once((root, map.path.clone())).chain(elsewhere) {
        match open_untrusted(root, &path, MAX_DUMP_BYTES) {
            Ok(opened) => return Ok(opened),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    Err(DumpError::Open(first_error.unwrap_or(
        UntrustedFileError::Resolve {
            errno: libc::ENOENT,
        },
    )))
}

/// Why a copy was not made: the dump's fault (it is left out) or the copy's (the step fails).
enum Failure {
    Dump(DumpError),
    Write(io::Error),
}

impl From<ForeignDumpError> for Failure {
    fn from(error: ForeignDumpError) -> Self {
        Failure::Dump(DumpError::Read(error))
    }
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Self {
        Failure::Write(error)
    }
}

/// `dir` made (0700) and the copy written into `copy`.
fn write_copy(
    dir: &Path,
    copy: &Path,
    reader: &mut DumpReader<BufReader<File>>,
    policy: &mut Policy<'_>,
) -> Result<CopyCounts, Failure> {
    fs::DirBuilder::new().mode(0o700).create(dir)?;
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(copy)?;
    let mut out = BufWriter::new(file);
    let loads = foreign::copy(reader, &mut out, policy)?;
    out.flush()?;
    Ok(loads)
}

/// How a `CLOCK_MONOTONIC` dump's stamps become counter values.
struct Retime<'a> {
    conversion: &'a TimeConversion,
    pairings: &'a Pairings,
    /// `CLOCK_MONOTONIC` at the latest pairing, taken after the recording.
    latest: u64,
}

/// The copy of one dump: the loads the process's samples touched, retimed if its stamps are
/// `CLOCK_MONOTONIC`.
struct Policy<'a> {
    /// The process's sampled addresses, when only sampled loads are kept.
    sampled: Option<&'a SampledAddresses>,
    /// The code ranges kept, `(start, size)`.
    kept: Vec<(u64, u64)>,
    process: u32,
    retime: Option<Retime<'a>>,
    /// The largest error bound of a stamp moved so far, ns.
    bound_ns: u64,
    /// The pid the copy names, if not the dump's own.
    pid: Option<u32>,
}

impl CopyPolicy for Policy<'_> {
    type Error = Failure;

    fn keep_load(&mut self, record: &Record<'_>) -> bool {
        let (start, size) = record.code.unwrap_or_default();
        let keep = self
            .sampled
            .is_none_or(|sampled| sampled.any_in(self.process, start, size));
        if keep {
            self.kept.push((start, size));
        }
        keep
    }

    fn timestamp(&mut self, record: &Record<'_>) -> Result<u64, Failure> {
        let Some(retime) = &self.retime else {
            return Ok(record.timestamp);
        };
        // Every stamp is checked, kept or not: a CLOCK_MONOTONIC stamp is never 0 (the clock
        // starts at boot, long before a JIT runs) and never later than the latest pairing,
        // taken after the recording.
        let mono = record.timestamp;
        if mono == 0 || mono > retime.latest {
            return Err(Failure::Dump(DumpError::NotMonotonic {
                stamp: mono,
                latest: retime.latest,
            }));
        }
        let (perf, bound) = retime
            .pairings
            .perf_ns(mono)
            .ok_or(Failure::Dump(DumpError::NoPairing))?;
        self.bound_ns = self.bound_ns.max(bound);
        Ok(retime.conversion.ns_to_cycles(perf))
    }

    fn arch_timestamps(&self) -> bool {
        self.retime.is_some()
    }

    fn pid(&self) -> Option<u32> {
        self.pid
    }
}
