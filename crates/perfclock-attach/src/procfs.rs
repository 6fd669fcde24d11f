//! Pure parsers of what `/proc/PID/{status,maps,cmdline,environ}` say about the target (bytes
//! the kernel and the target wrote: fuzzed by `fuzz/attach_parsers`).

/// What `/proc/PID/status` says about the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    /// `Name:` (the command name, at most 15 bytes).
    pub name: String,
    /// `State:`'s letter (`Z` for a zombie, `X` dead).
    pub state: char,
    /// `Tgid:`: the process (thread group) id in perfclock's pid namespace.
    pub tgid: u32,
    /// The last `NStgid:` field: the process id in its own (innermost) pid namespace; `None`
    /// where the kernel predates the field (Linux < 4.1).
    pub ns_tgid: Option<u32>,
    /// The effective uid (`Uid:`'s second field): the one HotSpot compares its peer's with.
    pub euid: u32,
    /// The effective gid (`Gid:`'s second field).
    pub egid: u32,
    /// `SigCgt:`: the signals it has handlers for (bit N-1 for signal N).
    pub caught_signals: u64,
}

impl ProcStatus {
    /// Parses `/proc/PID/status`; `None` if a field it needs is missing or malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let (mut name, mut state, mut tgid, mut ns_tgid) = (None, None, None, None);
        let (mut euid, mut egid, mut caught_signals) = (None, None, None);
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            let second = || value.split_whitespace().nth(1)?.parse().ok();
            match key {
                "Name" => name = Some(value.to_owned()),
                "State" => state = value.chars().next(),
                "Tgid" => tgid = value.parse().ok(),
                "NStgid" => ns_tgid = value.split_whitespace().next_back()?.parse().ok(),
                "Uid" => euid = second(),
                "Gid" => egid = second(),
                "SigCgt" => caught_signals = u64::from_str_radix(value, 16).ok(),
                _ => {}
            }
        }
        Some(Self {
            name: name?,
            state: state?,
            tgid: tgid?,
            ns_tgid,
            euid: euid?,
            egid: egid?,
            caught_signals: caught_signals?,
        })
    }

    /// Whether the process has a handler for `signal` (HotSpot catches SIGQUIT once it has
    /// started, unless run with `-Xrs`).
    pub fn catches(&self, signal: i32) -> bool {
        (1..=64).contains(&signal) && self.caught_signals & (1 << (signal - 1)) != 0
    }
}

/// Which JVM `/proc/PID/maps` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vm {
    /// `libjvm.so` is mapped and OpenJ9's VM is not.
    HotSpot,
    /// OpenJ9 (`libj9vm*.so`): another attach mechanism.
    OpenJ9,
    /// No `libjvm.so`.
    NotJava,
}

/// The mapped file's path of a maps line (the sixth field onward), without ` (deleted)`.
fn mapped_path(line: &str) -> Option<&str> {
    let mut rest = line;
    for _ in 0..5 {
        rest = rest.trim_start().split_once(char::is_whitespace)?.1;
    }
    let path = rest.trim();
    Some(path.strip_suffix(" (deleted)").unwrap_or(path))
}

/// What `/proc/PID/maps` says, gathered one line at a time (the file can be hundreds of MiB;
/// nothing of it is kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapsScan {
    libjvm: bool,
    openj9: bool,
    file_mapped: bool,
}

impl MapsScan {
    /// Takes one line of maps into account; `file` is the (device major, minor, inode) looked
    /// for by [`file_mapped`](Self::file_mapped).
    pub fn line(&mut self, line: &str, file: (u32, u32, u64)) {
        if let Some(path) = mapped_path(line) {
            let name = path.rsplit('/').next().unwrap_or(path);
            self.openj9 |= name.starts_with("libj9vm") && name.ends_with(".so");
            self.libjvm |= name == "libjvm.so";
        }
        self.file_mapped |= maps_line_maps_file(line, file);
    }

    /// Which VM the lines show.
    pub fn vm(&self) -> Vm {
        if self.openj9 {
            Vm::OpenJ9
        } else if self.libjvm {
            Vm::HotSpot
        } else {
            Vm::NotJava
        }
    }

    /// Whether a line mapped the file looked for.
    pub fn file_mapped(&self) -> bool {
        self.file_mapped
    }
}

