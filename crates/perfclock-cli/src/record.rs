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

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use perfclock_perfdata::check_output_path;

use crate::error::RecordError;
use crate::output::{chain, errln};
use crate::{agent_path, children, inject, jvms, signals};

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
    /// `-p`: the running processes to record.
    pub pids: Vec<u32>,
    /// `-a`: the whole machine.
    pub system_wide: bool,
    /// Stop recording after this long.
    pub duration: Option<Duration>,
    /// `-p`: a JVM that cannot be attached is a warning, not an error.
    pub allow_unattached: bool,
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

/// The directory `path` is in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// OUT's file name, for the names of what is created beside it.
fn file_name(output: &Path) -> String {
    output.file_name().map_or_else(
        || "perf.data".into(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// The private (0700, mkdtemp) directory beside OUT that holds perf's raw recording and the
/// intermediate files: nobody else can plant or read anything in it, and a final rename from
/// it into OUT stays on one file system. Removed when dropped, unless kept.
struct WorkDir {
    dir: tempfile::TempDir,
    /// perf record's output, created here exclusively before perf opens it.
    raw: PathBuf,
}

impl WorkDir {
    fn create(output: &Path) -> Result<Self, RecordError> {
        let parent = parent_dir(output);
        let dir = tempfile::Builder::new()
            .prefix(&format!(".{}.perfclock-", file_name(output)))
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(parent)
            .map_err(|source| RecordError::WorkDir {
                dir: parent.to_owned(),
                source,
            })?;
        let raw = dir.path().join(format!("{}.raw", file_name(output)));
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&raw)
            .map_err(|source| RecordError::CreateRaw {
                path: raw.clone(),
                source,
            })?;
        Ok(Self { dir, raw })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Keeps the directory and the raw recording in it (after an error), removing the rest.
    fn keep_raw(self) {
        if let Ok(entries) = fs::read_dir(self.dir.path()) {
            for entry in entries.flatten() {
                if entry.path() != self.raw {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        let _ = self.dir.keep();
    }
}

/// `OUT.jit-XXXXXX` (mkdtemp), mode 0711: the JVMs' jitdump directories are made inside it,
/// where no other user can create or list anything. Kept: the output's `jitted-*.so` are
/// written there by `perf inject --jit` and perf report reads them there.
fn make_dump_root(output: &Path) -> Result<PathBuf, RecordError> {
    let dir = parent_dir(output)
        .canonicalize()
        .map_err(|source| RecordError::ResolveDir {
            output: output.to_owned(),
            source,
        })?;
    let created = tempfile::Builder::new()
        .prefix(&format!("{}.jit-", file_name(output)))
        .permissions(fs::Permissions::from_mode(0o711))
        .tempdir_in(&dir)
        .map_err(|source| RecordError::DumpDir { dir, source })?;
    Ok(created.keep())
}

/// The launched command's jitdump directory: a random name (128 bits) in the dump root, mode
/// 1777. The command may switch users (`setpriv`, `sudo -u`, a service's own drop of root), so
/// every user the command runs as must be able to create its dump there; a user outside the
/// command cannot, for want of the name: the root (0711) cannot be listed, and the name is given
/// only to the command (its environment). The sticky bit keeps one user's files from another's
/// renames and removals, and lets the kernel refuse to follow a link another user plants there
/// (protected_symlinks) when perf inject writes into it.
fn make_command_dump_dir(root: &Path) -> Result<PathBuf, RecordError> {
    let created = tempfile::Builder::new()
        .prefix("")
        .rand_bytes(22)
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(root)
        .map_err(|source| RecordError::DumpDir {
            dir: root.to_owned(),
            source,
        })?;
    let path = created.keep();
    // After creation: mkdir's mode goes through the umask.
    match fs::set_permissions(&path, fs::Permissions::from_mode(0o1777)) {
        Ok(()) => Ok(path),
        Err(source) => Err(RecordError::OpenDumpDir { path, source }),
    }
}

/// `JAVA_TOOL_OPTIONS` with the agent appended to the user's value.
fn java_tool_options(
    current: Option<OsString>,
    agent: &Path,
    dump_dir: &Path,
) -> Result<OsString, RecordError> {
    // HotSpot ends -agentpath's path at the first `=` (the options follow it).
    if agent.as_os_str().as_bytes().contains(&b'=') {
        return Err(RecordError::AgentPathEquals {
            agent: agent.to_owned(),
        });
    }
    // The JVM splits JAVA_TOOL_OPTIONS at white space, and the agent its options at commas.
    for (what, path) in [("agent", agent), ("jitdump directory", dump_dir)] {
        let text = path.to_string_lossy();
        if text.contains(|c: char| c.is_whitespace() || c == ',' || c == '"' || c == '\'') {
            return Err(RecordError::ToolOptionsPath {
                what,
                path: path.to_owned(),
            });
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
/// it lacks one, from the sidecars next to the dumps (the one call site for that code).
fn add_time_conv(
    raw: &Path,
    out_tmp: &Path,
    snapshot: Option<&perfclock::ClockSnapshot>,
    cleanup: &signals::TempCleanup,
) -> Result<TimeConvStep, RecordError> {
    // The sidecars are looked for next to each dump the recording names: every JVM has a
    // directory of its own (pid namespaces may give two JVMs one pid).
    let options = inject::InjectOptions {
        input: raw.to_path_buf(),
        output: out_tmp.to_path_buf(),
        dump_dirs: Vec::new(),
        clock_data: match snapshot {
            Some(snapshot) => inject::ClockDataSource::Recorded(*snapshot),
            None => inject::ClockDataSource::None,
        },
    };
    match inject::run(&options, cleanup) {
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
        Err(error) => Err(RecordError::TimeConv(error)),
    }
}

/// The clock snapshots taken at the start and at the end of the recording: the anchors of
/// HEADER_CLOCK_DATA, which the perf.data library adds to OUT.
struct ClockAnchors {
    start: Option<perfclock::ClockSnapshot>,
    end: Option<perfclock::ClockSnapshot>,
}

fn take_snapshot(when: &str) -> Option<perfclock::ClockSnapshot> {
    match perfclock::snapshot() {
        Ok(snapshot) => Some(snapshot),
        Err(error) => {
            errln!(
                "{NAME}: warning: no clock snapshot at the {when}: {}",
                chain(&error)
            );
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

fn usage(message: String) -> Failure {
    Failure(message, 2)
}

fn fail(message: String) -> Failure {
    Failure(message, 1)
}

/// `error` and its causes, as the command's failure.
fn failed(error: RecordError) -> Failure {
    fail(chain(&error))
}

/// What is recorded: a command, running processes, or the whole machine.
enum Target<'a> {
    Command(&'a [OsString]),
    Pids(&'a [u32]),
    SystemWide,
}

/// The usage errors, before anything is created or started.
fn check_arguments(options: &RecordOptions) -> Result<Target<'_>, Failure> {
    if let Some((arg, why)) = refused_option(&options.perf_args) {
        return Err(usage(format!(
            "refusing perf option {arg}: {why}; record without it"
        )));
    }
    let own = [
        "-o",
        "--output",
        "--agent",
        "--no-java-agent",
        "-p",
        "--pid",
        "-a",
    ];
    let own_long = [
        "--output=",
        "--agent=",
        "--pid=",
        "--all-cpus",
        "--duration",
    ];
    if let Some(arg) = options.perf_args.iter().find(|a| {
        let a = a.to_string_lossy();
        own.contains(&a.as_ref()) || own_long.iter().any(|long| a.starts_with(long))
    }) {
        return Err(usage(format!(
            "{} after a perf option: perfclock record's own options (-o, -p, -a, --duration, \
             --agent, --no-java-agent, --allow-unattached) go before the perf options",
            arg.to_string_lossy()
        )));
    }
    let target =
        match (&options.pids[..], options.system_wide, &options.command[..]) {
            ([], false, []) => return Err(usage(
                "nothing to record: perfclock record [OPTIONS] [PERF-OPTIONS]... -- CMD [ARGS], \
                 or -p PID[,PID...], or -a"
                    .into(),
            )),
            ([], false, command) => Target::Command(command),
            (pids, false, []) => Target::Pids(pids),
            ([], true, []) => Target::SystemWide,
            _ => return Err(usage(
                "-p, -a and a command exclude each other: pass one (--duration bounds -p and -a)"
                    .into(),
            )),
        };
    if options.allow_unattached && options.pids.is_empty() {
        return Err(usage("--allow-unattached goes with -p".into()));
    }
    Ok(target)
}

/// The agent to use, unless `--no-java-agent`.
fn agent(options: &RecordOptions) -> Result<Option<PathBuf>, Failure> {
    if options.no_java_agent {
        return Ok(None);
    }
    let agent = match &options.agent {
        Some(path) => path
            .canonicalize()
            .map_err(|e| fail(format!("--agent {}: {e}", path.display())))?,
        None => agent_path::find()
            .map_err(|e| fail(format!("{e}; or pass --agent PATH, or --no-java-agent")))?,
    };
    Ok(Some(agent))
}

/// The jitdump directories and the JVMs attached so far.
#[derive(Default)]
struct Dumps {
    root: Option<PathBuf>,
    dirs: Vec<PathBuf>,
    /// The JVMs `-p`/`-a` attached, whose sessions end with the recording.
    attached: Vec<u32>,
}

impl Dumps {
    /// Reports `outcome` ([`report`]); whether it is a failure to attach.
    fn add(&mut self, outcome: &jvms::Outcome) -> bool {
        self.keep(outcome);
        report(outcome)
    }

    /// Keeps an attached JVM's directory and pid.
    fn keep(&mut self, outcome: &jvms::Outcome) {
        if let jvms::Outcome::Attached { pid, dir } = outcome {
            self.dirs.push(dir.clone());
            self.attached.push(*pid);
        }
    }

    /// Ends the agent's session in every JVM attached for this recording: their dumps are
    /// closed and their directories stop growing.
    fn stop_sessions(&self, agent: Option<&Path>) {
        let Some(agent) = agent else { return };
        for &pid in &self.attached {
            if let Err(error) = jvms::stop_session(pid, agent) {
                errln!(
                    "{NAME}: warning: cannot end the agent's session in JVM {pid}: {}",
                    chain(&error)
                );
            }
        }
    }

    /// After the recording: the JVMs' users can no longer write into the directories, and
    /// empty ones go.
    fn finish(&self) {
        for dir in &self.dirs {
            if let Err(error) = jvms::lock_down(dir) {
                errln!(
                    "{NAME}: warning: cannot take back {}: {error}",
                    dir.display()
                );
            }
            let _ = fs::remove_dir(dir);
        }
        if let Some(root) = &self.root {
            let _ = fs::remove_dir(root);
        }
    }
}

/// `perf record` for `target`, writing `raw`.
fn perf_record(options: &RecordOptions, target: &Target<'_>, raw: &Path) -> Command {
    let mut perf = Command::new("perf");
    perf.arg("record").arg("-g").args(&options.perf_args);
    match target {
        Target::Pids(pids) => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            perf.arg("-p").arg(list.join(","));
        }
        Target::SystemWide => {
            perf.arg("-a");
        }
        Target::Command(_) => {}
    }
    perf.arg("-o").arg(raw);
    if let Target::Command(command) = target {
        perf.arg("--").args(*command);
    }
    // perf writes its file on SIGINT, and stops the command it runs.
    children::die_with_parent(&mut perf, libc::SIGINT);
    perf
}

/// Waits for perf, sending it SIGINT once `duration` has passed or a signal was received (the
/// signal thread forwards it too; this retries, as a send fails while an attach runs as the
/// JVM's user).
fn wait_for_perf(
    perf: &mut std::process::Child,
    signals: &signals::TempCleanup,
    duration: Option<Duration>,
) -> io::Result<ExitStatus> {
    let start = Instant::now();
    let mut stopped = false;
    loop {
        if let Some(status) = perf.try_wait()? {
            return Ok(status);
        }
        let due = duration.is_some_and(|d| start.elapsed() >= d) || signals.received().is_some();
        if due && !stopped {
            stopped = children::kill(perf.id(), libc::SIGINT).is_ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The attaches of `-p`, before recording: an error unless `--allow-unattached`.
fn attach_pids(
    pids: &[u32],
    agent: &Path,
    dumps: &mut Dumps,
    allow_unattached: bool,
) -> Result<(), Failure> {
    let root = dumps.root.clone().unwrap_or_default();
    let mut failed = Vec::new();
    for &pid in pids {
        if dumps.add(&jvms::attach(pid, agent, &root)) {
            failed.push(pid.to_string());
        }
    }
    if failed.is_empty() || allow_unattached {
        return Ok(());
    }
    dumps.finish();
    Err(fail(format!(
        "could not attach JVM(s) {} (see above): nothing recorded; pass --allow-unattached to \
         record them without their JIT code's names",
        failed.join(", ")
    )))
}

fn record(options: &RecordOptions) -> Result<u8, Failure> {
    let target = check_arguments(options)?;
    let output = &options.output;
    // Before anything starts: a device, FIFO, socket, directory or symlink is never replaced.
    check_output_path(output).map_err(|e| fail(e.to_string()))?;
    let agent = agent(options)?;
    let work = WorkDir::create(output).map_err(failed)?;
    let mut dumps = Dumps::default();
    let mut env_options = None;
    if let Some(agent) = &agent {
        let root = make_dump_root(output).map_err(failed)?;
        dumps.root = Some(root.clone());
        if let Target::Command(_) = target {
            let dir = make_command_dump_dir(&root).map_err(failed)?;
            let value = java_tool_options(std::env::var_os("JAVA_TOOL_OPTIONS"), agent, &dir);
            env_options = Some(value.map_err(|error| {
                dumps.dirs.push(dir.clone());
                dumps.finish();
                failed(error)
            })?);
            errln!(
                "{NAME}: JVMs in the command write their jitdumps into {} (keep it: the \
                 output's JIT symbols are read from there)",
                dir.display()
            );
            dumps.dirs.push(dir);
        }
    }
    let signals = signals::TempCleanup::install()
        .map_err(|e| fail(format!("cannot handle SIGINT/SIGTERM/SIGHUP/SIGQUIT: {e}")))?;
    signals.forward_to(0);
    if let (Target::Pids(pids), Some(agent)) = (&target, &agent) {
        attach_pids(pids, agent, &mut dumps, options.allow_unattached)?;
    }
    if let Some(signal) = signals.received() {
        dumps.finish();
        return Err(Failure(
            format!("interrupted (signal {signal}) before recording"),
            u8::try_from(128 + signal).unwrap_or(1),
        ));
    }
    let recorded = run_perf_record(
        options,
        &target,
        &work,
        env_options,
        &signals,
        agent.clone(),
        &mut dumps,
    );
    dumps.stop_sessions(agent.as_deref());
    dumps.finish();
    let (status, anchors) = match recorded {
        Ok(recorded) => recorded,
        Err(failure) => {
            drop(work);
            return Err(failure);
        }
    };
    finish(&target, work, status, &anchors, &signals, output)
}

/// Starts `perf record` (and, for `-a`, the watcher that attaches JVMs), waits for it, and
/// stops what it left of the command if it died.
fn run_perf_record(
    options: &RecordOptions,
    target: &Target<'_>,
    work: &WorkDir,
    env_options: Option<OsString>,
    signals: &signals::TempCleanup,
    agent: Option<PathBuf>,
    dumps: &mut Dumps,
) -> Result<(ExitStatus, ClockAnchors), Failure> {
    if let Target::Command(_) = target {
        // If perf dies without stopping the command (SIGKILL), the command becomes ours.
        if let Err(error) = children::become_subreaper() {
            errln!("{NAME}: warning: cannot adopt what perf leaves running: {error}");
        }
    }
    let start = take_snapshot("start");
    let mut perf = perf_record(options, target, &work.raw);
    if let Some(value) = &env_options {
        perf.env("JAVA_TOOL_OPTIONS", value);
    }
    let mut child = perf.spawn().map_err(|error| {
        fail(if error.kind() == io::ErrorKind::NotFound {
            "no `perf` on PATH: install it (Debian: linux-perf; Fedora: perf) or add its \
             directory to PATH"
                .into()
        } else {
            format!("cannot run perf: {error}")
        })
    })?;
    signals.forward_to(child.id());
    errln!(
        "{NAME}: recording to {} (perf record -g)",
        work.raw.display()
    );
    let watcher = match (target, agent, &dumps.root) {
        (Target::SystemWide, Some(agent), Some(root)) => {
            let skip = vec![std::process::id(), child.id()];
            match jvms::Watcher::start(agent, root.clone(), skip, report) {
                Ok(watcher) => Some(watcher),
                Err(error) => {
                    errln!("{NAME}: warning: cannot watch for JVMs: {error}");
                    None
                }
            }
        }
        _ => None,
    };
    let waited = wait_for_perf(&mut child, signals, options.duration);
    if let Some(watcher) = watcher {
        let outcomes = watcher.finish();
        list_unattached(&outcomes);
        for outcome in &outcomes {
            dumps.keep(outcome);
        }
    }
    let status = waited.map_err(|e| fail(format!("waiting for perf: {e}")))?;
    if let (Target::Command(_), Some(signal)) = (target, status.signal()) {
        let stopped = children::stop_adopted(Duration::from_secs(2));
        errln!(
            "{NAME}: perf record was killed by signal {signal}; stopped the {} process(es) of \
             the command it left running",
            stopped.len()
        );
    }
    let anchors = ClockAnchors {
        start,
        end: take_snapshot("end"),
    };
    Ok((status, anchors))
}

/// Says what happened to one process `-p` or `-a` looked at; whether it could not be attached.
fn report(outcome: &jvms::Outcome) -> bool {
    match outcome {
        jvms::Outcome::Attached { pid, dir } => {
            errln!(
                "{NAME}: attached JVM {pid}: its jitdump goes to {}",
                dir.display()
            );
            false
        }
        jvms::Outcome::NotJvm { pid, name } => {
            errln!("{NAME}: {pid} ({name}) is not a HotSpot JVM: recorded without an agent");
            false
        }
        jvms::Outcome::Failed { pid, error } => {
            errln!("{NAME}: cannot attach JVM {pid}: {}", chain(error));
            true
        }
    }
}

/// `-a`'s list, at the end, of the JVMs recorded without their JIT code's names.
fn list_unattached(outcomes: &[jvms::Outcome]) {
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            jvms::Outcome::Failed { pid, error } => Some(format!("  {pid}: {}", chain(error))),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        errln!(
            "{NAME}: {} JVM(s) could not be attached; their JIT code is not named:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
}

/// After perf record: the exit code, the messages, and OUT.
fn finish(
    target: &Target<'_>,
    work: WorkDir,
    status: ExitStatus,
    anchors: &ClockAnchors,
    signals: &signals::TempCleanup,
    output: &Path,
) -> Result<u8, Failure> {
    if !recording_complete(&work.raw) {
        return Err(fail(match status.signal() {
            Some(signal) => format!(
                "perf record was killed by signal {signal} before it finished its file: nothing \
                 recorded"
            ),
            None => format!(
                "perf record ended with {status} and left no complete recording (see perf's \
                 message above: a missing event, or perf_event_open refused, which \
                 /proc/sys/kernel/perf_event_paranoid or CAP_PERFMON decides; or the command \
                 could not start)"
            ),
        }));
    }
    let interrupted = signals.received();
    let code = match (target, interrupted) {
        (_, Some(signal)) if signal != libc::SIGINT || matches!(target, Target::Command(_)) => {
            errln!("{NAME}: interrupted (signal {signal}); perf stopped recording");
            u8::try_from(128 + signal).unwrap_or(1)
        }
        (Target::Command(_), None) => {
            if !status.success() {
                errln!("{NAME}: the command failed ({status}); post-processing what was recorded");
            }
            // perf record exits with the workload's status (and dies by the workload's signal).
            status_code(status)
        }
        _ => 0,
    };
    anchors.report();
    if let Err(error) = post_process(&work, output, anchors.start.as_ref(), signals) {
        let raw = work.raw.display().to_string();
        work.keep_raw();
        return Err(fail(format!(
            "{}; the recording is kept in {raw}",
            chain(&error)
        )));
    }
    drop(work);
    let out = output.display();
    errln!(
        "{NAME}: wrote {out}; next:\n  perf report -i {out}\n  perf script -i {out}\n  samply \
         import {out}"
    );
    Ok(code)
}

/// Renames `from` over `output` (checked again first), with signals held off.
fn commit(from: &Path, output: &Path, signals: &signals::TempCleanup) -> Result<(), RecordError> {
    signals.commit(from, || {
        check_output_path(output).map_err(RecordError::Output)?;
        fs::rename(from, output).map_err(|source| RecordError::Rename {
            output: output.to_owned(),
            source,
        })
    })
}

/// The raw recording to `output`: TIME_CONV where missing, then `perf inject --jit` when a
/// jitdump was mapped. `output` appears only complete; a signal meanwhile removes the
/// intermediate files, keeps the raw recording and says so.
fn post_process(
    work: &WorkDir,
    output: &Path,
    snapshot: Option<&perfclock::ClockSnapshot>,
    signals: &signals::TempCleanup,
) -> Result<(), RecordError> {
    let message = format!(
        "{NAME}: interrupted (signal {{signal}}) while writing {}: it was not written; the \
         recording is kept in {}",
        output.display(),
        work.raw.display()
    );
    signals.fatal(None, Some(message.clone()));
    let converted = work.path("conv.data");
    signals.register(&converted);
    match add_time_conv(&work.raw, &converted, snapshot, signals)? {
        TimeConvStep::ClockDataOnly => {
            errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            commit(&converted, output, signals)?;
        }
        TimeConvStep::NoJitdump => {
            errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            commit(&work.raw, output, signals)?;
        }
        TimeConvStep::Written(what) => {
            errln!("{NAME}: {what}; perf inject --jit");
            let injected = work.path("jit.data");
            signals.register(&injected);
            let mut inject = Command::new("perf");
            inject
                .args(["inject", "--jit", "-i"])
                .arg(&converted)
                .arg("-o")
                .arg(&injected);
            children::die_with_parent(&mut inject, libc::SIGTERM);
            let mut child = inject.spawn().map_err(RecordError::RunInject)?;
            signals.fatal(Some(child.id()), Some(message.clone()));
            let result = child.wait();
            signals.fatal(None, Some(message));
            let result = result.map_err(RecordError::WaitInject)?;
            if !result.success() {
                return Err(RecordError::InjectFailed(result));
            }
            commit(&injected, output, signals)?;
        }
    }
    // OUT is complete: a signal now only ends the process.
    signals.fatal(None, None);
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
        assert!(error.to_string().contains("--no-java-agent"), "{error}");
    }
}
