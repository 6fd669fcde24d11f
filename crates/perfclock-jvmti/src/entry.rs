//! The functions the JVM looks up by name in the agent library: `Agent_OnLoad`,
//! `Agent_OnAttach`, `Agent_OnUnload` (JVMTI specification, "Agent Start-Up").
//!
//! # Safety
//! The functions are `#[no_mangle] extern "C"` under the names the specification fixes (the JVM
//! finds them with `dlsym`); each passes the JVM's own `JavaVM` pointer and option string on to
//! the agent, whose entry points state what they require of them.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};

use crate::agent;
use crate::jvmti::{JavaVmPtr, Jint};
use crate::session::Origin;

/// Called by the JVM for `-agentpath:` (or `-agentlib:`) at start.
///
/// # Safety
/// Called by the JVM with its `JavaVM` and the option string.
#[no_mangle]
#[allow(non_snake_case)]
pub(crate) unsafe extern "C" fn Agent_OnLoad(
    vm: JavaVmPtr,
    options: *mut c_char,
    _reserved: *mut c_void,
) -> Jint {
    // SAFETY: the JVM's arguments, passed on.
    unsafe { agent::start(vm, options, Origin::OnLoad) }
}

/// Called by the JVM when the agent is loaded into a running JVM (dynamic attach).
///
/// # Safety
/// Called by the JVM with its `JavaVM` and the option string.
#[no_mangle]
#[allow(non_snake_case)]
pub(crate) unsafe extern "C" fn Agent_OnAttach(
    vm: JavaVmPtr,
    options: *mut c_char,
    _reserved: *mut c_void,
) -> Jint {
    // SAFETY: the JVM's arguments, passed on.
    unsafe { agent::start(vm, options, Origin::OnAttach) }
}

/// Called by the JVM as it unloads the agent (at exit).
///
/// # Safety
/// Called by the JVM.
#[no_mangle]
#[allow(non_snake_case)]
pub(crate) unsafe extern "C" fn Agent_OnUnload(_vm: JavaVmPtr) {
    agent::unload();
}