/// Which VM the process runs, from `/proc/PID/maps`.
pub fn vm_of_maps(maps: &str) -> Vm {
    let mut scan = MapsScan::default();
    maps.lines().for_each(|line| scan.line(line, (0, 0, 0)));
    scan.vm()
}

fn maps_line_maps_file(line: &str, (dev_major, dev_minor, inode): (u32, u32, u64)) -> bool {
    let mut fields = line.split_whitespace().skip(3);
    let (Some(dev), Some(ino)) = (fields.next(), fields.next()) else {
        return false;
    };
    let Some((major, minor)) = dev.split_once(':') else {
        return false;
    };
    inode != 0
        && u32::from_str_radix(major, 16) == Ok(dev_major)
        && u32::from_str_radix(minor, 16) == Ok(dev_minor)
        && ino.parse::<u64>() == Ok(inode)
}

/// Whether `/proc/PID/maps` maps the file with this device and inode (an agent loaded before).
pub fn maps_file(maps: &str, dev_major: u32, dev_minor: u32, inode: u64) -> bool {
    maps.lines()
        .any(|line| maps_line_maps_file(line, (dev_major, dev_minor, inode)))
}

/// The `java` launcher's options that take the next argument as their value (its
/// `IsWhiteSpaceOption`).
const OPTIONS_WITH_VALUE: &[&str] = &[
    "-cp",
    "-classpath",
    "--class-path",
    "-p",
    "--module-path",
    "--upgrade-module-path",
    "--add-modules",
    "--enable-native-access",
    "--limit-modules",
    "--add-reads",
    "--add-exports",
    "--add-opens",
    "--patch-module",
    "--describe-module",
    "-d",
    "--source",
];

/// At most this many bytes of option files (`@argfile`s and `-XX:VMOptionsFile=`) are read
/// for one attach, all files together.
pub const OPTION_FILES_MAX_BYTES: usize = 1 << 20;

/// At most this many option files are read for one attach.
pub const OPTION_FILES_MAX_COUNT: usize = 64;

/// The tokens of an `@argfile`, split as the launcher splits them (libjli's `args.c`): white
/// space separates, `#` starts a comment to the end of the line, `'` and `"` quote (a
/// backslash escapes inside quotes, and a backslash before a line end joins the lines).
fn argfile_tokens(bytes: &[u8]) -> Vec<Vec<u8>> {
    enum State {
        Between,
        Token,
        Quoted(u8),
        Escape(u8),
        /// After a backslash-newline in quotes: leading white space is skipped.
        JoinedLine(u8),
        Comment,
    }
    let mut tokens = Vec::new();
    let mut token = Vec::new();
    let mut state = State::Between;
    let mut in_token = false;
    for &byte in bytes {
        let space = matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c');
        state = match state {
            State::Comment if byte == b'\n' || byte == b'\r' => State::Between,
            State::Comment => State::Comment,
            State::Escape(quote) if byte == b'\n' || byte == b'\r' => State::JoinedLine(quote),
            State::Escape(quote) => {
                token.push(match byte {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'f' => b'\x0c',
                    other => other,
                });
                State::Quoted(quote)
            }
            State::JoinedLine(quote) if space => State::JoinedLine(quote),
            State::Quoted(quote) | State::JoinedLine(quote) if byte == quote => State::Token,
            State::Quoted(quote) | State::JoinedLine(quote) if byte == b'\\' => {
                State::Escape(quote)
            }
            State::Quoted(_) if byte == b'\n' || byte == b'\r' => {
                tokens.push(std::mem::take(&mut token));
                in_token = false;
                State::Between
            }
            State::Quoted(quote) | State::JoinedLine(quote) => {
                token.push(byte);
                State::Quoted(quote)
            }
            State::Between | State::Token if space || byte == b'#' => {
                if in_token {
                    tokens.push(std::mem::take(&mut token));
                    in_token = false;
                }
                if byte == b'#' {
                    State::Comment
                } else {
                    State::Between
                }
            }
            State::Between | State::Token if byte == b'\'' || byte == b'"' => {
                in_token = true;
                State::Quoted(byte)
            }
            State::Between | State::Token => {
                in_token = true;
                token.push(byte);
                State::Token
            }
        };
    }
    if in_token {
        tokens.push(token);
    }
    tokens
}

