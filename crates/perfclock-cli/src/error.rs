//! Why a subcommand failed: `inject-time-conv` ([`InjectError`]) and its `--clock-data-now`
//! ([`ClockDataError`]), `record`'s steps around perf ([`RecordError`]), and why `record -p`/`-a`
//! could not attach a JVM ([`JvmError`]); each message says what to do.
//!
//! The CLI is a binary, so these are not public API and the workspace's `#[non_exhaustive]`
//! policy for public error enums does not apply; they implement `Display` and
//! `std::error::Error` like every error of the workspace.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use crate::agent::agent_failure;

use perfclock::paravirt::{self, OffsetSource, ParavirtRefusal};
use perfclock::{Error, ReadError};
use perfclock_attach::{AttachError, Remedy};
use perfclock_calib::CalibError;
use perfclock_jitdump::JitClock;
use perfclock_perfdata::PerfDataError;
use perfclock_serve::PublishError;

/// Why the snapshot cannot give the recording its wall clock.
#[derive(Debug)]
pub(crate) enum ClockDataError {
    /// perfclock could not take a snapshot.
    Snapshot(String),
    /// IN was last written before this boot: its perf clock is another boot's.
    OtherBoot {
        /// IN's mtime, s since the epoch.
        mtime_s: u64,
        /// This boot's start, s since the epoch.
        boot_s: u64,
    },
    /// CLOCK_REALTIME went back (relative to the perf clock) since the recording.
    SteppedBack {
        /// How far, ns.
        by_ns: u64,
        /// What slew and granularity allow, ns.
        allowed_ns: u64,
    },
}

impl fmt::Display for ClockDataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Snapshot(error) => write!(
                f,
                "--clock-data-now: cannot take a clock snapshot: {error}; run without \
                 --clock-data-now"
            ),
            Self::OtherBoot { mtime_s, boot_s } => write!(
                f,
                "--clock-data-now: IN was written at {mtime_s} s (Unix time), before this boot \
                 ({boot_s} s): its perf clock belongs to another boot, so a snapshot taken now \
                 says nothing about it; run without --clock-data-now"
            ),
            Self::SteppedBack { by_ns, allowed_ns } => write!(
                f,
                "--clock-data-now: CLOCK_REALTIME is {by_ns} ns behind where the recording's end \
                 puts it (slew allows {allowed_ns} ns): it was stepped back since the recording \
                 (or IN's modification time was changed), so wall times would be off by that \
                 much; take the snapshot during the recording (perfclock record), or run \
                 without --clock-data-now"
            ),
        }
    }
}

/// Why a foreign jitdump (another writer's: docs/jit.md) was skipped, or why the copies could
/// not be written (`foreign`).
#[derive(Debug)]
pub(crate) enum ForeignError {
    /// The dump named by the recording cannot be read.
    ReadDump(PathBuf, io::Error),
    /// It is not a jitdump perfclock can read.
    BadDump(PathBuf, perfclock_jitdump::ForeignDumpError),
    /// A record's stamp is no `CLOCK_MONOTONIC` reading of this boot.
    NotMonotonic {
        /// The dump.
        dump: PathBuf,
        /// The stamp.
        stamp: u64,
        /// `CLOCK_MONOTONIC` at the latest pairing.
        latest: u64,
    },
    /// No `CLOCK_MONOTONIC`/perf-clock pairing to convert with.
    NoPairing,
    /// The dump changed while it was copied.
    DumpChanged(perfclock_jitdump::ForeignDumpError),
    /// The dump's map is inside a compressed record (`perf record -z`), which cannot be pointed
    /// elsewhere.
    CompressedMap,
    /// The copies' directory could not be made.
    CopyDir(PathBuf, io::Error),
    /// A copy could not be written.
    WriteCopy(PathBuf, io::Error),
    /// The recording could not be read again for a map.
    Input(io::Error),
    /// The recording's patch refused an edit.
    Patch(PerfDataError),
}

