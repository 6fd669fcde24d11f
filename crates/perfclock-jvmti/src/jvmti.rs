//! The part of the JNI invocation API and of JVMTI the agent uses, declared from the JVMTI
//! specification (the layout is fixed by it: the function table's slot numbers, the event
//! numbers, the capability bit order), so the agent builds without a JDK's `jni.h`/`jvmti.h`.
//! `JNICALL` is the C calling convention on Linux.
//!
//! Slot numbers below are the specification's "function index" (1-based: slot 1 is reserved);
//! the table struct places each pointer at index `slot - 1` and asserts it at compile time.
//! The inline records passed with `CompiledMethodLoad` are those of HotSpot's `jvmticmlr.h`.
//!
//! [`Env`] wraps the calls; the unsafe code of the agent lives here.
//!
//! # Safety
//! The declarations follow the specification's layout (slots asserted at compile time), so a
//! call through the JVM's function table calls the function the specification names with the
//! arguments it expects. An [`Env`] holds a `jvmtiEnv *` the JVM handed out, valid for the
//! JVM's life; memory JVMTI allocates for a result is read within its documented bounds and
//! returned with `Deallocate`.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_uchar, c_void, CStr};
use std::mem::{offset_of, size_of};
use std::ptr;

pub(crate) type Jint = i32;
pub(crate) type Jlong = i64;
/// A bytecode index in JVMTI's `JVMTI_JLOCATION_JVMBCI` format (HotSpot's).
pub(crate) type Jlocation = Jlong;
/// `jmethodID`: an opaque handle, stable for the method's class's lifetime.
pub(crate) type JmethodId = *mut c_void;
/// `jclass`/`jthread`/`jobject`: JNI references.
pub(crate) type Jobject = *mut c_void;
/// `JNIEnv *`, never dereferenced here.
pub(crate) type JniEnv = c_void;

pub(crate) const JNI_OK: Jint = 0;
pub(crate) const JNI_ERR: Jint = -1;
/// `JVMTI_VERSION_1_2`: every call used here exists since 1.2 (Java 7).
pub(crate) const JVMTI_VERSION_1_2: Jint = 0x3001_0200;

/// `jvmtiError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct JvmtiError(pub i32);

impl JvmtiError {
    pub(crate) const NONE: JvmtiError = JvmtiError(0);
}

/// `jvmtiEventMode`.
const JVMTI_ENABLE: i32 = 1;
const JVMTI_DISABLE: i32 = 0;

/// `jvmtiEvent` numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum Event {
    VmInit = 50,
    VmDeath = 51,
    CompiledMethodLoad = 68,
    DynamicCodeGenerated = 70,
    GarbageCollectionStart = 81,
    GarbageCollectionFinish = 82,
}

/// `jvmtiCMLRKind` of a record in `CompiledMethodLoad`'s `compile_info` list.
pub(crate) const JVMTI_CMLR_INLINE_INFO: i32 = 2;

/// `jvmtiCapabilities`: 128 one-bit fields, in declaration order from bit 0 of the first
/// 32-bit unit (the C ABI of bit fields on the Linux targets).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(crate) struct Capabilities {
    bits: [u32; 4],
}

/// Positions of the capability bits the agent asks for.
#[derive(Debug, Clone, Copy)]
#[repr(u32)]
pub(crate) enum Capability {
    GetSourceFileName = 11,
    GetLineNumbers = 12,
    GenerateCompiledMethodLoadEvents = 27,
    GenerateGarbageCollectionEvents = 31,
}

impl Capabilities {
    pub(crate) fn with(mut self, capability: Capability) -> Capabilities {
        let bit = capability as u32;
        self.bits[(bit / 32) as usize] |= 1 << (bit % 32);
        self
    }
}

/// `jvmtiAddrLocationMap`.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct AddrLocationMap {
    pub start_address: *const c_void,
    pub location: Jlocation,
}

/// `jvmtiLineNumberEntry`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(crate) struct LineNumberEntry {
    pub start_location: Jlocation,
    pub line_number: Jint,
}

/// `jvmtiCompiledMethodLoadRecordHeader`.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct CmlrHeader {
    pub kind: i32,
    pub majorinfoversion: Jint,
    pub minorinfoversion: Jint,
    pub next: *const CmlrHeader,
}

