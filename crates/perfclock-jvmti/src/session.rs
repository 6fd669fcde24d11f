//! One session of the agent: the files one load or attach asked for (jitdump, perf map, GC
//! markers), written from the JVM's callbacks until the next session or a stop request finishes
//! it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use perfclock_agent_codes::AgentFailure;
use perfclock_jitdump::{DebugEntry, JitClock, JitDump};
use perfclock_markers::{MarkerClock, Markers};

use crate::code::{self, LineAt, Region};
use crate::error::{chain, StartError};
use crate::jvmti::{Capabilities, Capability, Env, JmethodId};
use crate::names;
use crate::options::Options;
use crate::perfmap::PerfMap;
use crate::PREFIX;

/// How the session was asked for: at JVM start a file that cannot be written is left out
/// (unless `strict=1`); on attach it fails the request, which the attaching side reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    OnLoad,
    OnAttach,
}

/// GC pause markers: touched from the GC callbacks, which must not wait for the session lock.
#[derive(Debug)]
pub(crate) struct GcMarkers {
    pub markers: Markers,
    /// Perf-clock ns of the pause under way, 0 outside one.
    pub start_ns: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Session {
    options: Options,
    /// `lines=1` and the JVM granted the line-number capabilities.
    lines: bool,
    jitdump: Option<JitDump>,
    perfmap: Option<PerfMap>,
    gc: Option<Arc<GcMarkers>>,
    /// Records that could not be written; the first failure is printed.
    failures: AtomicU64,
}

impl Session {
    /// Takes the capabilities the options need and opens the session's files.
    ///
    /// # Errors
    /// The failure (its return code) and its message.
    pub(crate) fn open(env: Env, options: Options, origin: Origin) -> Result<Session, StartError> {
        let lines = options.lines && line_capabilities(env);
        if options.markers.is_some() {
            let gc = Capabilities::default().with(Capability::GenerateGarbageCollectionEvents);
            env.add_capabilities(&gc).map_err(|e| {
                StartError::new(
                    AgentFailure::Capabilities,
                    format!(
                        "markers=DIR needs GC events: AddCapabilities(can_generate_garbage_\
                         collection_events) failed: {}; drop markers=",
                        env.error_name(e)
                    ),
                )
            })?;
        }
        let clock_ok = open_clock(&options)?;
        let jitdump_clock = match options.jitdump_clock {
            Some(clock) => clock,
            None => clock_from_env::<JitClock>("PERFCLOCK_JITDUMP_CLOCK", "jitdump_clock")?,
        };
        let markers_clock = match options.markers_clock {
            Some(clock) => clock,
            None => clock_from_env::<MarkerClock>("PERFCLOCK_MARKERS_CLOCK", "markers_clock")?,
        };
        // At JVM start the profiled program must run whatever happens to our files.
        let lenient = origin == Origin::OnLoad && !options.strict;
        let jitdump = match &options.jitdump {
            Some(dir) if clock_ok => optional(lenient, AgentFailure::Jitdump, || {
                JitDump::create_with_clock(dir, jitdump_clock)
                    .map_err(|e| jitdump_unwritable(dir, &e))
            })?,
            _ => None,
        };
        let perfmap = if options.perfmap {
            optional(lenient, AgentFailure::PerfMap, || {
                PerfMap::create().map_err(|e| format!("{e} (perfmap=1)"))
            })?
        } else {
            None
        };
        let markers = match &options.markers {
            Some(dir) if clock_ok => optional(lenient, AgentFailure::Markers, || {
                Markers::open_with_clock(dir, markers_clock).map_err(|e| {
                    format!(
                        "cannot write markers in '{}': {}; pass markers=DIR with an existing \
                         writable directory",
                        dir.display(),
                        chain(&e)
                    )
                })
            })?,
            _ => None,
        };
        Ok(Session {
            options,
            lines,
            jitdump,
            perfmap,
            gc: markers.map(|markers| {
                Arc::new(GcMarkers {
                    markers,
                    start_ns: AtomicU64::new(0),
                })
            }),
            failures: AtomicU64::new(0),
        })
    }

    pub(crate) fn gc(&self) -> Option<&Arc<GcMarkers>> {
        self.gc.as_ref()
    }

    /// Whether [`Session::compiled_method_load`] reads the inlining scopes.
    pub(crate) fn wants_scopes(&self) -> bool {
        self.lines || self.options.inline
    }

    /// One line naming the session's files and settings.
    pub(crate) fn describe(&self) -> String {
        let mut parts = vec![match &self.jitdump {
            Some(dump) => format!(
                "jitdump {} (clock {})",
                dump.path().display(),
                dump.jit_clock()
            ),
            None => "no jitdump".to_owned(),
        }];
        if let Some(map) = &self.perfmap {
            parts.push(format!("perf map {}", map.path().display()));
        }
        if let Some(gc) = &self.gc {
            parts.push(format!(
                "GC markers {} (clock {})",
                gc.markers.path().display(),
                gc.markers.clock()
            ));
        }
        let o = &self.options;
        parts.push(format!(
            "lines={} inline={} names={} sig={}",
            u8::from(self.lines),
            u8::from(o.inline),
            match (o.names, o.dotted_class) {
                (crate::options::NameForm::Java, _) => "java",
                (crate::options::NameForm::Jvm, false) => "jvm",
                (crate::options::NameForm::Jvm, true) => "jvm,dottedclass=1",
            },
            u8::from(o.signature)
        ));
        parts.join(", ")
    }