impl fmt::Display for ForeignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReadDump(path, _) => write!(
                f,
                "cannot read the jitdump {} the recording names: if it moved, analyse on the \
                 machine that recorded it",
                path.display()
            ),
            Self::BadDump(path, _) => write!(f, "{} is not a readable jitdump", path.display()),
            Self::NotMonotonic {
                dump,
                stamp,
                latest,
            } => write!(
                f,
                "{} has neither counter timestamps (JITDUMP_FLAGS_ARCH_TIMESTAMP) nor \
                 CLOCK_MONOTONIC ones of this boot: a record says {stamp}, CLOCK_MONOTONIC was \
                 {latest} after the recording; its clock cannot be told, so its code is not \
                 named (record the JIT with -k 1 if it stamps another clock)",
                dump.display()
            ),
            Self::NoPairing => f.write_str(
                "no CLOCK_MONOTONIC/perf-clock pairing to convert a CLOCK_MONOTONIC jitdump with",
            ),
            Self::DumpChanged(_) => f.write_str("a jitdump changed while it was copied"),
            Self::CompressedMap => f.write_str(
                "the jitdump's map is inside a compressed record (perf record -z): record \
                 without -z",
            ),
            Self::CopyDir(path, _) => write!(
                f,
                "cannot make the directory for the converted jitdumps in {}",
                path.display()
            ),
            Self::WriteCopy(path, _) => write!(f, "cannot write {}", path.display()),
            Self::Input(_) => f.write_str("cannot read the recording again"),
            Self::Patch(_) => f.write_str("cannot point the recording at a converted jitdump"),
        }
    }
}

impl std::error::Error for ForeignError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::ReadDump(_, e) | Self::CopyDir(_, e) | Self::WriteCopy(_, e) | Self::Input(e) => {
                Some(e)
            }
            Self::BadDump(_, e) | Self::DumpChanged(e) => Some(e),
            Self::Patch(e) => Some(e),
            Self::NotMonotonic { .. } | Self::NoPairing | Self::CompressedMap => None,
        }
    }
}

impl From<io::Error> for ForeignError {
    fn from(error: io::Error) -> Self {
        ForeignError::Input(error)
    }
}

impl From<PerfDataError> for ForeignError {
    fn from(error: PerfDataError) -> Self {
        ForeignError::Patch(error)
    }
}

/// Why `inject-time-conv` failed. Each message says what to do.
#[derive(Debug)]
pub(crate) enum InjectError {
    /// OUT names IN (or the same file through another path).
    SameFile,
    /// IN could not be opened or read.
    Input(PathBuf, io::Error),
    /// IN is a directory (`true`) or another non-regular file.
    InputNotFile(PathBuf, bool),
    /// IN is not a perf.data this tool can patch.
    PerfData(PerfDataError),
    /// `--clock-data-now` cannot be honoured.
    ClockData(ClockDataError),
    /// IN maps no `jit-<pid>.dump`.
    NoJitMarker,
    /// IN's events were opened with another clock (`perf record -k`).
    OtherClock(i32),
    /// No sidecar was found for a dump.
    SidecarMissing {
        /// The dump as the recording names it.
        dump: PathBuf,
        /// Every place looked.
        looked: Vec<PathBuf>,
    },
    /// A sidecar could not be read.
    SidecarRead(PathBuf, io::Error),
    /// A sidecar is not a valid record.
    SidecarInvalid(PathBuf, String),
    /// A dump's timestamps are not raw counter values: nothing for a TIME_CONV to convert.
    NotArchClock {
        /// The sidecar that says so.
        path: PathBuf,
        /// The dump's clock.
        clock: JitClock,
    },
    /// A sidecar's pid is not its dump's.
    SidecarPid {
        /// The sidecar.
        path: PathBuf,
        /// The dump's pid.
        dump_pid: u32,
        /// The pid the sidecar names.
        record_pid: u32,
    },
    /// Sidecars of one recording name different counters or boots.
    Inconsistent {
        /// Which field.
        what: &'static str,
        /// One sidecar.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// Foreign jitdumps' copies could not be written.
    Foreign(ForeignError),
    /// Foreign jitdumps need this machine's perf clock (no perfclock dump's time conversion
    /// record gives one), and this recording is not of this boot.
    ForeignOtherBoot(PathBuf),
    /// Foreign jitdumps need this machine's perf clock, which cannot be had.
    ForeignNoClock(String),
    /// Two sidecars' conversions differ by more than their bounds allow.
    Disagree {
        /// One sidecar.
        first: PathBuf,
        /// The other.
        second: PathBuf,
        /// Counter value where they were compared.
        counter: u64,
        /// How far apart their conversions are there.
        apart_ns: u64,
        /// The sum of their bounds.
        allowed_ns: u64,
    },
}

impl fmt::Display for InjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SidecarMissing { .. }
            | Self::SidecarRead(..)
            | Self::SidecarInvalid(..)
            | Self::SidecarPid { .. }
            | Self::NotArchClock { .. }
            | Self::Inconsistent { .. }
            | Self::Disagree { .. } => self.fmt_sidecar(f),
            _ => self.fmt_input(f),
        }
    }
}