/// Where the launcher stands in its arguments (`java.c`'s `ParseArguments`, `args.c`'s
/// `checkArg`).
#[derive(Debug, Default)]
struct Launcher {
    /// The next argument is the value of an option.
    value_next: bool,
    /// The next argument names the program (after `-jar`, `-m`, `--module`), whatever it
    /// starts with.
    program_next: bool,
    /// The main class, jar or module is seen: the rest is the program's.
    main_seen: bool,
    /// `--disable-@files`: no more expansion.
    no_argfiles: bool,
}

impl Launcher {
    /// Takes one argument; true if it is one of the JVM's options.
    fn option(&mut self, arg: &str) -> bool {
        if self.program_next || !arg.starts_with('-') && !self.value_next {
            self.main_seen = true;
            return false;
        }
        if self.value_next {
            self.value_next = false;
            return false;
        }
        match arg {
            "-jar" | "-m" | "--module" => self.program_next = true,
            "--disable-@files" => self.no_argfiles = true,
            _ if arg.starts_with("--module=") => self.main_seen = true,
            _ => self.value_next = OPTIONS_WITH_VALUE.contains(&arg),
        }
        true
    }
}

/// Reads option files within [`OPTION_FILES_MAX_BYTES`] and [`OPTION_FILES_MAX_COUNT`];
/// `None` once the budget is spent (the rest cannot be judged).
struct OptionFiles<'a> {
    read_file: &'a mut dyn FnMut(&str, usize) -> Option<Vec<u8>>,
    bytes_left: usize,
    files_left: usize,
}

/// What reading one option file gave.
enum FileRead {
    /// The whole file (or nothing, if it cannot be read: the JVM's copy may be gone).
    Whole(Vec<u8>),
    /// The budget ran out: the file's options cannot all be known.
    OverBudget(Vec<u8>),
}

impl OptionFiles<'_> {
    fn read(&mut self, name: &str) -> FileRead {
        if self.files_left == 0 || self.bytes_left == 0 {
            return FileRead::OverBudget(Vec::new());
        }
        self.files_left -= 1;
        // One byte past the budget tells a file that fits from one that does not.
        let Some(mut bytes) = (self.read_file)(name, self.bytes_left + 1) else {
            return FileRead::Whole(Vec::new());
        };
        if bytes.len() > self.bytes_left {
            bytes.truncate(self.bytes_left);
            self.bytes_left = 0;
            // The last token may be cut: drop it.
            let cut = bytes
                .iter()
                .rposition(|b| b.is_ascii_whitespace())
                .unwrap_or(0);
            bytes.truncate(cut);
            return FileRead::OverBudget(bytes);
        }
        self.bytes_left -= bytes.len();
        FileRead::Whole(bytes)
    }
}

/// Hands each of the JVM's options on a `java` command line to `judge`, in order: argv[1..] up
/// to the main class, `-jar FILE`, `-m MODULE` or `--module MODULE`, with `@argfile`s expanded
/// where the launcher expands them (among its own options, before the main class, one level)
/// and `-XX:VMOptionsFile=` files split at white space. Stops where the option-file budget runs
/// out. Nothing is kept: memory stays bounded by one file.
fn each_jvm_option(cmdline: &[u8], files: &mut OptionFiles<'_>, judge: &mut dyn FnMut(&str)) {
    let mut launcher = Launcher::default();
    let mut take = |arg: &str, launcher: &mut Launcher, files: &mut OptionFiles<'_>| -> bool {
        if !launcher.option(arg) {
            return true;
        }
        if let Some(name) = arg.strip_prefix("-XX:VMOptionsFile=") {
            let (bytes, complete) = match files.read(name) {
                FileRead::Whole(bytes) => (bytes, true),
                FileRead::OverBudget(bytes) => (bytes, false),
            };
            String::from_utf8_lossy(&bytes)
                .split_whitespace()
                .for_each(&mut *judge);
            if !complete {
                return false;
            }
        }
        judge(arg);
        true
    };
    for arg in cmdline.split(|&b| b == 0).skip(1) {
        if launcher.main_seen {
            return;
        }
        let arg = String::from_utf8_lossy(arg);
        let file = match arg.strip_prefix('@') {
            Some(name) if !launcher.no_argfiles && !name.is_empty() && !name.starts_with('@') => {
                name
            }
            Some(escaped) if !launcher.no_argfiles && escaped.starts_with('@') => {
                if !take(escaped, &mut launcher, files) {
                    return;
                }
                continue;
            }
            _ => {
                if !take(&arg, &mut launcher, files) {
                    return;
                }
                continue;
            }
        };
        let (bytes, complete) = match files.read(file) {
            FileRead::Whole(bytes) => (bytes, true),
            FileRead::OverBudget(bytes) => (bytes, false),
        };
        for token in argfile_tokens(&bytes) {
            if launcher.main_seen || !take(&String::from_utf8_lossy(&token), &mut launcher, files) {
                return;
            }
        }
        if !complete {
            return;
        }
    }
}