/// `PCStackInfo`: the inlining stack at one pc; `methods[0]`/`bcis[0]` is the innermost frame.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct PcStackInfo {
    pub pc: *const c_void,
    pub numstackframes: Jint,
    pub methods: *const JmethodId,
    pub bcis: *const Jint,
}

/// `jvmtiCompiledMethodLoadInlineRecord`.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct CmlrInlineRecord {
    pub header: CmlrHeader,
    pub numpcs: Jint,
    pub pcinfo: *const PcStackInfo,
}

pub(crate) type JvmtiEnvPtr = *mut *const JvmtiInterface;
pub(crate) type JavaVmPtr = *mut *const JniInvokeInterface;

pub(crate) type VmInitFn = unsafe extern "C" fn(JvmtiEnvPtr, *mut JniEnv, Jobject);
pub(crate) type VmDeathFn = unsafe extern "C" fn(JvmtiEnvPtr, *mut JniEnv);
pub(crate) type CompiledMethodLoadFn = unsafe extern "C" fn(
    JvmtiEnvPtr,
    JmethodId,
    Jint,
    *const c_void,
    Jint,
    *const AddrLocationMap,
    *const c_void,
);
pub(crate) type DynamicCodeGeneratedFn =
    unsafe extern "C" fn(JvmtiEnvPtr, *const c_char, *const c_void, Jint);
pub(crate) type GarbageCollectionFn = unsafe extern "C" fn(JvmtiEnvPtr);

/// `jvmtiEventCallbacks`: one pointer per event number from 50 (VMInit) to 86
/// (SampledObjectAlloc, the last of Java 11-17); the JVM takes the size we pass and treats the
/// slots after it (later JDKs' events) as null.
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct EventCallbacks {
    pub vm_init: Option<VmInitFn>,
    pub vm_death: Option<VmDeathFn>,
    _events_52_to_67: [usize; 16],
    pub compiled_method_load: Option<CompiledMethodLoadFn>,
    _event_69: usize,
    pub dynamic_code_generated: Option<DynamicCodeGeneratedFn>,
    _events_71_to_80: [usize; 10],
    pub garbage_collection_start: Option<GarbageCollectionFn>,
    pub garbage_collection_finish: Option<GarbageCollectionFn>,
    _events_83_to_86: [usize; 4],
}

const _: () = {
    let word = size_of::<usize>();
    assert!(offset_of!(EventCallbacks, compiled_method_load) == (68 - 50) * word);
    assert!(offset_of!(EventCallbacks, dynamic_code_generated) == (70 - 50) * word);
    assert!(offset_of!(EventCallbacks, garbage_collection_start) == (81 - 50) * word);
    assert!(offset_of!(EventCallbacks, garbage_collection_finish) == (82 - 50) * word);
    assert!(size_of::<EventCallbacks>() == (86 - 50 + 1) * word);
    assert!(size_of::<Capabilities>() == 16);
    assert!(size_of::<LineNumberEntry>() == 16);
};

/// `struct JNIInvokeInterface_` (the `JavaVM` function table), up to `GetEnv`.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct JniInvokeInterface {
    _reserved: [usize; 3],
    _destroy_java_vm: usize,
    _attach_current_thread: usize,
    _detach_current_thread: usize,
    pub get_env: Option<unsafe extern "C" fn(JavaVmPtr, *mut *mut c_void, Jint) -> Jint>,
}

