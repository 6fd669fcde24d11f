//! The agent's state and its JVMTI callbacks.
//!
//! # Safety
//! The unsafe code takes the JVM's pointers at their word, as the JVMTI specification defines
//! them: the option string is NUL-terminated (or null), the `JavaVM` is the running JVM's, a
//! callback's code address and size (checked non-null and positive) and its stub name are valid
//! for the callback's duration, and `compile_info` is the running `CompiledMethodLoad`'s. No
//! slice or string made from them outlives the callback.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{OnceLock, PoisonError, RwLock};

use perfclock_jitdump::{DebugEntry, JitClock, JitDump};
use perfclock_markers::{MarkerClock, Markers};

use crate::code::{self, LineAt, Region};
use crate::jvmti::{
    self, AddrLocationMap, Capabilities, Capability, Env, Event, EventCallbacks, JavaVmPtr, Jint,
    JmethodId, JniEnv, Jobject, JvmtiEnvPtr, JvmtiError, JNI_ERR, JNI_OK,
};
use crate::names;
use crate::options::Options;
use crate::perfmap::PerfMap;

const PREFIX: &str = "perfclock_agent";

/// Set by the first load or attach that got past its checks: later ones say so and do nothing.
static LOADED: AtomicBool = AtomicBool::new(false);
/// The agent, once started; callbacks find it here.
static AGENT: OnceLock<Agent> = OnceLock::new();

/// How the JVM started the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// `-agentpath` at JVM start: code is replayed at VMInit.
    OnLoad,
    /// Dynamic attach (`jcmd PID JVMTI.agent_load`, `perfclock attach`): replayed at once.
    OnAttach,
}

#[derive(Debug)]
struct Agent {
    env: Env,
    options: Options,
    /// `lines=1` and the JVM granted the line-number capabilities.
    lines: bool,
    /// Taken (and closed) at VM death; loads hold the read side.
    jitdump: RwLock<Option<JitDump>>,
    perfmap: Option<PerfMap>,
    markers: Option<Markers>,
    /// Perf-clock ns of the GC pause under way, 0 outside one.
    gc_start_ns: AtomicU64,
    /// Records that could not be written; the first failure is printed.
    failures: AtomicU64,
}

/// `Agent_OnLoad` and `Agent_OnAttach`.
///
/// # Safety
/// `vm` and `options` are the arguments the JVM passed.
pub(crate) unsafe fn start(vm: JavaVmPtr, options: *const c_char, how: Start) -> Jint {
    let text = if options.is_null() {
        String::new()
    } else {
        // SAFETY: the JVM passes a NUL-terminated option string (or null).
        unsafe { CStr::from_ptr(options) }
            .to_string_lossy()
            .into_owned()
    };
    if LOADED.swap(true, Ordering::AcqRel) {
        eprintln!(
            "{PREFIX}: already loaded in this JVM (pid {}); this {} changes nothing (options \
             '{text}' ignored)",
            std::process::id(),
            match how {
                Start::OnLoad => "second -agentpath",
                Start::OnAttach => "attach",
            }
        );
        return JNI_OK;
    }
    // SAFETY: `vm` is the JVM's (caller's contract).
    let result = catch_unwind(AssertUnwindSafe(|| unsafe { initialise(vm, &text, how) }));
    match result {
        Ok(Ok(())) => JNI_OK,
        Ok(Err(message)) => {
            eprintln!("{PREFIX}: {message}");
            // Nothing was enabled: a corrected load may try again.
            if AGENT.get().is_none() {
                LOADED.store(false, Ordering::Release);
            }
            JNI_ERR
        }
        Err(_) => {
            eprintln!("{PREFIX}: internal error while starting (see the panic above)");
            JNI_ERR
        }
    }
}

