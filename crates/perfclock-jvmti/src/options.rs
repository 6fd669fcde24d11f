//! The agent's option string: `key=value` pairs separated by commas (values cannot contain
//! commas), or the request `stop`. An unknown, repeated or valueless key is refused with a
//! message naming the fix.

use std::path::PathBuf;

use perfclock_agent_codes::options::{JITDUMP, STOP};
use perfclock_jitdump::JitClock;
use perfclock_markers::MarkerClock;

/// What one load or attach asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// Start a session with these options (ending the one running, if any).
    Start(Options),
    /// `stop`: end the running session.
    Stop,
}

impl Request {
    /// Parses an attach's or load's option string: `stop`, or the options of a session.
    ///
    /// # Errors
    /// As [`Options::parse`].
    pub(crate) fn parse(text: &str) -> Result<Request, String> {
        if text.trim() == STOP {
            return Ok(Request::Stop);
        }
        Options::parse(Some(text)).map(Request::Start)
    }
}

/// How a method is named in the dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameForm {
    /// `com.x.Foo.bar(int, java.lang.String)`: as a Java stack trace names the class and
    /// method, with the parameter types as Java source writes them.
    Java,
    /// `Lcom/x/Foo;bar(ILjava/lang/String;)J`: the JVM's own form, as perf's agent writes it.
    Jvm,
}

/// What the agent writes, and how it names code. Defaults are those of [`Options::default`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    /// `jitdump=DIR|off`: where `jit-<pid>.dump` goes (default `.`); `None` for `off`.
    pub jitdump: Option<PathBuf>,
    /// `perfmap=0|1`: also write `/tmp/perf-<pid>.map` (default 0).
    pub perfmap: bool,
    /// `markers=DIR`: write each GC pause to `DIR/marker-<pid>.txt` (default: none).
    pub markers: Option<PathBuf>,
    /// `lines=0|1`: a `JIT_CODE_DEBUG_INFO` record (source lines) before each load (default 1).
    pub lines: bool,
    /// `inline=0|1`: a load record of its own for each stretch of inlined code (default 1).
    pub inline: bool,
    /// `names=java|jvm`: the form of method names (default `java`).
    pub names: NameForm,
    /// `dottedclass=0|1`: with `names=jvm`, `com.x.Foo.bar` instead of `Lcom/x/Foo;bar`
    /// (default 0).
    pub dotted_class: bool,
    /// `sig=0|1`: the JVM signature after the method name, `(I)J` (default 1).
    pub signature: bool,
    /// `allow_no_clock=0|1`: start without the perf clock (no jitdump, no markers) (default 0).
    pub allow_no_clock: bool,
    /// `strict=0|1`: at JVM start, a file that cannot be written fails the load instead of
    /// being left out (default 0).
    pub strict: bool,
    /// `jitdump_clock=arch|perf|monotonic`: the dump's clock; `None` (not given): the one
    /// `PERFCLOCK_JITDUMP_CLOCK` names, else `arch`.
    pub jitdump_clock: Option<JitClock>,
    /// `markers_clock=perf|monotonic`: the marker file's clock; `None` (not given): the one
    /// `PERFCLOCK_MARKERS_CLOCK` names, else `perf`.
    pub markers_clock: Option<MarkerClock>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            jitdump: Some(PathBuf::from(".")),
            perfmap: false,
            markers: None,
            lines: true,
            inline: true,
            names: NameForm::Java,
            dotted_class: false,
            signature: true,
            allow_no_clock: false,
            strict: false,
            jitdump_clock: None,
            markers_clock: None,
        }
    }
}

/// The keys, as listed in the refusal of an unknown one.
pub(crate) const KNOWN: &str = "jitdump=DIR|off, perfmap=0|1, markers=DIR, lines=0|1, inline=0|1, \
                         names=java|jvm, dottedclass=0|1, sig=0|1, allow_no_clock=0|1, \
                         strict=0|1, jitdump_clock=arch|perf|monotonic, \
                         markers_clock=perf|monotonic (comma-separated), or stop";

const KEYS: [&str; 12] = [
    "names",
    "strict",
    JITDUMP,
    "perfmap",
    "markers",
    "lines",
    "inline",
    "dottedclass",
    "sig",
    "allow_no_clock",
    "jitdump_clock",
    "markers_clock",
];

