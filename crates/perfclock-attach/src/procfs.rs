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

/// Which VM the process runs, from `/proc/PID/maps`.
pub fn vm_of_maps(maps: &str) -> Vm {
    let mut jvm = false;
    for path in maps.lines().filter_map(mapped_path) {
        let file = path.rsplit('/').next().unwrap_or(path);
        if file.starts_with("libj9vm") && file.ends_with(".so") {
            return Vm::OpenJ9;
        }
        jvm |= file == "libjvm.so";
    }
    if jvm {
        Vm::HotSpot
    } else {
        Vm::NotJava
    }
}

/// Whether `/proc/PID/maps` maps the file with this device and inode (an agent loaded before).
pub fn maps_file(maps: &str, dev_major: u32, dev_minor: u32, inode: u64) -> bool {
    maps.lines().any(|line| {
        let mut fields = line.split_whitespace().skip(3);
        let (Some(dev), Some(ino)) = (fields.next(), fields.next()) else {
            return false;
        };
        let Some((major, minor)) = dev.split_once(':') else {
            return false;
        };
        u32::from_str_radix(major, 16) == Ok(dev_major)
            && u32::from_str_radix(minor, 16) == Ok(dev_minor)
            && ino.parse::<u64>() == Ok(inode)
    })
}

/// The `java` launcher's options that take the next argument as their value.
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
    "--source",
];

/// The JVM's options on a `java` command line: argv[1..] up to the main class, `-jar FILE`,
/// `-m MODULE` or `--module MODULE` (what follows is the program's), with `@argfile`s and
/// `-XX:VMOptionsFile=` files read by `read_file` (one level, split at white space; quoting is
/// not interpreted).
fn jvm_options(cmdline: &[u8], read_file: &dyn Fn(&str) -> Option<Vec<u8>>) -> Vec<String> {
    let words = |bytes: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(bytes)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let mut args: Vec<String> = Vec::new();
    for arg in cmdline.split(|&b| b == 0).skip(1) {
        let arg = String::from_utf8_lossy(arg);
        match arg.strip_prefix('@') {
            Some(file) if !file.starts_with('@') => args.extend(
                read_file(file)
                    .map(|bytes| words(&bytes))
                    .unwrap_or_default(),
            ),
            _ => args.push(arg.into_owned()),
        }
    }
    let mut options = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if !arg.starts_with('-') || matches!(arg.as_str(), "-jar" | "-m" | "--module") {
            break;
        }
        if OPTIONS_WITH_VALUE.contains(&arg.as_str()) {
            args.next();
        }
        if let Some(file) = arg.strip_prefix("-XX:VMOptionsFile=") {
            options.extend(
                read_file(file)
                    .map(|bytes| words(&bytes))
                    .unwrap_or_default(),
            );
        }
        options.push(arg);
    }
    options
}

/// A HotSpot option that prevents attaching, and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachBlocker {
    /// The option as written: `-XX:+DisableAttachMechanism` or `-Xrs`.
    pub option: String,
    /// Where: "command line" or the environment variable's name.
    pub source: String,
}

/// The JVM options in effect that disable attach, from `/proc/PID/cmdline` and
/// `/proc/PID/environ` (NUL-separated): the last `-XX:[+-]DisableAttachMechanism` wins, as in
/// HotSpot; `-Xrs` stops the JVM handling the SIGQUIT that starts the attach listener.
///
/// HotSpot reads `JAVA_TOOL_OPTIONS` first, then the command line, then `_JAVA_OPTIONS`; the
/// `java` launcher puts `JDK_JAVA_OPTIONS` before the command line's own options. `read_file`
/// reads an `@argfile` or `-XX:VMOptionsFile=` as the JVM saw it (relative to its working
/// directory). Options from a `-XX:Flags=` file or `.hotspotrc` are not seen here (the attach
/// then times out).
pub fn attach_blocker(
    cmdline: &[u8],
    environ: &[u8],
    read_file: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Option<AttachBlocker> {
    let env_options = |name: &str| -> Vec<(String, String)> {
        environ
            .split(|&b| b == 0)
            .filter_map(|entry| entry.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
            .next_back()
            .map(|value| {
                String::from_utf8_lossy(value)
                    .split_whitespace()
                    .map(|option| (option.to_owned(), name.to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let command_line = jvm_options(cmdline, read_file)
        .into_iter()
        .map(|arg| (arg, "command line".to_owned()));
    let mut in_order = env_options("JAVA_TOOL_OPTIONS");
    in_order.extend(env_options("JDK_JAVA_OPTIONS"));
    in_order.extend(command_line);
    in_order.extend(env_options("_JAVA_OPTIONS"));

    let mut disabled = None;
    let mut reduced_signals = None;
    for (option, source) in in_order {
        match option.as_str() {
            "-XX:+DisableAttachMechanism" => disabled = Some(AttachBlocker { option, source }),
            "-XX:-DisableAttachMechanism" => disabled = None,
            "-Xrs" => reduced_signals = Some(AttachBlocker { option, source }),
            _ => {}
        }
    }
    disabled.or(reduced_signals)
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
        let no_files = |_: &str| None;
        let attach_blocker =
            |cmdline: &[u8], environ: &[u8]| attach_blocker(cmdline, environ, &no_files);
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
        let files = |name: &str| match name {
            "args.txt" => Some(b"-Xmx1g\n  -XX:+DisableAttachMechanism\n".to_vec()),
            "/etc/jvm.opts" => Some(b"-Xrs".to_vec()),
            "main.txt" => Some(b"Main -XX:+DisableAttachMechanism".to_vec()),
            _ => None,
        };
        let source =
            |args: &[&str]| attach_blocker(&cmd(args), b"", &files).map(|b| (b.option, b.source));
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
    }
}