impl std::error::Error for InjectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Input(_, error) | Self::SidecarRead(_, error) => Some(error),
            Self::Foreign(error) => std::error::Error::source(error),
            // Display gives the library's message in this command's names; its cause follows.
            Self::PerfData(error) => std::error::Error::source(error),
            _ => None,
        }
    }
}

impl InjectError {
    /// What is wrong with IN or OUT themselves.
    fn fmt_input(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SameFile => write!(
                f,
                "OUT is IN: the input is never modified; pass -o a different file"
            ),
            Self::Input(path, _) => write!(f, "cannot read IN {}", path.display()),
            Self::InputNotFile(path, true) => write!(
                f,
                "IN {} is a directory, not a perf.data file (the directory format of perf \
                 record --threads is not supported): pass the perf.data file",
                path.display()
            ),
            Self::InputNotFile(path, false) => write!(
                f,
                "IN {} is not a regular file: pass the perf.data file",
                path.display()
            ),
            Self::PerfData(error) => perf_data_message(f, error),
            Self::ClockData(error) => write!(f, "{error}"),
            Self::NoJitMarker => write!(
                f,
                "no MMAP2 of a jit-<pid>.dump in IN: was the JIT running with perfclock's \
                 jitdump writer during the recording?"
            ),
            Self::Foreign(error) => fmt::Display::fmt(error, f),
            Self::ForeignOtherBoot(input) => write!(
                f,
                "IN {} maps jitdumps of other writers, whose CLOCK_MONOTONIC stamps need this \
                 boot's perf clock to convert, but IN was recorded before this machine last \
                 booted: convert it on the boot that recorded it (or record with perfclock \
                 record, which converts them as it finishes)",
                input.display()
            ),
            Self::ForeignNoClock(why) => write!(
                f,
                "IN maps jitdumps of other writers, whose stamps need this machine's perf clock, \
                 and there is none: {why}"
            ),
            Self::OtherClock(clockid) => write!(
                f,
                "IN was recorded with clock {clockid} (perf record -k/--clockid), not the perf \
                 clock PERF_RECORD_TIME_CONV converts to: its samples would be misplaced against \
                 the jitdump; record without -k"
            ),
            _ => self.fmt_sidecar(f),
        }
    }

    /// What is wrong with the dumps' time conversion records.
    fn fmt_sidecar(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SidecarMissing { dump, looked } => sidecar_missing(f, dump, looked),
            Self::SidecarRead(path, _) => write!(
                f,
                "cannot read the time conversion record {}",
                path.display()
            ),
            Self::SidecarInvalid(path, reason) => {
                write!(f, "{}: {reason}", path.display())
            }
            Self::SidecarPid {
                path,
                dump_pid,
                record_pid,
            } => write!(
                f,
                "{} says pid={record_pid} but belongs to jit-{dump_pid}.dump: it was copied from \
                 another dump; pass --dump-dir with the directory of the right one",
                path.display()
            ),
            Self::NotArchClock { path, clock } => write!(
                f,
                "{} says its dump's timestamps are {clock}, not raw counter values: a TIME_CONV \
                 record would not apply to them. {}",
                path.display(),
                not_arch_clock_advice(*clock)
            ),
            Self::Inconsistent {
                what,
                first,
                second,
            } => write!(
                f,
                "{} and {} name different {what}s, but one recording has one: one of them is \
                 stale; move it away or pass --dump-dir with the right directory",
                first.display(),
                second.display()
            ),
            Self::Disagree {
                first,
                second,
                counter,
                apart_ns,
                allowed_ns,
            } => write!(
                f,
                "{} and {} disagree by {apart_ns} ns at counter {counter}, more than their error \
                 bounds' sum ({allowed_ns} ns): one of them is stale or from another run; move \
                 it away or pass --dump-dir with the right directory",
                first.display(),
                second.display()
            ),
            _ => self.fmt_input(f),
        }
    }
}