impl Options {
    /// Parses the option string (`None` or empty: the defaults).
    ///
    /// # Errors
    /// A message for the JVM's stderr: unknown, repeated or valueless key, a flag other than
    /// 0 or 1, an empty path.
    pub(crate) fn parse(text: Option<&str>) -> Result<Options, String> {
        let mut options = Options::default();
        let mut seen = [false; KEYS.len()];
        for item in text
            .unwrap_or("")
            .split(',')
            .filter(|item| !item.is_empty())
        {
            let (key, value) = match item.split_once('=') {
                Some((key, value)) => (key, Some(value)),
                None => (item, None),
            };
            let Some(k) = KEYS.iter().position(|known| *known == key) else {
                return Err(format!("unknown option '{key}'; known: {KNOWN}"));
            };
            let Some(value) = value else {
                return Err(format!("option '{key}' needs a value: {key}=..."));
            };
            if std::mem::replace(&mut seen[k], true) {
                return Err(format!("option {key} given twice"));
            }
            match key {
                JITDUMP if value == "off" => options.jitdump = None,
                JITDUMP => options.jitdump = Some(path(key, value)?),
                "markers" => options.markers = Some(path(key, value)?),
                "perfmap" => options.perfmap = flag(key, value)?,
                "lines" => options.lines = flag(key, value)?,
                "inline" => options.inline = flag(key, value)?,
                "dottedclass" => options.dotted_class = flag(key, value)?,
                "sig" => options.signature = flag(key, value)?,
                "strict" => options.strict = flag(key, value)?,
                "names" => options.names = name_form(value)?,
                "jitdump_clock" => {
                    options.jitdump_clock = Some(value.parse().map_err(|e| format!("{e}"))?)
                }
                "markers_clock" => {
                    options.markers_clock = Some(value.parse().map_err(|e| format!("{e}"))?)
                }
                _ => options.allow_no_clock = flag(key, value)?,
            }
        }
        if options.dotted_class && options.names == NameForm::Java {
            return Err(
                "dottedclass=1 applies to names=jvm (names=java already writes com.x.Foo.bar)"
                    .to_owned(),
            );
        }
        Ok(options)
    }
}

fn name_form(value: &str) -> Result<NameForm, String> {
    match value {
        "java" => Ok(NameForm::Java),
        "jvm" => Ok(NameForm::Jvm),
        _ => Err(format!(
            "option names={value}: expected names=java or names=jvm"
        )),
    }
}

fn flag(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(format!("option {key}={value}: expected {key}=0 or {key}=1")),
    }
}

fn path(key: &str, value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        return Err(format!("option {key}= needs a path"));
    }
    Ok(PathBuf::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        assert_eq!(Options::parse(None).unwrap(), Options::default());
        assert_eq!(Options::parse(Some("")).unwrap(), Options::default());
        let d = Options::default();
        assert_eq!(d.jitdump, Some(PathBuf::from(".")));
        assert!(d.lines && d.inline && d.signature);
        assert!(!d.perfmap && !d.dotted_class && !d.allow_no_clock && d.markers.is_none());
        assert!(!d.strict);
        assert_eq!(d.names, NameForm::Java);
    }

    #[test]
    fn every_key() {
        let o = Options::parse(Some(
            "jitdump=off,perfmap=1,markers=/m,lines=0,inline=0,names=jvm,dottedclass=1,sig=0,\
             allow_no_clock=1,strict=1,jitdump_clock=monotonic,markers_clock=monotonic",
        ))
        .unwrap();
        assert_eq!(
            o,
            Options {
                jitdump: None,
                perfmap: true,
                markers: Some(PathBuf::from("/m")),
                lines: false,
                inline: false,
                names: NameForm::Jvm,
                dotted_class: true,
                signature: false,
                allow_no_clock: true,
                strict: true,
                jitdump_clock: Some(JitClock::Monotonic),
                markers_clock: Some(MarkerClock::Monotonic),
            }
        );
        let o = Options::parse(Some("jitdump=./off")).unwrap();
        assert_eq!(o.jitdump, Some(PathBuf::from("./off")));
    }

    #[test]
    fn refusals_name_the_fix() {
        let err = |s| Options::parse(Some(s)).unwrap_err();
        assert!(err("bogus=1").starts_with("unknown option 'bogus'; known: jitdump="));
        assert_eq!(
            err("perfmap"),
            "option 'perfmap' needs a value: perfmap=..."
        );
        assert_eq!(err("lines=0,lines=1"), "option lines given twice");
        assert_eq!(
            err("inline=yes"),
            "option inline=yes: expected inline=0 or inline=1"
        );
        assert_eq!(err("markers="), "option markers= needs a path");
        assert!(err("jitdump_clock=tsc").starts_with("unknown jitdump clock \"tsc\": use arch"));
        assert!(err("markers_clock=arch").contains("arch"));
        assert_eq!(
            err("names=dotted"),
            "option names=dotted: expected names=java or names=jvm"
        );
        assert!(err("dottedclass=1").starts_with("dottedclass=1 applies to names=jvm"));
    }

    #[test]
    fn requests() {
        assert_eq!(Request::parse("stop").unwrap(), Request::Stop);
        assert_eq!(
            Request::parse("").unwrap(),
            Request::Start(Options::default())
        );
        let Request::Start(o) = Request::parse("jitdump=/d,names=jvm").unwrap() else {
            panic!("not a start");
        };
        assert_eq!(o.jitdump, Some(PathBuf::from("/d")));
        assert_eq!(o.names, NameForm::Jvm);
        assert!(Request::parse("stop=1")
            .unwrap_err()
            .starts_with("unknown option 'stop'"));
    }
}
