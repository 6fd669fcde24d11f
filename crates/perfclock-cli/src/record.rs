//! `perfclock record [OPTIONS] [PERF-OPTIONS]... -- CMD [ARGS]`: profile a command, JIT code
//! included, in one step.
//!
//! 1. Runs `perf record -g [PERF-OPTIONS] -o OUT.raw -- CMD [ARGS]` with perf's default clock,
//!    with perfclock's JVMTI agent appended to `JAVA_TOOL_OPTIONS` so every JVM in CMD's tree
//!    writes a jitdump into one fresh private directory next to OUT.
//! 2. Forwards SIGINT/SIGTERM to perf, which stops the workload and writes its file as
//!    `perf record` always does on those signals; then waits for perf.
//! 3. Adds the TIME_CONV record `perf inject --jit` needs where the recording lacks one
//!    (`inject-time-conv`, run in-process: [`add_time_conv`]), runs `perf inject --jit` when a
//!    jitdump was mapped (else renames), and leaves OUT ready for `perf report`, `perf script`
//!    and `samply import`. OUT appears complete or not at all; OUT.raw is kept on any error.
//!
//! Exit status: CMD's when it failed (128 + the signal when a signal ended it), 128 + the signal
//! when perfclock itself was interrupted, 1 when perfclock or perf failed, else 0.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::output::errln;
use crate::{agent_path, inject, signals};

const NAME: &str = "perfclock record";

/// What `perfclock record` was asked to do.
#[derive(Debug)]
pub(crate) struct RecordOptions {
    /// The recording to leave behind.
    pub output: PathBuf,
    /// The agent library, instead of the one beside this perfclock.
    pub agent: Option<PathBuf>,
    /// Leave `JAVA_TOOL_OPTIONS` alone.
    pub no_java_agent: bool,
    /// Options passed to `perf record` after `-g`.
    pub perf_args: Vec<OsString>,
    /// The command to profile and its arguments.
    pub command: Vec<OsString>,
}

/// A perf option `record` refuses: its spellings and why.
struct Refused {
    short: &'static str,
    long: &'static str,
    why: &'static str,
}

const REFUSED: [Refused; 2] = [
    Refused {
        short: "-k",
        long: "--clockid",
        why: "it makes perf stamp its samples with another clock than the perf clock the \
              jitdumps' timestamps are converted to, so perf inject --jit would place JIT code \
              at the wrong times",
    },
    Refused {
        short: "-z",
        long: "--compression-level",
        why: "perf inject --jit (perf 6.1 at least) does not look inside compressed records \
              and then silently injects no JIT code",
    },
];

/// perf record's short options that take a value: what follows one in a cluster is its value
/// (`-eblock:...` names an event, not `-k`).
const SHORT_WITH_VALUE: &str = "eFcCoptumGjrD";

/// The first refused option among `perf_args`, as `(the argument, the reason)`.
fn refused_option(perf_args: &[OsString]) -> Option<(String, &'static str)> {
    perf_args.iter().find_map(|arg| {
        let text = arg.to_string_lossy();
        REFUSED.iter().find_map(|refused| {
            // `-k 1`, `-k1`, `--clockid 1`, `--clockid=1`; a short option may also end a
            // cluster of flags (`-gk`), which perf's parser accepts.
            let long = text == refused.long || text.starts_with(&format!("{}=", refused.long));
            let letter = refused.short.chars().nth(1);
            let short = !text.starts_with("--")
                && text.starts_with('-')
                && letter.is_some_and(|l| {
                    text.chars()
                        .skip(1)
                        .take_while(|c| !SHORT_WITH_VALUE.contains(*c))
                        .chain(text.chars().skip(1).find(|c| SHORT_WITH_VALUE.contains(*c)))
                        .any(|c| c == l)
                });
            (long || short).then(|| (text.clone().into_owned(), refused.why))
        })
    })
}