/// [`InjectError::SidecarMissing`]'s message: every path looked at, and what to pass.
fn sidecar_missing(f: &mut fmt::Formatter<'_>, dump: &Path, looked: &[PathBuf]) -> fmt::Result {
    write!(
        f,
        "no time conversion record for {} (looked for ",
        dump.display()
    )?;
    for (index, path) in looked.iter().enumerate() {
        let sep = if index == 0 { "" } else { ", " };
        write!(f, "{sep}{}", path.display())?;
    }
    write!(
        f,
        "): if the dump moved since the recording, pass --dump-dir with its directory; the JIT \
         must use perfclock's jitdump writer, which writes the record"
    )
}

/// What to do with a dump stamped in `clock` instead of raw counter values.
fn not_arch_clock_advice(clock: JitClock) -> &'static str {
    match clock {
        JitClock::Perf => {
            "A perf-clock dump needs no conversion: open the recording with `samply import` as \
             it is, or write the dump with jitdump_clock=arch (PERFCLOCK_JITDUMP_CLOCK=arch) for \
             perf inject --jit"
        }
        _ => {
            "A CLOCK_MONOTONIC dump goes with a recording stamped in CLOCK_MONOTONIC: `samply \
             record`, or `perf record -k monotonic` followed by `perf inject --jit` directly; for \
             a default perf record write the dump with jitdump_clock=arch \
             (PERFCLOCK_JITDUMP_CLOCK=arch)"
        }
    }
}

/// The library's message in this command's names (IN, OUT, -o); its cause is
/// [`InjectError`]'s `source()`.
fn perf_data_message(f: &mut fmt::Formatter<'_>, error: &PerfDataError) -> fmt::Result {
    match error {
        PerfDataError::OutputKind { path, kind } => write!(
            f,
            "OUT {} is {kind}, not a regular file: it would be replaced by a regular file; pass \
             -o a new path or an existing regular file",
            path.display()
        ),
        PerfDataError::Output { path, .. } => write!(f, "cannot write OUT {}", path.display()),
        other => write!(f, "IN: {other}"),
    }
}

impl From<PerfDataError> for InjectError {
    fn from(error: PerfDataError) -> Self {
        Self::PerfData(error)
    }
}

/// Why `record -p`/`-a` could not attach a HotSpot JVM: it is recorded without its JIT names.
#[derive(Debug)]
pub(crate) enum JvmError {
    /// A file of the process in `/proc` could not be read (it exited, or is not ours to read).
    Proc { path: String, source: io::Error },
    /// An OpenJ9 JVM, whose attach protocol is not HotSpot's.
    OpenJ9,
    /// The JVM's dump directory could not be created.
    CreateDir { dir: PathBuf, source: io::Error },
    /// The dump directory could not be given to the JVM's user.
    GiveDir {
        dir: PathBuf,
        uid: u32,
        source: io::Error,
    },
    /// The JVM sees something else at the dump directory's path (another mount namespace).
    NotVisible { dir: PathBuf },
    /// The attach or the agent failed.
    Attach(AttachError),
}