/// # Safety
/// As [`start`].
unsafe fn initialise(vm: JavaVmPtr, text: &str, how: Start) -> Result<(), String> {
    let options = Options::parse(Some(text))?;
    // SAFETY: the JVM's JavaVM (caller's contract).
    let env = unsafe { Env::get(vm) }
        .map_err(|status| format!("no JVMTI 1.2 environment (GetEnv returned {status})"))?;
    let required = Capabilities::default().with(Capability::GenerateCompiledMethodLoadEvents);
    env.add_capabilities(&required).map_err(|e| {
        format!(
            "AddCapabilities(can_generate_compiled_method_load_events) failed: {}",
            env.error_name(e)
        )
    })?;
    let mut lines = options.lines;
    if lines {
        let wanted = Capabilities::default()
            .with(Capability::GetLineNumbers)
            .with(Capability::GetSourceFileName);
        if let Err(e) = env.add_capabilities(&wanted) {
            eprintln!(
                "{PREFIX}: no source lines: AddCapabilities(can_get_line_numbers, \
                 can_get_source_file_name) failed: {}; pass lines=0 to silence this",
                env.error_name(e)
            );
            lines = false;
        }
    }
    if options.markers.is_some() {
        let gc = Capabilities::default().with(Capability::GenerateGarbageCollectionEvents);
        env.add_capabilities(&gc).map_err(|e| {
            format!(
                "markers=DIR needs GC events: AddCapabilities(can_generate_garbage_collection_\
                 events) failed: {}; drop markers=",
                env.error_name(e)
            )
        })?;
    }

    let clock_ok = match perfclock::init() {
        Ok(_) => true,
        Err(error) if options.allow_no_clock => {
            eprintln!(
                "{PREFIX}: no perf clock ({error}): continuing without it (allow_no_clock=1): no \
                 jitdump, no markers"
            );
            false
        }
        Err(error) => {
            return Err(format!(
                "perfclock cannot open the perf clock: {error}; pass allow_no_clock=1 to start \
                 without it"
            ))
        }
    };
    let jitdump_clock = match options.jitdump_clock {
        Some(clock) => clock,
        None => clock_from_env::<JitClock>("PERFCLOCK_JITDUMP_CLOCK", "jitdump_clock")?,
    };
    let markers_clock = match options.markers_clock {
        Some(clock) => clock,
        None => clock_from_env::<MarkerClock>("PERFCLOCK_MARKERS_CLOCK", "markers_clock")?,
    };
    let jitdump = match &options.jitdump {
        Some(dir) if clock_ok => {
            Some(JitDump::create_with_clock(dir, jitdump_clock).map_err(|e| {
                format!(
                    "cannot write the jitdump in '{}': {e}; pass jitdump=DIR with an existing \
                 writable directory, or jitdump=off",
                    dir.display()
                )
            })?)
        }
        _ => None,
    };
    let perfmap = if options.perfmap {
        Some(PerfMap::create().map_err(|e| format!("{e} (perfmap=1)"))?)
    } else {
        None
    };
    let markers = match &options.markers {
        Some(dir) if clock_ok => {
            Some(Markers::open_with_clock(dir, markers_clock).map_err(|e| {
                format!(
                "cannot write markers in '{}': {e}; pass markers=DIR with an existing writable \
                 directory",
                dir.display()
            )
            })?)
        }
        _ => None,
    };
    let status = describe(
        &options,
        lines,
        jitdump.as_ref(),
        perfmap.as_ref(),
        markers.as_ref(),
    );
    let gc = markers.is_some();
    let agent = Agent {
        env,
        options,
        lines,
        jitdump: RwLock::new(jitdump),
        perfmap,
        markers,
        gc_start_ns: AtomicU64::new(0),
        failures: AtomicU64::new(0),
    };
    AGENT
        .set(agent)
        .map_err(|_| "an earlier load failed half-way in this JVM; restart the JVM".to_owned())?;

    let mut callbacks = EventCallbacks::default();
    callbacks.vm_init = Some(on_vm_init);
    callbacks.vm_death = Some(on_vm_death);
    callbacks.compiled_method_load = Some(on_compiled_method_load);
    callbacks.dynamic_code_generated = Some(on_dynamic_code_generated);
    if gc {
        callbacks.garbage_collection_start = Some(on_gc_start);
        callbacks.garbage_collection_finish = Some(on_gc_finish);
    }
    let failed = |what: &str, e: JvmtiError| format!("{what} failed: {}", env.error_name(e));
    env.set_event_callbacks(&callbacks)
        .map_err(|e| failed("SetEventCallbacks", e))?;
    let mut events = vec![
        Event::VmDeath,
        Event::CompiledMethodLoad,
        Event::DynamicCodeGenerated,
    ];
    if how == Start::OnLoad {
        events.push(Event::VmInit);
    }
    if gc {
        events.extend([
            Event::GarbageCollectionStart,
            Event::GarbageCollectionFinish,
        ]);
    }
    for event in events {
        env.enable(event)
            .map_err(|e| failed(&format!("SetEventNotificationMode({event:?})"), e))?;
    }
    if how == Start::OnAttach {
        replay(env);
        eprintln!("{PREFIX}: attached: {status}");
    }
    Ok(())
}