/// The signal perfclock received and forwarded (0: none).
static RECEIVED_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The perf process the signals go to (0: not started yet).
static PERF_PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(signal: libc::c_int) {
    RECEIVED_SIGNAL.store(signal, Ordering::SeqCst);
    let pid = PERF_PID.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; pid is the perf child this process spawned and
        // has not reaped yet (the handlers are restored before it is waited for).
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Installs [`forward_signal`] for SIGINT and SIGTERM, or restores the default.
fn set_forwarding(on: bool) -> io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let handler = if on {
            forward_signal as extern "C" fn(libc::c_int) as libc::sighandler_t
        } else {
            libc::SIG_DFL
        };
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the handler only touches
        // atomics and calls kill, both async-signal-safe. SA_RESTART keeps waitpid going.
        let result = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler;
            action.sa_flags = libc::SA_RESTART;
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if result != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// The directory `path` is in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// A fresh private (0700, mkdtemp) directory for the jitdumps next to OUT, kept: the output's
/// `jitted-*.so` are written into it by `perf inject --jit` and perf report reads them there.
fn make_dump_dir(output: &Path) -> Result<PathBuf, String> {
    let dir = parent_dir(output)
        .canonicalize()
        .map_err(|e| format!("cannot resolve the directory of {}: {e}", output.display()))?;
    let prefix = format!(
        "{}.jit-",
        output
            .file_name()
            .map_or_else(|| "perf.data".into(), OsStr::to_string_lossy)
    );
    let created = tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir_in(&dir)
        .map_err(|e| {
            format!(
                "cannot create a jitdump directory in {}: {e}",
                dir.display()
            )
        })?;
    let path = created.keep();
    // Private: only CMD's JVMs (this user) write there.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private: {e}", path.display()))?;
    Ok(path)
}

/// `JAVA_TOOL_OPTIONS` with the agent appended to the user's value.
fn java_tool_options(
    current: Option<OsString>,
    agent: &Path,
    dump_dir: &Path,
) -> Result<OsString, String> {
    // The JVM splits JAVA_TOOL_OPTIONS at white space, and the agent its options at commas.
    for (what, path) in [("agent", agent), ("jitdump directory", dump_dir)] {
        let text = path.to_string_lossy();
        if text.contains(|c: char| c.is_whitespace() || c == ',' || c == '"' || c == '\'') {
            return Err(format!(
                "the {what} path {} holds white space, a comma or a quote, which \
                 JAVA_TOOL_OPTIONS cannot carry: write OUT (-o) and keep the agent (--agent) \
                 in paths without them, or pass --no-java-agent",
                path.display()
            ));
        }
    }
    let mut value = current.unwrap_or_default();
    if !value.is_empty() {
        value.push(" ");
    }
    value.push("-agentpath:");
    value.push(agent.as_os_str());
    value.push("=jitdump=");
    value.push(dump_dir.as_os_str());
    Ok(value)
}

/// Whether `path` is a perf.data that perf finished writing: its header names a data section
/// with records (perf writes the final header when it stops).
fn recording_complete(path: &Path) -> bool {
    let mut header = [0u8; 56];
    let read = fs::File::open(path).and_then(|mut file| file.read_exact(&mut header));
    if read.is_err() || &header[..8] != b"PERFILE2" {
        return false;
    }
    // perf_file_header: magic, size, attr_size, attrs {offset, size}, data {offset, size}.
    let data_size = u64::from_le_bytes(header[48..56].try_into().unwrap_or([0; 8]));
    data_size > 0
}

/// What [`add_time_conv`] did.
enum TimeConvStep {
    /// The recording maps no jitdump: nothing for `perf inject --jit` to do, and nothing
    /// written.
    NoJitdump,
    /// The recording maps no jitdump: `out_tmp` is the recording with its HEADER_CLOCK_DATA.
    ClockDataOnly,
    /// Written to `out_tmp`, with the TIME_CONV the recording had or one perfclock added (and
    /// HEADER_CLOCK_DATA, given a snapshot), for `perf inject --jit`.
    Written(String),
}

/// The `inject-time-conv` step, in-process: `raw` to `out_tmp` with a TIME_CONV record where
/// it lacks one, from the sidecars in `dump_dirs` (the one call site for that code).
fn add_time_conv(
    raw: &Path,
    out_tmp: &Path,
    dump_dirs: &[PathBuf],
    snapshot: Option<&perfclock::ClockSnapshot>,
) -> Result<TimeConvStep, String> {
    let options = inject::InjectOptions {
        input: raw.to_path_buf(),
        output: out_tmp.to_path_buf(),
        dump_dirs: dump_dirs.to_vec(),
        clock_data: match snapshot {
            Some(snapshot) => inject::ClockDataSource::Recorded(*snapshot),
            None => inject::ClockDataSource::None,
        },
    };
    // A signal during the copy removes the temporary OUT, as in inject-time-conv.
    let cleanup = signals::TempCleanup::install()
        .map_err(|e| format!("cannot install the signal handlers: {e}"))?;
    match inject::run(&options, &cleanup) {
        Ok((inject::Outcome::Copied, _)) => Ok(TimeConvStep::Written(
            "the recording holds a TIME_CONV already".into(),
        )),
        Ok((inject::Outcome::ClockDataOnly, _)) => Ok(TimeConvStep::ClockDataOnly),
        Ok((
            inject::Outcome::Inserted {
                sidecar, record, ..
            },
            _,
        )) => Ok(TimeConvStep::Written(format!(
            "added TIME_CONV from {} (error bound {} ns)",
            sidecar.display(),
            record.error_bound_ns()
        ))),
        Err(crate::error::InjectError::NoJitMarker) => Ok(TimeConvStep::NoJitdump),
        Err(error) => Err(format!("adding TIME_CONV: {error}")),
    }
}

/// The clock snapshots taken at the start and at the end of the recording: the anchors of
/// HEADER_CLOCK_DATA (issue 21 item 4), which the perf.data library adds to OUT.
struct ClockAnchors {
    start: Option<perfclock::ClockSnapshot>,
    end: Option<perfclock::ClockSnapshot>,
}

fn take_snapshot(when: &str) -> Option<perfclock::ClockSnapshot> {
    match perfclock::snapshot() {
        Ok(snapshot) => Some(snapshot),
        Err(error) => {
            errln!("{NAME}: warning: no clock snapshot at the {when}: {error}");
            None
        }
    }
}

impl ClockAnchors {
    /// Says how wall-clock time relates to the samples' timestamps, and whether it moved.
    fn report(&self) {
        let (Some(start), Some(end)) = (&self.start, &self.end) else {
            return;
        };
        let moved = end.realtime.offset_ns - start.realtime.offset_ns;
        let allowed = start.realtime.uncertainty_ns + end.realtime.uncertainty_ns;
        errln!(
            "{NAME}: wall clock = sample time + {} ns (± {} ns) at the start, + {} ns (± {} ns) \
             at the end: moved {moved} ns",
            start.realtime.offset_ns,
            start.realtime.uncertainty_ns,
            end.realtime.offset_ns,
            end.realtime.uncertainty_ns
        );
        // NTP slews by at most 500 ppm; more than that plus the uncertainty is a step.
        let elapsed = end.perf_ns.saturating_sub(start.perf_ns);
        if moved.unsigned_abs() > allowed + elapsed / 2000 {
            errln!(
                "{NAME}: warning: CLOCK_REALTIME was stepped during the recording (moved \
                 {moved} ns against the perf clock): wall-clock times of the samples are off by \
                 up to that much"
            );
        }
    }
}

/// Why the run ended badly: the message, and the exit code.
struct Failure(String, u8);

/// The exit code that reports `status` the way a shell does.
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

/// Runs `perfclock record`.
pub(crate) fn run(options: RecordOptions) -> ExitCode {
    match record(&options) {
        Ok(code) => ExitCode::from(code),
        Err(Failure(message, code)) => {
            errln!("{NAME}: error: {message}");
            ExitCode::from(code)
        }
    }
}

fn record(options: &RecordOptions) -> Result<u8, Failure> {
    let fail = |message: String| Failure(message, 1);
    if options.command.is_empty() {
        return Err(Failure(
            "no command to record: perfclock record [OPTIONS] [PERF-OPTIONS]... -- CMD [ARGS]"
                .into(),
            2,
        ));
    }
    if let Some((arg, why)) = refused_option(&options.perf_args) {
        return Err(Failure(
            format!("refusing perf option {arg}: {why}; record without it"),
            2,
        ));
    }
    if let Some(own) = options.perf_args.iter().find(|a| {
        let a = a.to_string_lossy();
        ["-o", "--output", "--agent", "--no-java-agent"].contains(&a.as_ref())
            || a.starts_with("--output=")
            || a.starts_with("--agent=")
    }) {
        return Err(Failure(
            format!(
                "{} after a perf option: perfclock record's own options (-o, --agent, \
                 --no-java-agent) go before the perf options",
                own.to_string_lossy()
            ),
            2,
        ));
    }
    let output = &options.output;
    let raw = with_suffix(output, ".raw");
    let mut env_options = None;
    let mut dump_dirs = Vec::new();
    if !options.no_java_agent {
        let agent = match &options.agent {
            Some(path) => path
                .canonicalize()
                .map_err(|e| fail(format!("--agent {}: {e}", path.display())))?,
            None => agent_path::find()
                .map_err(|e| fail(format!("{e}; or pass --agent PATH, or --no-java-agent")))?,
        };
        let dump_dir = make_dump_dir(output).map_err(fail)?;
        let value = java_tool_options(std::env::var_os("JAVA_TOOL_OPTIONS"), &agent, &dump_dir)
            .map_err(fail)?;
        errln!(
            "{NAME}: JVMs in the command write their jitdumps into {} (keep it: the output's \
             JIT symbols are read from there)",
            dump_dir.display()
        );
        env_options = Some(value);
        dump_dirs.push(dump_dir);
    }

    let start = take_snapshot("start");
    set_forwarding(true).map_err(|e| fail(format!("cannot handle SIGINT/SIGTERM: {e}")))?;
    let mut perf = Command::new("perf");
    perf.arg("record")
        .arg("-g")
        .args(&options.perf_args)
        .arg("-o")
        .arg(&raw)
        .arg("--")
        .args(&options.command);
    if let Some(value) = &env_options {
        perf.env("JAVA_TOOL_OPTIONS", value);
    }
    let spawned = perf.spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            let _ = set_forwarding(false);
            // Nothing ran: the empty jitdump directory goes (remove_dir refuses a full one).
            for dir in &dump_dirs {
                let _ = fs::remove_dir(dir);
            }
            return Err(fail(if error.kind() == io::ErrorKind::NotFound {
                "no `perf` on PATH: install it (Debian: linux-perf; Fedora: perf) or add its \
                 directory to PATH"
                    .into()
            } else {
                format!("cannot run perf: {error}")
            }));
        }
    };
    PERF_PID.store(i32::try_from(child.id()).unwrap_or(0), Ordering::SeqCst);
    errln!("{NAME}: recording to {} (perf record -g)", raw.display());
    let waited = child.wait();
    PERF_PID.store(0, Ordering::SeqCst);
    let _ = set_forwarding(false);
    let status = waited.map_err(|e| fail(format!("waiting for perf: {e}")))?;
    let anchors = ClockAnchors {
        start,
        end: take_snapshot("end"),
    };
    let interrupted = RECEIVED_SIGNAL.load(Ordering::SeqCst);

    if !recording_complete(&raw) {
        return Err(fail(format!(
            "perf record ended with {status} and left no complete recording in {} (see perf's \
             message above: a missing event, or perf_event_open refused, which \
             /proc/sys/kernel/perf_event_paranoid or CAP_PERFMON decides; or CMD could not \
             start)",
            raw.display()
        )));
    }
    // perf record exits with the workload's status (and dies by the workload's signal).
    let command_code = status_code(status);
    if interrupted != 0 {
        errln!("{NAME}: interrupted (signal {interrupted}); perf stopped the command");
    } else if !status.success() {
        errln!("{NAME}: the command failed ({status}); post-processing what was recorded");
    }
    anchors.report();

    post_process(&raw, output, &dump_dirs, anchors.start.as_ref()).map_err(|message| {
        fail(format!(
            "{message}; the recording is kept in {}",
            raw.display()
        ))
    })?;
    fs::remove_file(&raw).map_err(|e| fail(format!("removing {}: {e}", raw.display())))?;
    // A jitdump directory no JVM wrote into goes (remove_dir refuses a full one).
    for dir in &dump_dirs {
        let _ = fs::remove_dir(dir);
    }
    let out = output.display();
    errln!(
        "{NAME}: wrote {out}; next:\n  perf report -i {out}\n  perf script -i {out}\n  samply \
         import {out}"
    );
    Ok(if interrupted != 0 {
        u8::try_from(128 + interrupted).unwrap_or(1)
    } else {
        command_code
    })
}