impl fmt::Display for JvmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Proc { path, .. } => write!(f, "cannot read {path}"),
            Self::OpenJ9 => write!(f, "an OpenJ9 JVM: only HotSpot can be attached"),
            Self::CreateDir { dir, .. } => write!(f, "cannot create {}", dir.display()),
            Self::GiveDir { dir, uid, .. } => {
                write!(f, "cannot give {} to uid {uid}", dir.display())
            }
            Self::NotVisible { dir } => write!(
                f,
                "the jitdump directory {} is not visible at that path in the JVM's mount \
                 namespace (a container): write OUT (-o) in a directory the container mounts \
                 at the same path",
                dir.display()
            ),
            Self::Attach(error) => {
                write!(f, "{error}")?;
                if let Some(failure) = agent_failure(error) {
                    write!(
                        f,
                        " (perfclock's agent returns {} when {}: {})",
                        failure.code(),
                        failure.meaning(),
                        failure.fix()
                    )?;
                }
                if error.remedy() == Some(Remedy::AnotherAgent) {
                    f.write_str(" (the agent is record's --agent PATH)")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for JvmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Proc { source, .. }
            | Self::CreateDir { source, .. }
            | Self::GiveDir { source, .. } => Some(source),
            // Display shows the attach error's own message; its cause follows it.
            Self::Attach(error) => std::error::Error::source(error),
            Self::OpenJ9 | Self::NotVisible { .. } => None,
        }
    }
}

/// Why a step of `perfclock record` around perf itself failed.
#[derive(Debug)]
pub(crate) enum RecordError {
    /// The private directory beside OUT could not be created.
    WorkDir { dir: PathBuf, source: io::Error },
    /// The file perf records into could not be created in it.
    CreateRaw { path: PathBuf, source: io::Error },
    /// OUT's directory could not be resolved.
    ResolveDir { output: PathBuf, source: io::Error },
    /// A jitdump directory could not be created in `dir`.
    DumpDir { dir: PathBuf, source: io::Error },
    /// The command's jitdump directory could not be opened to its users.
    OpenDumpDir { path: PathBuf, source: io::Error },
    /// The agent's path holds a `=`, where `-agentpath` ends the path.
    AgentPathEquals { agent: PathBuf },
    /// A path `JAVA_TOOL_OPTIONS` cannot carry.
    ToolOptionsPath { what: &'static str, path: PathBuf },
    /// Adding the TIME_CONV record failed.
    TimeConv(InjectError),
    /// OUT is no longer something that may be replaced.
    Output(PerfDataError),
    /// The finished file could not be renamed over OUT.
    Rename { output: PathBuf, source: io::Error },
    /// `perf inject` could not be started.
    RunInject(io::Error),
    /// Waiting for `perf inject` failed.
    WaitInject(io::Error),
    /// `perf inject --jit` failed.
    InjectFailed(ExitStatus),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WorkDir { dir, .. } => {
                write!(f, "cannot create a private directory in {}", dir.display())
            }
            Self::CreateRaw { path, .. } => write!(f, "cannot create {}", path.display()),
            Self::ResolveDir { output, .. } => {
                write!(f, "cannot resolve the directory of {}", output.display())
            }
            Self::DumpDir { dir, .. } => {
                write!(f, "cannot create a jitdump directory in {}", dir.display())
            }
            Self::OpenDumpDir { path, .. } => {
                write!(f, "cannot open {} to the command's users", path.display())
            }
            Self::AgentPathEquals { agent } => write!(
                f,
                "the agent path {} holds a `=`, where HotSpot's -agentpath ends the path and \
                 starts the agent's options, so every JVM would fail to start: install the agent \
                 (or pass --agent) in a path without one",
                agent.display()
            ),
            Self::ToolOptionsPath { what, path } => write!(
                f,
                "the {what} path {} holds white space, a comma or a quote, which \
                 JAVA_TOOL_OPTIONS cannot carry: write OUT (-o) and keep the agent (--agent) in \
                 paths without them, or pass --no-java-agent",
                path.display()
            ),
            Self::TimeConv(_) => write!(f, "adding TIME_CONV"),
            Self::Output(error) => perf_data_message(f, error),
            Self::Rename { output, .. } => write!(f, "writing {}", output.display()),
            Self::RunInject(_) => write!(f, "cannot run perf inject"),
            Self::WaitInject(_) => write!(f, "waiting for perf inject"),
            Self::InjectFailed(status) => write!(
                f,
                "perf inject --jit failed ({status}; see its message above)"
            ),
        }
    }
}

