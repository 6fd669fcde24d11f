//! The child: the handler under the filter, and the thread that reports what it saw.
//!
//! # Safety
//! `sigaction` with handlers of the right shape, `pthread_kill` to a thread of this process,
//! the SIGSYS `siginfo_t` read at its kernel layout, and the raw system call of the control.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::{c_int, CString};
use std::io::{BufRead as _, Write as _};
use std::os::unix::ffi::OsStringExt as _;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use perfclock_ffi as c;
use perfclock_testutil::hostile::{install_filter, trap_all_but};

use crate::allocator;
use crate::list::{Expect, MARKERS, SIGNAL_SAFE};
use crate::{Role, DIR_ENV, ROLE_ENV};

/// One slot per function of the list, and the last for the control.
const SLOTS: usize = 64;
const CONTROL: usize = SLOTS - 1;
const _: () = assert!(SIGNAL_SAFE.len() < CONTROL);

/// How long the reporting thread waits for the filter, then for the handler.
const WAIT: Duration = Duration::from_secs(30);

thread_local! {
    /// Set on the thread that installed the seccomp filter.
    static FILTERED: Cell<bool> = const { Cell::new(false) };
}

/// Per slot: allocations, system calls tried, the last call's number, the verdict.
static ALLOCATED: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static SYSCALLS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static LAST_SYSCALL: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
static VERDICT: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
/// The slot running now (for the SIGSYS handler).
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static EXPECTED_MODE: AtomicI32 = AtomicI32::new(0);
static BOUND_UNKNOWN: AtomicBool = AtomicBool::new(false);
static FILTER_INSTALLED: AtomicBool = AtomicBool::new(false);
static HANDLER_DONE: AtomicBool = AtomicBool::new(false);
static HANDLER_UNFILTERED: AtomicBool = AtomicBool::new(false);

/// Runs the proof's child and never returns when [`ROLE_ENV`] is set; returns at once
/// otherwise. A binary that runs the proof calls it first thing in `main`.
pub fn child_if_asked() {
    let Some(name) = std::env::var_os(ROLE_ENV) else {
        return;
    };
    match name.to_str().and_then(Role::from_name) {
        Some(role) => child(role),
        None => {
            println!("ERROR {ROLE_ENV}={name:?} names no role");
            std::process::exit(1);
        }
    }
}

fn child(role: Role) -> ! {
    let rc = c::perfclock_init();
    let got = c::perfclock_mode();
    if rc != c::PERFCLOCK_OK || got != role.mode() {
        println!("MODE {got} rc {rc}");
        std::process::exit(0);
    }
    if let Err(error) = prepare(role) {
        println!("ERROR {error}");
        std::process::exit(1);
    }
    println!("READY");
    let _ = std::io::stdout().flush();
    let mut go = String::new();
    if std::io::stdin().lock().read_line(&mut go).is_err() || go.trim() != "GO" {
        std::process::exit(1);
    }
    if let Err(error) = arm() {
        println!("ERROR {error}");
        std::process::exit(1);
    }
    install_filter(&trap_all_but(&[libc::SYS_rt_sigreturn]));
    FILTERED.with(|flag| flag.set(true));
    FILTER_INSTALLED.store(true, Ordering::Release);
    // The reporting thread sends the signal, waits for the handler and ends the process.
    loop {
        std::hint::spin_loop();
    }
}

/// What the handler needs, from ordinary code: the marker handle (its first marker allocates
/// the thread's buffer, as the header says), the mode, a counting allocator.
fn prepare(role: Role) -> Result<(), String> {
    if !allocator::installed() {
        return Err(
            "allocations are not counted: the binary's global allocator must be \
                    perfclock_signal_safety::CountingAllocator"
                .to_owned(),
        );
    }
    let dir = std::env::var_os(DIR_ENV).ok_or_else(|| format!("{DIR_ENV} is not set"))?;
    let dir = CString::new(dir.into_vec()).map_err(|_| format!("{DIR_ENV} holds a NUL byte"))?;
    let mut markers = std::ptr::null_mut();
    // SAFETY: a NUL-terminated directory and a live out-pointer.
    let opened = unsafe { c::perfclock_markers_open(dir.as_ptr(), &mut markers) };
    if opened != c::PERFCLOCK_OK {
        return Err(format!("perfclock_markers_open returned {opened}"));
    }
    let now = c::perfclock_now_ns();
    // SAFETY: a live handle and a NUL-terminated name.
    let marked = unsafe { c::perfclock_marker(markers, c"ordinary".as_ptr(), now, now) };
    if marked != c::PERFCLOCK_OK {
        return Err(format!("perfclock_marker returned {marked}"));
    }
    MARKERS.store(markers as usize, Ordering::Relaxed);
    EXPECTED_MODE.store(role.mode(), Ordering::Relaxed);
    BOUND_UNKNOWN.store(role.bound_unknown(), Ordering::Relaxed);
    Ok(())
}