/// `struct jvmtiInterface_1_`, the JVMTI function table, up to slot 142 (AddCapabilities).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct JvmtiInterface {
    _slot_1: usize,
    /// Slot 2. C-variadic in the specification (room for future parameters).
    set_event_notification_mode:
        Option<unsafe extern "C" fn(JvmtiEnvPtr, i32, i32, Jobject, ...) -> JvmtiError>,
    _slots_3_to_46: [usize; 44],
    /// Slot 47.
    deallocate: Option<unsafe extern "C" fn(JvmtiEnvPtr, *mut c_uchar) -> JvmtiError>,
    /// Slot 48.
    get_class_signature: Option<
        unsafe extern "C" fn(
            JvmtiEnvPtr,
            Jobject,
            *mut *mut c_char,
            *mut *mut c_char,
        ) -> JvmtiError,
    >,
    _slot_49: usize,
    /// Slot 50.
    get_source_file_name:
        Option<unsafe extern "C" fn(JvmtiEnvPtr, Jobject, *mut *mut c_char) -> JvmtiError>,
    _slots_51_to_63: [usize; 13],
    /// Slot 64.
    get_method_name: Option<
        unsafe extern "C" fn(
            JvmtiEnvPtr,
            JmethodId,
            *mut *mut c_char,
            *mut *mut c_char,
            *mut *mut c_char,
        ) -> JvmtiError,
    >,
    /// Slot 65.
    get_method_declaring_class:
        Option<unsafe extern "C" fn(JvmtiEnvPtr, JmethodId, *mut Jobject) -> JvmtiError>,
    _slots_66_to_69: [usize; 4],
    /// Slot 70.
    get_line_number_table: Option<
        unsafe extern "C" fn(
            JvmtiEnvPtr,
            JmethodId,
            *mut Jint,
            *mut *mut LineNumberEntry,
        ) -> JvmtiError,
    >,
    _slots_71_to_121: [usize; 51],
    /// Slot 122.
    set_event_callbacks:
        Option<unsafe extern "C" fn(JvmtiEnvPtr, *const EventCallbacks, Jint) -> JvmtiError>,
    /// Slot 123.
    generate_events: Option<unsafe extern "C" fn(JvmtiEnvPtr, i32) -> JvmtiError>,
    _slots_124_to_127: [usize; 4],
    /// Slot 128.
    get_error_name:
        Option<unsafe extern "C" fn(JvmtiEnvPtr, JvmtiError, *mut *mut c_char) -> JvmtiError>,
    _slots_129_to_141: [usize; 13],
    /// Slot 142.
    add_capabilities: Option<unsafe extern "C" fn(JvmtiEnvPtr, *const Capabilities) -> JvmtiError>,
}

/// The byte offset of specification slot `slot` (1-based) in the function table.
const fn slot(slot: usize) -> usize {
    (slot - 1) * size_of::<usize>()
}

const _: () = {
    assert!(offset_of!(JvmtiInterface, set_event_notification_mode) == slot(2));
    assert!(offset_of!(JvmtiInterface, deallocate) == slot(47));
    assert!(offset_of!(JvmtiInterface, get_class_signature) == slot(48));
    assert!(offset_of!(JvmtiInterface, get_source_file_name) == slot(50));
    assert!(offset_of!(JvmtiInterface, get_method_name) == slot(64));
    assert!(offset_of!(JvmtiInterface, get_method_declaring_class) == slot(65));
    assert!(offset_of!(JvmtiInterface, get_line_number_table) == slot(70));
    assert!(offset_of!(JvmtiInterface, set_event_callbacks) == slot(122));
    assert!(offset_of!(JvmtiInterface, generate_events) == slot(123));
    assert!(offset_of!(JvmtiInterface, get_error_name) == slot(128));
    assert!(offset_of!(JvmtiInterface, add_capabilities) == slot(142));
    assert!(offset_of!(JniInvokeInterface, get_env) == 6 * size_of::<usize>());
};

/// The JVMTI environment of this agent. `Copy`: JVMTI environments may be used from any thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Env(JvmtiEnvPtr);

// SAFETY: a JVMTI environment pointer is valid on every thread attached to the JVM (the JVMTI
// specification: "The environment pointer ... is valid from any thread"); the agent calls it
// from JVM callbacks and from Agent_OnLoad/OnAttach only.
unsafe impl Send for Env {}
// SAFETY: as above; JVMTI functions are thread-safe.
unsafe impl Sync for Env {}

/// A function missing from the table (a JVM that does not implement it) is an error.
const MISSING: JvmtiError = JvmtiError(-1);

impl Env {
    /// The JVMTI 1.2 environment of `vm`, or the `GetEnv` status.
    ///
    /// # Safety
    /// `vm` is the `JavaVM *` the JVM passed to `Agent_OnLoad`/`Agent_OnAttach`.
    pub(crate) unsafe fn get(vm: JavaVmPtr) -> Result<Env, Jint> {
        if vm.is_null() {
            return Err(JNI_ERR);
        }
        // SAFETY: the caller passes the JVM's live JavaVM, whose first word is its table.
        let table = unsafe { &**vm };
        let get_env = table.get_env.ok_or(JNI_ERR)?;
        let mut env: *mut c_void = ptr::null_mut();
        // SAFETY: GetEnv with an out-pointer to a pointer, as the invocation API defines.
        let status = unsafe { get_env(vm, &mut env, JVMTI_VERSION_1_2) };
        if status != JNI_OK || env.is_null() {
            return Err(if status == JNI_OK { JNI_ERR } else { status });
        }
        Ok(Env(env.cast()))
    }