fn describe(
    options: &Options,
    lines: bool,
    jitdump: Option<&JitDump>,
    perfmap: Option<&PerfMap>,
    markers: Option<&Markers>,
) -> String {
    let mut parts = vec![match jitdump {
        Some(dump) => format!(
            "jitdump {} (clock {})",
            dump.path().display(),
            dump.jit_clock()
        ),
        None => "no jitdump".to_owned(),
    }];
    if let Some(map) = perfmap {
        parts.push(format!("perf map {}", map.path().display()));
    }
    if let Some(markers) = markers {
        parts.push(format!(
            "GC markers {} (clock {})",
            markers.path().display(),
            markers.clock()
        ));
    }
    parts.push(format!(
        "lines={} inline={} dottedclass={} sig={}",
        u8::from(lines),
        u8::from(options.inline),
        u8::from(options.dotted_class),
        u8::from(options.signature)
    ));
    parts.join(", ")
}

/// Asks the JVM to post the code it generated before the callbacks were enabled (the
/// interpreter, stubs, and on attach every compiled method): already-hot code gets named.
/// Loads written before are written again (same code, later stamp: harmless).
fn replay(env: Env) {
    for event in [Event::DynamicCodeGenerated, Event::CompiledMethodLoad] {
        if let Err(e) = env.generate_events(event) {
            eprintln!(
                "{PREFIX}: GenerateEvents({event:?}) failed: {}; code generated before the agent \
                 started is missing from the jitdump",
                env.error_name(e)
            );
        }
    }
}

/// Runs a callback body; a panic is reported, never unwound into the JVM.
fn guard(what: &str, body: impl FnOnce(&Agent)) {
    let Some(agent) = AGENT.get() else {
        return;
    };
    if catch_unwind(AssertUnwindSafe(|| body(agent))).is_err() {
        eprintln!("{PREFIX}: internal error in {what} (see the panic above); event dropped");
    }
}

/// What the agent needs of one method: its symbol, and for lines its source path and table.
#[derive(Debug)]
struct MethodInfo {
    symbol: Vec<u8>,
    source: Option<Vec<u8>>,
    lines: Option<Vec<(i64, i32)>>,
}

impl Agent {
    fn method_info(&self, method: JmethodId) -> MethodInfo {
        let env = self.env;
        let class = env.declaring_class(method).ok();
        let class_signature = class.and_then(|c| env.class_signature(c).ok());
        let symbol = match (env.method_name(method), &class_signature) {
            (Ok((name, sig)), Some(class_sig)) => names::method_symbol(
                class_sig,
                &name,
                &sig,
                self.options.dotted_class,
                self.options.signature,
            ),
            (Ok((name, sig)), None) => {
                let mut symbol = name;
                if self.options.signature {
                    symbol.extend_from_slice(&sig);
                }
                symbol
            }
            (Err(_), _) => b"unknown_method".to_vec(),
        };
        let (source, lines) = if self.lines {
            let source = class
                .zip(class_signature.as_deref())
                .and_then(|(c, sig)| Some(names::source_path(sig, &env.source_file_name(c).ok()?)));
            // ABSENT_INFORMATION (compiled without -g:lines) and NATIVE_METHOD: no lines.
            (source, env.line_number_table(method).ok())
        } else {
            (None, None)
        };
        MethodInfo {
            symbol,
            source,
            lines,
        }
    }

