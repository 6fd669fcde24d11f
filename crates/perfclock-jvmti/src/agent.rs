//! The agent's state across sessions, the requests that start and stop them, and the JVMTI
//! callbacks.
//!
//! # Safety
//! The unsafe code takes the JVM's pointers at their word, as the JVMTI specification defines
//! them: the option string is NUL-terminated (or null), the `JavaVM` is the running JVM's, a
//! callback's code address and size (checked non-null and positive) and its stub name are valid
//! for the callback's duration, and `compile_info` is the running `CompiledMethodLoad`'s. No
//! slice or string made from them outlives the callback.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use perfclock_agent_codes::AgentFailure;

use crate::error::{chain, StartError};
use crate::jvmti::{
    self, AddrLocationMap, Capabilities, Capability, Env, Event, EventCallbacks, JavaVmPtr, Jint,
    JmethodId, JniEnv, Jobject, JvmtiEnvPtr, JNI_OK,
};
use crate::options::{Options, Request};
use crate::session::{GcMarkers, Origin, Session};
use crate::PREFIX;

/// The agent, once the JVM gave it an environment; callbacks find it here.
static AGENT: OnceLock<Agent> = OnceLock::new();
/// Serialises requests: a load, attaches from several tools at once.
static REQUESTS: Mutex<()> = Mutex::new(());

/// The events a session receives, enabled while one runs.
const CODE_EVENTS: [Event; 2] = [Event::CompiledMethodLoad, Event::DynamicCodeGenerated];
const GC_EVENTS: [Event; 2] = [
    Event::GarbageCollectionStart,
    Event::GarbageCollectionFinish,
];

#[derive(Debug)]
struct Agent {
    env: Env,
    /// The running session. Callbacks hold the read side while they write, so a session
    /// replaced or stopped under the write side has no write in flight once it is taken out.
    session: RwLock<Option<Session>>,
    /// The running session's GC markers, apart: the GC callbacks run in the pause, where a
    /// compiler thread holding the session's read side may be stopped at a safepoint.
    gc: Mutex<Option<Arc<GcMarkers>>>,
}

/// `Agent_OnLoad` and `Agent_OnAttach`: the code of [`AgentFailure`] or `JNI_OK`.
///
/// # Safety
/// `vm` and `options` are the arguments the JVM passed.
pub(crate) unsafe fn start(vm: JavaVmPtr, options: *const c_char, origin: Origin) -> Jint {
    let text = if options.is_null() {
        String::new()
    } else {
        // SAFETY: the JVM passes a NUL-terminated option string (or null).
        unsafe { CStr::from_ptr(options) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: `vm` is the JVM's (caller's contract).
    let result = catch_unwind(AssertUnwindSafe(|| unsafe { serve(vm, &text, origin) }));
    match result {
        Ok(Ok(())) => JNI_OK,
        Ok(Err(error)) => {
            eprintln!("{PREFIX}: {}", error.message);
            error.failure.code()
        }
        Err(_) => {
            eprintln!("{PREFIX}: internal error (see the panic above)");
            AgentFailure::Internal.code()
        }
    }
}

/// One request: its options parsed, the agent set up on the first, then the session started
/// or stopped.
///
/// # Safety
/// As [`start`].
unsafe fn serve(vm: JavaVmPtr, text: &str, origin: Origin) -> Result<(), StartError> {
    let request = Request::parse(text).map_err(|m| StartError::new(AgentFailure::Options, m))?;
    let _serial = REQUESTS.lock().unwrap_or_else(PoisonError::into_inner);
    // SAFETY: the caller's contract.
    let agent = unsafe { agent(vm) }?;
    match request {
        Request::Stop => {
            agent.stop();
            Ok(())
        }
        Request::Start(options) => agent.start_session(options, origin),
    }
}

/// The agent, set up by the first request: a JVMTI environment with the compiled-method
/// capability and the callbacks installed (no event enabled yet: a failed first request leaves
/// the JVM nothing to call into if it unloads the library).
///
/// # Safety
/// As [`start`].
unsafe fn agent(vm: JavaVmPtr) -> Result<&'static Agent, StartError> {
    if let Some(agent) = AGENT.get() {
        return Ok(agent);
    }
    // SAFETY: the JVM's JavaVM (caller's contract).
    let env = unsafe { Env::get(vm) }.map_err(|status| {
        StartError::new(
            AgentFailure::NoJvmti,
            format!("no JVMTI 1.2 environment (GetEnv returned {status})"),
        )
    })?;
    let required = Capabilities::default().with(Capability::GenerateCompiledMethodLoadEvents);
    env.add_capabilities(&required).map_err(|e| {
        StartError::new(
            AgentFailure::Capabilities,
            format!(
                "AddCapabilities(can_generate_compiled_method_load_events) failed: {}",
                env.error_name(e)
            ),
        )
    })?;
    let mut callbacks = EventCallbacks::default();
    callbacks.vm_init = Some(on_vm_init);
    callbacks.vm_death = Some(on_vm_death);
    callbacks.compiled_method_load = Some(on_compiled_method_load);
    callbacks.dynamic_code_generated = Some(on_dynamic_code_generated);
    callbacks.garbage_collection_start = Some(on_gc_start);
    callbacks.garbage_collection_finish = Some(on_gc_finish);
    env.set_event_callbacks(&callbacks)
        .map_err(|e| events_failed(env, "SetEventCallbacks", e))?;
    Ok(AGENT.get_or_init(|| Agent {
        env,
        session: RwLock::new(None),
        gc: Mutex::new(None),
    }))
}