    /// Wraps the environment pointer a callback received.
    pub(crate) fn from_callback(env: JvmtiEnvPtr) -> Env {
        Env(env)
    }

    fn table(&self) -> &JvmtiInterface {
        // SAFETY: `self.0` came from GetEnv (or from the JVM, in a callback): a live
        // environment whose first word points at the JVM's function table, which lives as long
        // as the JVM.
        unsafe { &**self.0 }
    }

    pub(crate) fn add_capabilities(&self, capabilities: &Capabilities) -> Result<(), JvmtiError> {
        let f = self.table().add_capabilities.ok_or(MISSING)?;
        // SAFETY: a pointer to a jvmtiCapabilities-layout struct, read during the call.
        check(unsafe { f(self.0, capabilities) })
    }

    pub(crate) fn set_event_callbacks(&self, callbacks: &EventCallbacks) -> Result<(), JvmtiError> {
        let f = self.table().set_event_callbacks.ok_or(MISSING)?;
        let size = size_of::<EventCallbacks>() as Jint;
        // SAFETY: the struct is `size` bytes of function pointers in the specification's order;
        // the JVM copies it.
        check(unsafe { f(self.0, callbacks, size) })
    }

    pub(crate) fn enable(&self, event: Event) -> Result<(), JvmtiError> {
        let f = self.table().set_event_notification_mode.ok_or(MISSING)?;
        // SAFETY: mode, event number, null thread (all threads), no extra arguments.
        check(unsafe { f(self.0, JVMTI_ENABLE, event as i32, ptr::null_mut()) })
    }

    pub(crate) fn disable(&self, event: Event) -> Result<(), JvmtiError> {
        let f = self.table().set_event_notification_mode.ok_or(MISSING)?;
        // SAFETY: mode, event number, null thread (all threads), no extra arguments.
        check(unsafe { f(self.0, JVMTI_DISABLE, event as i32, ptr::null_mut()) })
    }

    pub(crate) fn generate_events(&self, event: Event) -> Result<(), JvmtiError> {
        let f = self.table().generate_events.ok_or(MISSING)?;
        // SAFETY: an event number; the JVM posts the events before returning.
        check(unsafe { f(self.0, event as i32) })
    }

    /// The method's name and JVM signature, e.g. `("bar", "(I)J")`.
    pub(crate) fn method_name(&self, method: JmethodId) -> Result<(Vec<u8>, Vec<u8>), JvmtiError> {
        let f = self.table().get_method_name.ok_or(MISSING)?;
        let (mut name, mut sig) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: out-pointers for two JVMTI-allocated strings; generic signature not asked.
        check(unsafe { f(self.0, method, &mut name, &mut sig, ptr::null_mut()) })?;
        Ok((self.take_string(name), self.take_string(sig)))
    }

    pub(crate) fn declaring_class(&self, method: JmethodId) -> Result<Jobject, JvmtiError> {
        let f = self.table().get_method_declaring_class.ok_or(MISSING)?;
        let mut class = ptr::null_mut();
        // SAFETY: an out-pointer for a JNI reference.
        check(unsafe { f(self.0, method, &mut class) })?;
        Ok(class)
    }

    /// The class's JVM signature, e.g. `Lcom/x/Foo;`.
    pub(crate) fn class_signature(&self, class: Jobject) -> Result<Vec<u8>, JvmtiError> {
        let f = self.table().get_class_signature.ok_or(MISSING)?;
        let mut sig = ptr::null_mut();
        // SAFETY: an out-pointer for a JVMTI-allocated string; generic signature not asked.
        check(unsafe { f(self.0, class, &mut sig, ptr::null_mut()) })?;
        Ok(self.take_string(sig))
    }

    /// The class's `SourceFile` attribute, e.g. `Foo.java`.
    pub(crate) fn source_file_name(&self, class: Jobject) -> Result<Vec<u8>, JvmtiError> {
        let f = self.table().get_source_file_name.ok_or(MISSING)?;
        let mut name = ptr::null_mut();
        // SAFETY: an out-pointer for a JVMTI-allocated string.
        check(unsafe { f(self.0, class, &mut name) })?;
        Ok(self.take_string(name))
    }