/// The handlers, and the reporting thread that will signal this (the main) thread.
fn arm() -> Result<(), String> {
    install(libc::SIGALRM, on_alarm as *const () as usize, false)?;
    install(libc::SIGSYS, on_sigsys as *const () as usize, true)?;
    // SAFETY: pthread_self has no preconditions.
    let main_thread = unsafe { libc::pthread_self() };
    std::thread::Builder::new()
        .name("sigsafe-report".to_owned())
        .spawn(move || report(main_thread))
        .map(drop)
        .map_err(|error| format!("cannot start the reporting thread: {error}"))
}

fn install(signal: c_int, handler: usize, siginfo: bool) -> Result<(), String> {
    // SAFETY: a zeroed sigaction is valid; the handler is an extern "C" fn of the right shape
    // for the flags; `sigaction` reads it before returning.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = if siginfo { libc::SA_SIGINFO } else { 0 };
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "sigaction({signal}): {}",
            std::io::Error::last_os_error()
        ))
    }
}

extern "C" fn on_alarm(_: c_int) {
    if !FILTERED.with(Cell::get) {
        HANDLER_UNFILTERED.store(true, Ordering::Relaxed);
    }
    let expect = Expect {
        mode: EXPECTED_MODE.load(Ordering::Relaxed),
        bound_unknown: BOUND_UNKNOWN.load(Ordering::Relaxed),
    };
    for (index, (_, call)) in SIGNAL_SAFE.iter().enumerate() {
        CURRENT.store(index, Ordering::Relaxed);
        let (verdict, allocations) = allocator::counting(|| call(&expect));
        ALLOCATED[index].store(allocations, Ordering::Relaxed);
        VERDICT[index].store(verdict as u64, Ordering::Relaxed);
    }
    // The control: one system call and one allocation, which the counts must see.
    CURRENT.store(CONTROL, Ordering::Relaxed);
    let ((), allocations) = allocator::counting(|| {
        // SAFETY: getppid takes no arguments; under the filter it is trapped and fails.
        unsafe { libc::syscall(libc::SYS_getppid) };
        drop(std::hint::black_box(Box::new(0u64)));
    });
    ALLOCATED[CONTROL].store(allocations, Ordering::Relaxed);
    HANDLER_DONE.store(true, Ordering::Release);
}

extern "C" fn on_sigsys(_: c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // `siginfo_t._sigsys` on 64-bit Linux (x86_64, aarch64): `_call_addr` at 16, `_syscall`
    // (int) at 24.
    // SAFETY: the kernel hands a live siginfo_t of SIGSYS, whose layout this reads.
    let number = unsafe { info.cast::<u8>().add(24).cast::<i32>().read() };
    let index = CURRENT.load(Ordering::Relaxed);
    SYSCALLS[index].fetch_add(1, Ordering::Relaxed);
    LAST_SYSCALL[index].store(number, Ordering::Relaxed);
}

/// On its own thread, which has no filter and no SIGALRM of its own: signals the filtered
/// thread once its filter is in force, waits for the handler, prints the counts and ends the
/// process.
fn report(main_thread: libc::pthread_t) {
    let deadline = Instant::now() + WAIT;
    let wait_for = |flag: &AtomicBool| {
        while !flag.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        flag.load(Ordering::Acquire)
    };
    let signalled = wait_for(&FILTER_INSTALLED)
        // SAFETY: the main thread runs until this process ends.
        && unsafe { libc::pthread_kill(main_thread, libc::SIGALRM) } == 0;
    let done = signalled && wait_for(&HANDLER_DONE);
    let mut text = format!(
        "DONE {done} unfiltered {}\n",
        HANDLER_UNFILTERED.load(Ordering::Relaxed)
    );
    let slot = |index: usize| {
        format!(
            "allocations {} syscalls {} last {}",
            ALLOCATED[index].load(Ordering::Relaxed),
            SYSCALLS[index].load(Ordering::Relaxed),
            LAST_SYSCALL[index].load(Ordering::Relaxed)
        )
    };
    for (index, (name, _)) in SIGNAL_SAFE.iter().enumerate() {
        text += &format!(
            "FN {name} {} verdict {}\n",
            slot(index),
            VERDICT[index].load(Ordering::Relaxed)
        );
    }
    text += &format!("CONTROL {}\n", slot(CONTROL));
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    // SAFETY: `_exit` ends every thread at once, the filtered one included, and runs no exit
    // handler.
    unsafe { libc::_exit(i32::from(written.is_err())) };
}