    fn method_info(&self, env: Env, method: JmethodId) -> MethodInfo {
        let class = env.declaring_class(method).ok();
        let class_signature = class.and_then(|c| env.class_signature(c).ok());
        let o = &self.options;
        let symbol = match (env.method_name(method), &class_signature) {
            (Ok((name, sig)), Some(class_sig)) => {
                names::method_symbol(class_sig, &name, &sig, o.names, o.dotted_class, o.signature)
            }
            (Ok((mut name, sig)), None) => {
                if o.signature {
                    name.extend_from_slice(&sig);
                }
                name
            }
            (Err(_), _) => b"unknown_method".to_vec(),
        };
        let (source, lines) = if self.lines {
            let source = class
                .zip(class_signature.as_deref())
                .and_then(|(c, sig)| Some(names::source_path(sig, &env.source_file_name(c).ok()?)));
            // ABSENT_INFORMATION (compiled without -g:lines) and NATIVE_METHOD: no lines.
            let mut table = env.line_number_table(method).ok();
            if let Some(table) = &mut table {
                code::sort_line_table(table);
            }
            (source, table)
        } else {
            (None, None)
        };
        MethodInfo {
            symbol,
            source,
            lines,
        }
    }

    /// A compiled method: its load (with its lines), then a load per inlined stretch.
    /// `scopes` are its pc descriptors (empty unless [`Session::wants_scopes`]).
    pub(crate) fn compiled_method_load(
        &self,
        env: Env,
        method: JmethodId,
        code: &[u8],
        scopes: &[(u64, Vec<(JmethodId, i32)>)],
    ) {
        let addr = code.as_ptr() as u64;
        let end = addr + code.len() as u64;
        let mut methods: HashMap<JmethodId, MethodInfo> = HashMap::new();
        methods.insert(method, self.method_info(env, method));
        let regions: Vec<Region<'_, JmethodId>> = if self.wants_scopes() {
            code::regions(addr, end, scopes)
        } else {
            Vec::new()
        };
        let mut previous: &[(JmethodId, i32)] = &[];
        for region in &regions {
            // Neighbouring regions mostly share their stack: look its methods up once.
            if code::same_methods(region.frames, previous) {
                continue;
            }
            for &(m, _) in region.frames {
                methods.entry(m).or_insert_with(|| self.method_info(env, m));
            }
            previous = region.frames;
        }
        let lines = if self.lines {
            code::line_entries(addr, end, method, &regions, |m| {
                methods.get(&m)?.lines.as_deref()
            })
        } else {
            Vec::new()
        };
        let debug_entries = |lines: &[LineAt<JmethodId>]| -> Vec<DebugEntry<'_>> {
            lines
                .iter()
                .filter_map(|e| {
                    Some(DebugEntry {
                        addr: e.addr,
                        line: e.line,
                        discriminator: 0,
                        file: methods.get(&e.method)?.source.as_deref()?,
                    })
                })
                .collect()
        };
        self.load(&methods[&method].symbol, addr, code, &debug_entries(&lines));
        if !self.options.inline {
            return;
        }
        for range in code::inlined_ranges(&regions) {
            let labels: Vec<&[u8]> = range
                .stack
                .iter()
                .map(|m| methods[m].symbol.as_slice())
                .collect();
            let name = code::inlined_name(&labels);
            let sub = &code[(range.start - addr) as usize..(range.end - addr) as usize];
            let sub_entries = debug_entries(&code::entries_within(&lines, range.start, range.end));
            self.load_jitdump(&name, range.start, sub, &sub_entries);
        }
    }

    /// A whole method or stub: the jitdump and the perf map.
    pub(crate) fn load(&self, name: &[u8], addr: u64, code: &[u8], entries: &[DebugEntry<'_>]) {
        self.load_jitdump(name, addr, code, entries);
        if let Some(map) = &self.perfmap {
            if let Err(e) = map.add(addr, code.len() as u64, name) {
                self.failed(&format!(
                    "writing {} failed: {}",
                    map.path().display(),
                    chain(&e)
                ));
            }
        }
    }

    fn load_jitdump(&self, name: &[u8], addr: u64, code: &[u8], entries: &[DebugEntry<'_>]) {
        let Some(dump) = &self.jitdump else {
            return;
        };
        if let Err(e) = dump.code_load_with_debug_info(name, addr, code, entries) {
            self.failed(&format!(
                "writing the jitdump failed: {}; perf will not name code loaded from now on \
                 (check the jitdump=DIR directory's free space)",
                chain(&e)
            ));
        }
    }

    pub(crate) fn failed(&self, message: &str) {
        if self.failures.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!("{PREFIX}: {message}");
        }
    }

    /// Writes the jitdump's close record and last timeconv record and flushes the markers.
    pub(crate) fn finish(self) {
        if let Some(dump) = self.jitdump {
            if let Err(e) = dump.close() {
                eprintln!("{PREFIX}: closing the jitdump failed: {}", chain(&e));
            }
        }
        if let Some(gc) = &self.gc {
            if let Err(e) = gc.markers.flush() {
                eprintln!("{PREFIX}: writing the GC markers failed: {}", chain(&e));
            }
        }
        let failures = self.failures.load(Ordering::Relaxed);
        if failures > 0 {
            eprintln!("{PREFIX}: {failures} records could not be written");
        }
    }
}