fn events_failed(env: Env, what: &str, e: jvmti::JvmtiError) -> StartError {
    StartError::new(
        AgentFailure::Events,
        format!("{what} failed: {}", env.error_name(e)),
    )
}

impl Agent {
    /// Opens the new session's files, enables its events, puts it in place of the running
    /// one (finished then) and, on attach, asks the JVM to replay the code it compiled. If the
    /// new session cannot start, the running one goes on.
    fn start_session(&self, options: Options, origin: Origin) -> Result<(), StartError> {
        let session = Session::open(self.env, options, origin)?;
        let mut events = vec![Event::VmDeath];
        events.extend(CODE_EVENTS);
        if origin == Origin::OnLoad {
            events.push(Event::VmInit);
        }
        if session.gc().is_some() {
            events.extend(GC_EVENTS);
        }
        for event in events {
            self.env.enable(event).map_err(|e| {
                events_failed(self.env, &format!("SetEventNotificationMode({event:?})"), e)
            })?;
        }
        let status = session.describe();
        let gc = session.gc().cloned();
        let previous = self.replace(Some(session), gc);
        if let Some(previous) = previous {
            eprintln!(
                "{PREFIX}: finishing the previous session: {}",
                previous.describe()
            );
            previous.finish();
        }
        if origin == Origin::OnAttach {
            // Outside the lock: the JVM posts the replayed events on this thread.
            replay(self.env);
            eprintln!("{PREFIX}: attached: {status}");
        }
        Ok(())
    }

    /// Ends the running session: the JVM stops posting code events, the files are finished.
    fn stop(&self) {
        for event in CODE_EVENTS.into_iter().chain(GC_EVENTS) {
            // Best effort: with the session gone a posted event is ignored at once.
            let _ = self.env.disable(event);
        }
        match self.replace(None, None) {
            Some(session) => {
                eprintln!("{PREFIX}: stopped: {}", session.describe());
                session.finish();
            }
            None => eprintln!("{PREFIX}: stop: no session running, nothing to stop"),
        }
    }

    /// Swaps the running session (and its GC markers) for `session`, once no callback writes.
    fn replace(&self, session: Option<Session>, gc: Option<Arc<GcMarkers>>) -> Option<Session> {
        *self.gc.lock().unwrap_or_else(PoisonError::into_inner) = gc;
        let mut slot = self.session.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *slot, session)
    }

    /// Runs `body` with the running session, if any.
    fn with_session(&self, body: impl FnOnce(&Session)) {
        let slot = self.session.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(session) = slot.as_ref() {
            body(session);
        }
    }
}

pub(crate) fn unload() {
    if let Some(agent) = AGENT.get() {
        if let Some(session) = agent.replace(None, None) {
            session.finish();
        }
    }
}

/// Asks the JVM to post the code it generated before the events were enabled (the
/// interpreter, stubs, and on attach every compiled method): already-hot code gets named.
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

unsafe extern "C" fn on_vm_init(env: JvmtiEnvPtr, _jni: *mut JniEnv, _thread: Jobject) {
    guard("VMInit", |_| replay(Env::from_callback(env)));
}

unsafe extern "C" fn on_vm_death(_env: JvmtiEnvPtr, _jni: *mut JniEnv) {
    guard("VMDeath", |_| unload());
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
        agent.with_session(|session| {
            let scopes: Vec<_> = if session.wants_scopes() {
                // SAFETY: the compile_info of the CompiledMethodLoad callback running now.
                let scopes = unsafe { jvmti::inline_scopes(compile_info) };
                scopes.into_iter().map(|s| (s.pc, s.frames)).collect()
            } else {
                Vec::new()
            };
            session.compiled_method_load(agent.env, method, code, &scopes);
        });
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
        agent.with_session(|session| session.load(name, address as u64, code, &[]));
    });
}

/// The running session's GC markers, cloned out under a lock only ever held for a swap.
fn gc_markers(agent: &Agent) -> Option<Arc<GcMarkers>> {
    agent
        .gc
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// GC callbacks run in the pause, where JVMTI forbids JNI and most JVMTI calls: only the
/// clock and the marker writer's own (Rust) buffer are touched.
unsafe extern "C" fn on_gc_start(_env: JvmtiEnvPtr) {
    guard("GarbageCollectionStart", |agent| {
        if let Some(gc) = gc_markers(agent) {
            gc.start_ns.store(perfclock::now_ns(), Ordering::Relaxed);
        }
    });
}

unsafe extern "C" fn on_gc_finish(_env: JvmtiEnvPtr) {
    guard("GarbageCollectionFinish", |agent| {
        let Some(gc) = gc_markers(agent) else {
            return;
        };
        let start = gc.start_ns.swap(0, Ordering::Relaxed);
        if start == 0 {
            return; // started during a pause: its start was not seen
        }
        if let Err(e) = gc.markers.span("GC pause", start, perfclock::now_ns()) {
            eprintln!("{PREFIX}: writing a GC marker failed: {}", chain(&e));
        }
    });
}