/// A HotSpot option that prevents attaching, and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachBlocker {
    /// The option as written: `-XX:+DisableAttachMechanism` or `-Xrs`.
    pub option: String,
    /// Where: "command line" or the environment variable's name.
    pub source: String,
}

/// The options in effect that block attaching, judged one option at a time.
#[derive(Debug, Default)]
struct Blockers {
    disabled: Option<AttachBlocker>,
    reduced_signals: Option<AttachBlocker>,
}

impl Blockers {
    fn judge(&mut self, option: &str, source: &str) {
        let blocker = || AttachBlocker {
            option: option.to_owned(),
            source: source.to_owned(),
        };
        match option {
            "-XX:+DisableAttachMechanism" => self.disabled = Some(blocker()),
            "-XX:-DisableAttachMechanism" => self.disabled = None,
            "-Xrs" => self.reduced_signals = Some(blocker()),
            _ => {}
        }
    }
}

/// The JVM options in effect that disable attach, from `/proc/PID/cmdline` and
/// `/proc/PID/environ` (NUL-separated): the last `-XX:[+-]DisableAttachMechanism` wins, as in
/// HotSpot; `-Xrs` stops the JVM handling the SIGQUIT that starts the attach listener.
///
/// HotSpot reads `JAVA_TOOL_OPTIONS` first, then the command line, then `_JAVA_OPTIONS`; the
/// `java` launcher puts `JDK_JAVA_OPTIONS` before the command line's own options.
/// `read_file(name, max)` reads at most `max` bytes of an `@argfile` or `-XX:VMOptionsFile=`
/// as the JVM saw it (relative to its working directory); at most
/// [`OPTION_FILES_MAX_COUNT`] files and [`OPTION_FILES_MAX_BYTES`] bytes in all are asked
/// for, and the command line is judged only up to where that budget ran out. Options from a
/// `-XX:Flags=` file or `.hotspotrc` are not seen here (the attach then times out).
pub fn attach_blocker(
    cmdline: &[u8],
    environ: &[u8],
    read_file: &mut dyn FnMut(&str, usize) -> Option<Vec<u8>>,
) -> Option<AttachBlocker> {
    let env_value = |name: &str| {
        environ
            .split(|&b| b == 0)
            .filter_map(|entry| entry.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
            .next_back()
            .map(String::from_utf8_lossy)
            .unwrap_or_default()
    };
    let mut blockers = Blockers::default();
    for name in ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"] {
        for option in env_value(name).split_whitespace() {
            blockers.judge(option, name);
        }
    }
    let mut files = OptionFiles {
        read_file,
        bytes_left: OPTION_FILES_MAX_BYTES,
        files_left: OPTION_FILES_MAX_COUNT,
    };
    each_jvm_option(cmdline, &mut files, &mut |option| {
        blockers.judge(option, "command line")
    });
    for option in env_value("_JAVA_OPTIONS").split_whitespace() {
        blockers.judge(option, "_JAVA_OPTIONS");
    }
    blockers.disabled.or(blockers.reduced_signals)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tjava\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n\
        Ngid:\t0\nPid:\t4242\nPPid:\t1\nTracerPid:\t0\nUid:\t0\t1000\t1000\t1000\n\
        Gid:\t0\t100\t100\t100\nNStgid:\t4242\t1\nNSpid:\t4242\t1\n\
        SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\t2000000181005ccf\n";

    #[test]
    fn status_fields() {
        let status = ProcStatus::parse(STATUS).unwrap();
        assert_eq!(status.name, "java");
        assert_eq!(status.state, 'S');
        assert_eq!((status.tgid, status.ns_tgid), (4242, Some(1)));
        assert_eq!((status.euid, status.egid), (1000, 100));
        assert!(status.catches(libc::SIGQUIT));
        assert!(!status.catches(libc::SIGUSR1));
        assert!(!status.catches(0) && !status.catches(65));
        let old_kernel: String = STATUS
            .lines()
            .filter(|l| !l.starts_with("NS"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(ProcStatus::parse(&old_kernel).unwrap().ns_tgid, None);
        assert_eq!(ProcStatus::parse(&STATUS.replace("SigCgt", "X")), None);
        assert_eq!(ProcStatus::parse(""), None);
    }

    #[test]
    fn vm_from_maps() {
        let jvm =
            "7f00-7f10 r-xp 00000000 08:01 1234   /usr/lib/jvm/java-17/lib/server/libjvm.so\n";
        let deleted =
            "7f00-7f10 r-xp 00000000 08:01 1234 /opt/jdk/lib/server/libjvm.so (deleted)\n";
        let j9 = "7f00-7f10 r-xp 00000000 08:01 99 /opt/j9/lib/default/libj9vm29.so\n";
        let other = "7f00-7f10 r-xp 00000000 08:01 5 /usr/lib/libjvm.so.bak\n7f20-7f30 rw-p 00000000 00:00 0\n";
        assert_eq!(vm_of_maps(jvm), Vm::HotSpot);
        assert_eq!(vm_of_maps(deleted), Vm::HotSpot);
        assert_eq!(vm_of_maps(&format!("{jvm}{j9}")), Vm::OpenJ9);
        assert_eq!(vm_of_maps(other), Vm::NotJava);
        assert_eq!(vm_of_maps(""), Vm::NotJava);
        assert!(maps_file(jvm, 8, 1, 1234));
        assert!(!maps_file(jvm, 8, 2, 1234));
        assert!(!maps_file(jvm, 8, 1, 123));
        assert!(maps_file("7f-8f r-xp 0 fd:1a 77 /a.so\n", 0xfd, 0x1a, 77));
    }

    #[test]
    fn blockers_in_hotspot_order() {
        let cmd = |args: &[&str]| args.join("\0").into_bytes();
        let attach_blocker =
            |cmdline: &[u8], environ: &[u8]| attach_blocker(cmdline, environ, &mut |_, _| None);
        assert_eq!(attach_blocker(&cmd(&["java", "-jar", "a.jar"]), b""), None);
        let disabled = attach_blocker(&cmd(&["java", "-XX:+DisableAttachMechanism", "Main"]), b"");
        assert_eq!(
            disabled,
            Some(AttachBlocker {
                option: "-XX:+DisableAttachMechanism".into(),
                source: "command line".into()
            })
        );
        // The command line overrides JAVA_TOOL_OPTIONS; _JAVA_OPTIONS overrides both.
        let tool = b"PATH=/bin\0JAVA_TOOL_OPTIONS=-Xmx1g -XX:+DisableAttachMechanism\0";
        assert_eq!(
            attach_blocker(&cmd(&["java", "Main"]), tool).map(|b| b.source),
            Some("JAVA_TOOL_OPTIONS".into())
        );
        assert_eq!(
            attach_blocker(&cmd(&["java", "-XX:-DisableAttachMechanism", "Main"]), tool),
            None
        );
        let late = b"_JAVA_OPTIONS=-XX:+DisableAttachMechanism\0";
        assert_eq!(
            attach_blocker(&cmd(&["java", "-XX:-DisableAttachMechanism"]), late).map(|b| b.source),
            Some("_JAVA_OPTIONS".into())
        );
        assert_eq!(
            attach_blocker(&cmd(&["java", "-Xrs", "Main"]), b"").map(|b| b.option),
            Some("-Xrs".into())
        );
        // The program's arguments are not the JVM's options.
        for program in [
            &["java", "-cp", "-Xrs", "Main", "-Xrs"][..],
            &["java", "-jar", "-Xrs", "-XX:+DisableAttachMechanism"],
            &["java", "Main", "-XX:+DisableAttachMechanism"],
            &["-Xrs"],
        ] {
            assert_eq!(attach_blocker(&cmd(program), b""), None, "{program:?}");
        }
    }

    #[test]
    fn blockers_in_option_files() {
        let cmd = |args: &[&str]| args.join("\0").into_bytes();
        let files = |name: &str, _: usize| match name {
            "args.txt" => Some(b"-Xmx1g\n  -XX:+DisableAttachMechanism\n".to_vec()),
            "/etc/jvm.opts" => Some(b"-Xrs".to_vec()),
            "main.txt" => Some(b"Main -XX:+DisableAttachMechanism".to_vec()),
            "quoted.txt" => Some(b"# -Xrs\n'-XX:+Disable'\"AttachMechanism\"\n".to_vec()),
            _ => None,
        };
        let source = |args: &[&str]| {
            attach_blocker(&cmd(args), b"", &mut { files }).map(|b| (b.option, b.source))
        };
        assert_eq!(
            source(&["java", "@args.txt", "Main"]),
            Some(("-XX:+DisableAttachMechanism".into(), "command line".into()))
        );
        assert_eq!(
            source(&["java", "-XX:VMOptionsFile=/etc/jvm.opts", "Main"]),
            Some(("-Xrs".into(), "command line".into()))
        );
        // The main class in an argfile ends the JVM's options; `@@` is a literal argument;
        // an unreadable file adds nothing.
        assert_eq!(source(&["java", "@main.txt"]), None);
        assert_eq!(source(&["java", "@@args.txt", "Main"]), None);
        assert_eq!(source(&["java", "@missing.txt", "Main"]), None);
        // Comments and quotes as the launcher reads them; no expansion after the main class
        // nor after --disable-@files.
        assert_eq!(
            source(&["java", "@quoted.txt", "Main"]).map(|b| b.0),
            Some("-XX:+DisableAttachMechanism".into())
        );
        assert_eq!(source(&["java", "Main", "@args.txt"]), None);
        assert_eq!(
            source(&["java", "--disable-@files", "@args.txt", "Main"]),
            None
        );
    }

    #[test]
    fn option_files_are_read_within_one_budget() {
        let cmd = |args: &[String]| args.join("\0").into_bytes();
        let mut asked = Vec::new();
        let mut one_mib = |name: &str, max: usize| {
            asked.push((name.to_owned(), max));
            Some(b"-Xa ".repeat(OPTION_FILES_MAX_BYTES / 4))
        };
        // Thousands of big argfiles: the first fills the budget, the rest are never asked for,
        // and the options after them are not judged (they could be the program's).
        let mut args = vec!["java".to_owned()];
        args.extend(std::iter::repeat_n("@big".to_owned(), 3000));
        args.extend(["-Xrs".to_owned(), "Main".to_owned()]);
        assert_eq!(attach_blocker(&cmd(&args), b"", &mut one_mib), None);
        assert_eq!(asked, [("big".to_owned(), OPTION_FILES_MAX_BYTES + 1)]);
        // Small files: at most OPTION_FILES_MAX_COUNT are read, each asked for what is left.
        let mut count = 0;
        let mut small = |_: &str, max: usize| {
            count += 1;
            assert!(max <= OPTION_FILES_MAX_BYTES + 1);
            Some(b"-Xmx1g\n".to_vec())
        };
        args.truncate(1);
        args.extend(std::iter::repeat_n("@small".to_owned(), 100));
        args.extend(["-Xrs".to_owned(), "Main".to_owned()]);
        assert_eq!(attach_blocker(&cmd(&args), b"", &mut small), None);
        assert_eq!(count, OPTION_FILES_MAX_COUNT);
        // Within the budget the options after the files are judged.
        args.truncate(1);
        args.extend(["@small".to_owned(), "-Xrs".to_owned(), "Main".to_owned()]);
        let mut small = |_: &str, _: usize| Some(b"-Xmx1g\n".to_vec());
        assert_eq!(
            attach_blocker(&cmd(&args), b"", &mut small).map(|b| b.option),
            Some("-Xrs".into())
        );
    }

    #[test]
    fn argfile_tokens_follow_the_launcher() {
        let tokens = |bytes: &[u8]| -> Vec<String> {
            argfile_tokens(bytes)
                .iter()
                .map(|t| String::from_utf8_lossy(t).into_owned())
                .collect()
        };
        assert_eq!(tokens(b"  -a\t-b\n#c d\n-e"), ["-a", "-b", "-e"]);
        assert_eq!(tokens(b"'a b' \"c'd\" e#f"), ["a b", "c'd", "e"]);
        assert_eq!(tokens(b"\"x\\ty\" \"p\\\n  q\""), ["x\ty", "pq"]);
        assert_eq!(tokens(b""), Vec::<String>::new());
    }
}