/// What the agent needs of one method: its symbol, and for lines its source path and table.
#[derive(Debug)]
struct MethodInfo {
    symbol: Vec<u8>,
    source: Option<Vec<u8>>,
    lines: Option<Vec<(i64, i32)>>,
}

/// Asks for the line-number capabilities; without them the session has no lines (said once).
fn line_capabilities(env: Env) -> bool {
    let wanted = Capabilities::default()
        .with(Capability::GetLineNumbers)
        .with(Capability::GetSourceFileName);
    match env.add_capabilities(&wanted) {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "{PREFIX}: no source lines: AddCapabilities(can_get_line_numbers, \
                 can_get_source_file_name) failed: {}; pass lines=0 to silence this",
                env.error_name(e)
            );
            false
        }
    }
}

/// Opens the perf clock: `Ok(false)` when it cannot be opened and `allow_no_clock=1`.
fn open_clock(options: &Options) -> Result<bool, StartError> {
    match perfclock::init() {
        Ok(_) => Ok(true),
        Err(error) if options.allow_no_clock => {
            eprintln!(
                "{PREFIX}: no perf clock ({}): continuing without it (allow_no_clock=1): no \
                 jitdump, no markers",
                chain(&error)
            );
            Ok(false)
        }
        Err(error) => Err(StartError::new(AgentFailure::NoClock, no_clock(&error))),
    }
}

/// Why the agent cannot start without a clock, and the option that lets it.
fn no_clock(error: &perfclock::Error) -> String {
    format!(
        "perfclock cannot open the perf clock: {}; pass allow_no_clock=1 to start without it",
        chain(error)
    )
}

/// Why the jitdump cannot be written in `dir`, and the options that fix it.
fn jitdump_unwritable(dir: &std::path::Path, error: &perfclock_jitdump::JitDumpError) -> String {
    format!(
        "cannot write the jitdump in '{}': {}; pass jitdump=DIR with an existing writable \
         directory, or jitdump=off",
        dir.display(),
        chain(error)
    )
}

/// One of the session's files: its failure is returned, or with `lenient` printed once and the
/// file left out.
fn optional<T>(
    lenient: bool,
    failure: AgentFailure,
    open: impl FnOnce() -> Result<T, String>,
) -> Result<Option<T>, StartError> {
    match open() {
        Ok(file) => Ok(Some(file)),
        Err(message) if lenient => {
            eprintln!(
                "{PREFIX}: {message}; the JVM runs on without it (strict=1 makes this fail the \
                 start)"
            );
            Ok(None)
        }
        Err(message) => Err(StartError::new(failure, message)),
    }
}

/// The clock `var` names, the default clock when it is unset or empty (as the C ABI reads it); a
/// name that is no clock is an error (a silent default would put every timestamp in the wrong
/// clock).
fn clock_from_env<C>(var: &str, option: &str) -> Result<C, StartError>
where
    C: std::str::FromStr + Default,
    C::Err: std::fmt::Display,
{
    let error = |message: String| StartError::new(AgentFailure::ClockVariable, message);
    match perfclock_os::env::env_var_os(var).map(std::ffi::OsString::into_string) {
        None => Ok(C::default()),
        Some(Ok(name)) if name.is_empty() => Ok(C::default()),
        Some(Ok(name)) => name
            .parse()
            .map_err(|e| error(format!("{var}: {e}; or pass {option}= to the agent"))),
        Some(Err(_)) => Err(error(format!(
            "{var} is not UTF-8; unset it or pass {option}= to the agent"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock::{Error, ReadError, TimeConversion};
    use perfclock_jitdump::JitDumpError;

    /// The agent's lines name what failed, then each cause once, down to the root cause.
    #[test]
    fn the_agents_lines_keep_the_root_cause_once() {
        let zero_mult = TimeConversion::new(0, 0, 0).unwrap_err();
        let page = Error::Page(ReadError::InvalidParameters(zero_mult));
        let message = no_clock(&page);
        assert!(message.contains("perf page is unusable"), "{message}");
        assert_eq!(message.matches("time_mult is 0").count(), 1, "{message}");
        assert!(
            message.ends_with("allow_no_clock=1 to start without it"),
            "{message}"
        );

        let unwritable = JitDumpError::Io {
            op: "create",
            path: "/nowhere/jit-1.dump".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        };
        let message = jitdump_unwritable(std::path::Path::new("/nowhere"), &unwritable);
        assert_eq!(message.matches("Permission denied").count(), 1, "{message}");
        assert!(message.contains("jitdump=off"), "{message}");
    }
}