impl std::error::Error for RecordError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::WorkDir { source, .. }
            | Self::CreateRaw { source, .. }
            | Self::ResolveDir { source, .. }
            | Self::DumpDir { source, .. }
            | Self::OpenDumpDir { source, .. }
            | Self::Rename { source, .. }
            | Self::RunInject(source)
            | Self::WaitInject(source) => Some(source),
            Self::TimeConv(error) => Some(error),
            // Display gives the library's message in this command's names; its cause follows.
            Self::Output(error) => std::error::Error::source(error),
            Self::AgentPathEquals { .. } | Self::ToolOptionsPath { .. } | Self::InjectFailed(_) => {
                None
            }
        }
    }
}

/// Why `perfclock serve` failed: `Display` says what failed, the cause is its `source()`
/// (printed once, by [`chain`](crate::output::chain)).
#[derive(Debug)]
pub(crate) enum ServeError {
    /// No perf clock at all (not merely a withheld conversion).
    NoPerfClock(Error),
    /// No `--path` and no `XDG_RUNTIME_DIR` for the per-user default.
    NoDefaultPath,
    /// The page, its file, its socket or its directory: the publisher's error says which.
    Publish(PublishError),
    /// `/proc/sys/kernel/random/boot_id` unreadable.
    BootId(io::Error),
    /// The SIGINT/SIGTERM handlers could not be installed.
    Signals(io::Error),
    /// `--once` with paravirt mode disabled.
    OnceWithParavirtOff,
    /// Paravirt mode measured no offset.
    NoOffset(ParavirtRefusal),
    /// The offset came from a source that is not published.
    OffsetFromUnpublished(OffsetSource),
    /// No bracket intersection checked the offset.
    OffsetUnchecked,
    /// The offset could not be encoded.
    OffsetFormat,
    /// The in-process calibration failed.
    Calibration(CalibError),
    /// This architecture has no counter.
    NoCounter,
    /// The in-process page could not be read.
    PageUnreadable(ReadError),
    /// The in-process refiner republished on every try.
    KeptRepublishing,
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::NoPerfClock(_) => f.write_str("no perf clock"),
            ServeError::NoDefaultPath => f.write_str(
                "no XDG_RUNTIME_DIR for a per-user page: name the file with --path (in a directory \
                 only you can write)",
            ),
            ServeError::Publish(error) => error.fmt(f),
            ServeError::BootId(_) => write!(f, "cannot read {}", perfclock_os::time::BOOT_ID_PATH),
            ServeError::Signals(_) => f.write_str("cannot install the SIGINT/SIGTERM handlers"),
            ServeError::OnceWithParavirtOff => write!(
                f,
                "--once publishes the paravirt offset, which {}=off disables",
                paravirt::ENV
            ),
            ServeError::NoOffset(_) => f.write_str("no paravirt offset to publish"),
            ServeError::OffsetFromUnpublished(source) => {
                write!(f, "no paravirt offset to publish: it came from {source}")
            }
            ServeError::OffsetUnchecked => {
                f.write_str("no paravirt offset to publish: no bracket intersection checked it")
            }
            ServeError::OffsetFormat => f.write_str("cannot format the offset"),
            ServeError::Calibration(_) => f.write_str("calibration failed"),
            ServeError::NoCounter => f.write_str("no counter on this architecture"),
            ServeError::PageUnreadable(_) => f.write_str("in-process page unreadable"),
            ServeError::KeptRepublishing => f.write_str("the in-process refiner kept republishing"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: the publisher's own message is this one's.
            ServeError::Publish(error) => error.source(),
            ServeError::BootId(error) | ServeError::Signals(error) => Some(error),
            ServeError::NoOffset(refusal) => Some(refusal),
            ServeError::NoPerfClock(error) => Some(error),
            ServeError::Calibration(error) => Some(error),
            ServeError::PageUnreadable(error) => Some(error),
            ServeError::NoDefaultPath
            | ServeError::OnceWithParavirtOff
            | ServeError::OffsetFromUnpublished(_)
            | ServeError::OffsetUnchecked
            | ServeError::OffsetFormat
            | ServeError::NoCounter
            | ServeError::KeptRepublishing => None,
        }
    }
}