/// `raw` to `output`: TIME_CONV where missing, then `perf inject --jit` when a jitdump was
/// mapped. `output` appears only complete; `raw` is left as it is.
fn post_process(
    raw: &Path,
    output: &Path,
    dump_dirs: &[PathBuf],
    snapshot: Option<&perfclock::ClockSnapshot>,
) -> Result<(), String> {
    let dir = parent_dir(output);
    let temp = |what: &str| {
        tempfile::Builder::new()
            .prefix(&format!(".perfclock-record-{what}-"))
            .tempfile_in(dir)
            .map_err(|e| format!("cannot create a temporary file in {}: {e}", dir.display()))
    };
    let converted = temp("conv")?;
    match add_time_conv(raw, converted.path(), dump_dirs, snapshot)? {
        TimeConvStep::ClockDataOnly => {
            errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            converted
                .persist(output)
                .map_err(|e| format!("writing {}: {}", output.display(), e.error))?;
        }
        TimeConvStep::NoJitdump => {
            errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            fs::copy(raw, converted.path())
                .map_err(|e| format!("copying {}: {e}", raw.display()))?;
            converted
                .persist(output)
                .map_err(|e| format!("writing {}: {}", output.display(), e.error))?;
        }
        TimeConvStep::Written(what) => {
            errln!("{NAME}: {what}; perf inject --jit");
            let injected = temp("jit")?;
            let result = Command::new("perf")
                .args(["inject", "--jit", "-i"])
                .arg(converted.path())
                .arg("-o")
                .arg(injected.path())
                .status()
                .map_err(|e| format!("cannot run perf inject: {e}"))?;
            if !result.success() {
                return Err(format!(
                    "perf inject --jit failed ({result}; see its message above)"
                ));
            }
            injected
                .persist(output)
                .map_err(|e| format!("writing {}: {}", output.display(), e.error))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn refuses_every_spelling_of_clockid_and_compression() {
        for spelling in [
            &["-k", "1"][..],
            &["-k1"],
            &["--clockid", "1"],
            &["--clockid=monotonic"],
            &["-F", "99", "-gk", "1"],
            &["-ak1"],
            &["-z"],
            &["-z3"],
            &["--compression-level"],
            &["--compression-level=1"],
        ] {
            assert!(
                refused_option(&args(spelling)).is_some(),
                "{spelling:?} not refused"
            );
        }
        for fine in [
            &["-F", "999"][..],
            &["--call-graph", "dwarf"],
            &["-e", "cycles"],
            &["-eblock:block_rq_issue"],
        ] {
            assert_eq!(refused_option(&args(fine)), None, "{fine:?} refused");
        }
    }

    #[test]
    fn appends_the_agent_to_the_users_java_tool_options() {
        let value = java_tool_options(
            Some("-Xmx1g".into()),
            Path::new("/a/libperfclock_agent.so"),
            Path::new("/d/perf.data.jit-x"),
        )
        .unwrap();
        assert_eq!(
            value,
            "-Xmx1g -agentpath:/a/libperfclock_agent.so=jitdump=/d/perf.data.jit-x"
        );
        let error =
            java_tool_options(None, Path::new("/a b/agent.so"), Path::new("/d")).unwrap_err();
        assert!(error.contains("--no-java-agent"), "{error}");
    }
}