    fn compiled_method_load(&self, method: JmethodId, code: &[u8], compile_info: *const c_void) {
        let addr = code.as_ptr() as u64;
        let end = addr + code.len() as u64;
        let mut methods: HashMap<JmethodId, MethodInfo> = HashMap::new();
        methods.insert(method, self.method_info(method));
        let regions: Vec<Region<JmethodId>> = if self.lines || self.options.inline {
            // SAFETY: the compile_info of the CompiledMethodLoad callback running now.
            let scopes = unsafe { jvmti::inline_scopes(compile_info) };
            let scopes: Vec<_> = scopes.into_iter().map(|s| (s.pc, s.frames)).collect();
            code::regions(addr, end, &scopes)
        } else {
            Vec::new()
        };
        for region in &regions {
            for &m in &region.stack {
                methods.entry(m).or_insert_with(|| self.method_info(m));
            }
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
        let entries = debug_entries(&lines);
        let symbol = &methods[&method].symbol;
        self.load(symbol, addr, code, &entries);
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
    fn load(&self, name: &[u8], addr: u64, code: &[u8], entries: &[DebugEntry<'_>]) {
        self.load_jitdump(name, addr, code, entries);
        if let Some(map) = &self.perfmap {
            if let Err(e) = map.add(addr, code.len() as u64, name) {
                self.failed(&format!("writing {} failed: {e}", map.path().display()));
            }
        }
    }

    fn load_jitdump(&self, name: &[u8], addr: u64, code: &[u8], entries: &[DebugEntry<'_>]) {
        let jitdump = self.jitdump.read().unwrap_or_else(PoisonError::into_inner);
        let Some(dump) = jitdump.as_ref() else {
            return;
        };
        if let Err(e) = dump.code_load_with_debug_info(name, addr, code, entries) {
            self.failed(&format!(
                "writing the jitdump failed: {e}; perf will not name code loaded from now on \
                 (check the jitdump=DIR directory's free space)"
            ));
        }
    }

    fn failed(&self, message: &str) {
        if self.failures.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!("{PREFIX}: {message}");
        }
    }

    /// Closes the jitdump (its close record and last timeconv record) and flushes the markers.
    /// Idempotent: VMDeath and Agent_OnUnload both call it.
    fn finish(&self) {
        let dump = self
            .jitdump
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(dump) = dump {
            if let Err(e) = dump.close() {
                eprintln!("{PREFIX}: closing the jitdump failed: {e}");
            }
        }
        if let Some(markers) = &self.markers {
            if let Err(e) = markers.flush() {
                eprintln!("{PREFIX}: writing the GC markers failed: {e}");
            }
        }
        let failures = self.failures.swap(0, Ordering::Relaxed);
        if failures > 0 {
            eprintln!("{PREFIX}: {failures} records could not be written");
        }
    }
}

pub(crate) fn unload() {
    if let Some(agent) = AGENT.get() {
        agent.finish();
    }
}

unsafe extern "C" fn on_vm_init(env: JvmtiEnvPtr, _jni: *mut JniEnv, _thread: Jobject) {
    guard("VMInit", |_| replay(Env::from_callback(env)));
}

unsafe extern "C" fn on_vm_death(_env: JvmtiEnvPtr, _jni: *mut JniEnv) {
    guard("VMDeath", Agent::finish);
}

unsafe extern "C" fn on_compiled_method_load(
    _env: JvmtiEnvPtr,
    method: JmethodId,
    code_size: Jint,
    code_addr: *const c_void,
    _map_length: Jint,
    _map: *const AddrLocationMap,
    compile_info: *const c_void,
) {
    if code_addr.is_null() || code_size <= 0 {
        return;
    }
    // SAFETY: the JVM passes the compiled code's address and size, valid during the callback.
    let code = unsafe { std::slice::from_raw_parts(code_addr.cast::<u8>(), code_size as usize) };
    guard("CompiledMethodLoad", |agent| {
        agent.compiled_method_load(method, code, compile_info)
    });
}

unsafe extern "C" fn on_dynamic_code_generated(
    _env: JvmtiEnvPtr,
    name: *const c_char,
    address: *const c_void,
    length: Jint,
) {
    if address.is_null() || length <= 0 {
        return;
    }
    let name = if name.is_null() {
        &b"unknown_stub"[..]
    } else {
        // SAFETY: the JVM passes a NUL-terminated name.
        unsafe { CStr::from_ptr(name) }.to_bytes()
    };
    // SAFETY: the JVM passes the generated code's address and length, valid during the callback.
    let code = unsafe { std::slice::from_raw_parts(address.cast::<u8>(), length as usize) };
    guard("DynamicCodeGenerated", |agent| {
        agent.load(name, address as u64, code, &[])
    });
}

/// GC callbacks run in the pause, where JVMTI forbids JNI and most JVMTI calls: only the
/// clock and the marker writer's own (Rust) buffer are touched.
unsafe extern "C" fn on_gc_start(_env: JvmtiEnvPtr) {
    guard("GarbageCollectionStart", |agent| {
        agent
            .gc_start_ns
            .store(perfclock::now_ns(), Ordering::Relaxed);
    });
}

unsafe extern "C" fn on_gc_finish(_env: JvmtiEnvPtr) {
    guard("GarbageCollectionFinish", |agent| {
        let start = agent.gc_start_ns.swap(0, Ordering::Relaxed);
        let Some(markers) = &agent.markers else {
            return;
        };
        if start == 0 {
            return; // attached during a pause: its start was not seen
        }
        if let Err(e) = markers.span("GC pause", start, perfclock::now_ns()) {
            agent.failed(&format!("writing a GC marker failed: {e}"));
        }
    });
}

/// The clock `var` names, the default clock when it is unset or empty (as the C ABI reads it); a
/// name that is no clock is an error (a silent default would put every timestamp in the wrong
/// clock).
fn clock_from_env<C>(var: &str, option: &str) -> Result<C, String>
where
    C: std::str::FromStr + Default,
    C::Err: std::fmt::Display,
{
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(C::default()),
        Ok(name) if name.is_empty() => Ok(C::default()),
        Ok(name) => name
            .parse()
            .map_err(|e| format!("{var}: {e}; or pass {option}= to the agent")),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "{var} is not UTF-8; unset it or pass {option}= to the agent"
        )),
    }
}