    /// The method's `(start bci, line)` table.
    pub(crate) fn line_number_table(
        &self,
        method: JmethodId,
    ) -> Result<Vec<(i64, i32)>, JvmtiError> {
        let f = self.table().get_line_number_table.ok_or(MISSING)?;
        let mut count: Jint = 0;
        let mut table: *mut LineNumberEntry = ptr::null_mut();
        // SAFETY: out-pointers for a count and a JVMTI-allocated array.
        check(unsafe { f(self.0, method, &mut count, &mut table) })?;
        let entries = if table.is_null() || count <= 0 {
            Vec::new()
        } else {
            // SAFETY: the JVM returned `count` entries at `table`.
            unsafe { std::slice::from_raw_parts(table, count as usize) }
                .iter()
                .map(|e| (e.start_location, e.line_number))
                .collect()
        };
        self.deallocate(table.cast());
        Ok(entries)
    }

    /// The error's name, e.g. `JVMTI_ERROR_WRONG_PHASE`, or its number.
    pub(crate) fn error_name(&self, error: JvmtiError) -> String {
        let Some(f) = self.table().get_error_name else {
            return format!("JVMTI error {}", error.0);
        };
        let mut name = ptr::null_mut();
        // SAFETY: an out-pointer for a JVMTI-allocated string.
        match check(unsafe { f(self.0, error, &mut name) }) {
            Ok(()) => String::from_utf8_lossy(&self.take_string(name)).into_owned(),
            Err(_) => format!("JVMTI error {}", error.0),
        }
    }

    /// Copies a JVMTI-allocated C string and frees it.
    fn take_string(&self, s: *mut c_char) -> Vec<u8> {
        if s.is_null() {
            return Vec::new();
        }
        // SAFETY: JVMTI returned a NUL-terminated string it allocated.
        let bytes = unsafe { CStr::from_ptr(s) }.to_bytes().to_vec();
        self.deallocate(s.cast());
        bytes
    }

    fn deallocate(&self, memory: *mut c_uchar) {
        if memory.is_null() {
            return;
        }
        if let Some(f) = self.table().deallocate {
            // SAFETY: memory JVMTI allocated and handed to us, freed once.
            unsafe { f(self.0, memory) };
        }
    }
}

fn check(error: JvmtiError) -> Result<(), JvmtiError> {
    if error == JvmtiError::NONE {
        Ok(())
    } else {
        Err(error)
    }
}

/// One pc of a compiled method and its inlining stack, innermost frame first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PcScope {
    pub pc: u64,
    pub frames: Vec<(JmethodId, i32)>,
}

/// The `JVMTI_CMLR_INLINE_INFO` records of `compile_info`, flattened.
///
/// # Safety
/// `compile_info` is null or the `compile_info` argument of a `CompiledMethodLoad` callback
/// that has not returned yet.
pub(crate) unsafe fn inline_scopes(compile_info: *const c_void) -> Vec<PcScope> {
    let mut scopes = Vec::new();
    let mut header = compile_info.cast::<CmlrHeader>();
    while !header.is_null() {
        // SAFETY: a record of the list the JVM built for this callback (caller's contract).
        let record = unsafe { &*header };
        if record.kind == JVMTI_CMLR_INLINE_INFO {
            // SAFETY: a record of kind INLINE_INFO is a jvmtiCompiledMethodLoadInlineRecord.
            let inline = unsafe { &*header.cast::<CmlrInlineRecord>() };
            if !inline.pcinfo.is_null() && inline.numpcs > 0 {
                // SAFETY: `numpcs` PCStackInfo at `pcinfo`.
                let pcs =
                    unsafe { std::slice::from_raw_parts(inline.pcinfo, inline.numpcs as usize) };
                for pc in pcs {
                    let n = pc.numstackframes.max(0) as usize;
                    if n == 0 || pc.methods.is_null() || pc.bcis.is_null() {
                        continue;
                    }
                    // SAFETY: `numstackframes` method ids and bcis.
                    let (methods, bcis) = unsafe {
                        (
                            std::slice::from_raw_parts(pc.methods, n),
                            std::slice::from_raw_parts(pc.bcis, n),
                        )
                    };
                    scopes.push(PcScope {
                        pc: pc.pc as u64,
                        frames: methods.iter().copied().zip(bcis.iter().copied()).collect(),
                    });
                }
            }
        }
        header = record.next;
    }
    scopes
}
