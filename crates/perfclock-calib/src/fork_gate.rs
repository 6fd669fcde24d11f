//! Keeps `fork` from copying a calibrated page in the middle of an update, and tells a fork
//! child that it is one.
//!
//! The calibrated page is ordinary memory, copied into a fork child as it is at that instant. A
//! child forked between the writer's odd and even lock stores would keep an odd lock forever
//! (its copy has no writer), and every read there would end in `Contended`. The writer holds this
//! gate around each update; [`prepare`], run as a `pthread_atfork` prepare handler, takes it
//! too, so `fork` waits the nanoseconds an update lasts, and [`after`] (parent) and [`child`]
//! (child), run as the other handlers, open it again.
//!
//! A process copied without the handlers (a raw `clone` system call, which bypasses
//! `pthread_atfork`) may inherit the gate closed by a thread that does not exist in it. The gate
//! therefore records the process id of its holder, and a process that finds it held by another
//! process takes it over instead of waiting for a release that can never come.
//!
//! [`child`] also counts forks ([`generation`]): a calibrated clock compares it with the
//! generation its refiner runs in to know that it was inherited without one.
//!
//! This crate registers no handler itself: the process-wide fork story has one registration,
//! the `perfclock` facade's. A program that uses [`crate::CalibratedClock`] directly and forks
//! registers `prepare`, `after` and `child` with `pthread_atfork`.
//!
//! The handlers touch only atomics and call `getpid` and `sched_yield` (through
//! `std::process::id` and `std::thread::yield_now`, which allocate nothing), all
//! async-signal-safe. The writer thread blocks every signal, so no handler running on it can
//! fork while it holds the gate.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// 0 while the gate is open; while an update or a fork is in progress, the process id of the
/// process whose thread holds it.
static HOLDER: AtomicU32 = AtomicU32::new(0);

/// Fork children this process descends from through `fork` (counted by [`child`]).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Spins before yielding the CPU: an update lasts nanoseconds, a fork can last milliseconds.
const SPINS_BEFORE_YIELD: u32 = 1_000;

/// The gate, held: no fork copies the process until it is dropped.
#[derive(Debug)]
pub(crate) struct Held(());

/// Waits until no fork is in progress and holds the gate.
pub(crate) fn hold() -> Held {
    close();
    Held(())
}

impl Drop for Held {
    fn drop(&mut self) {
        open();
    }
}

fn close() {
    let me = std::process::id();
    let mut spins = 0u32;
    loop {
        // ATOMICS: Acquire pairs with the Release in `open`, so what the previous holder wrote
        // is visible to the next.
        match HOLDER.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return,
            // Held by a thread of another process: this process is a copy made without the fork
            // handlers (raw `clone`), and that holder will never open this copy. Take it over.
            Err(holder) if holder != 0 && holder != me => {
                if HOLDER
                    .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
            }
            Err(_) => {}
        }
        spins += 1;
        if spins < SPINS_BEFORE_YIELD {
            spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The `pthread_atfork` prepare handler: waits for an update in progress to finish and keeps
/// the next from starting until [`after`] or [`child`]. Fit for a fork handler: atomics,
/// `getpid` and `sched_yield` only, no allocation.
pub extern "C" fn prepare() {
    close();
}

/// The `pthread_atfork` parent handler: lets updates run again.
pub extern "C" fn after() {
    open();
}

/// The `pthread_atfork` child handler: lets updates run again (there is no writer here until a
/// refiner is started again) and counts the fork in [`generation`]. Fit for a fork child's
/// handler: atomics only.
pub extern "C" fn child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
    open();
}

/// How many `fork`s (with the handlers registered) separate this process from the one the
/// program started as. A clock whose refiner was started at another generation has no refiner
/// in this process. Lock-free. Async-signal-safe.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

fn open() {
    // ATOMICS: Release publishes the holder's writes to whoever closes the gate next.
    HOLDER.store(0, Ordering::Release);
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn fork_waits_for_the_holder_and_the_child_finds_the_gate_open() {
        // What the facade's one registration does for the gate.
        // SAFETY: plain `extern "C"` functions valid for the life of the process.
        unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(child)) };
        const HOLD: Duration = Duration::from_millis(100);
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let held = hold();
            held_tx.send(()).unwrap();
            std::thread::sleep(HOLD);
            drop(held);
        });
        held_rx.recv().unwrap();
        let started = Instant::now();
        // SAFETY: the child only checks the atomic flag and leaves with `_exit`.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let open_in_child = HOLDER.load(Ordering::Acquire) == 0 && generation() > 0;
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(if open_in_child { 0 } else { 1 }) };
        }
        let waited = started.elapsed();
        assert!(child > 0, "fork failed");
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        holder.join().unwrap();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status:#x}"
        );
        assert!(
            waited >= HOLD / 2,
            "fork did not wait for the gate's holder ({waited:?})"
        );
        assert!(
            HOLDER.load(Ordering::Acquire) == 0,
            "the parent handler left the gate closed"
        );
    }

    #[test]
    fn a_raw_clone_child_takes_over_a_gate_its_parent_held() {
        let held = hold();
        // A raw clone runs no pthread_atfork handler: the child's copy of the gate stays held by
        // the parent's process, as after a raw clone that lands in the middle of an update.
        // SAFETY: clone(SIGCHLD) without CLONE_VM gives the child its own copy of memory, as fork
        // does; the child runs only `prepare` (atomics, getpid, sched_yield), `after`, `_exit`.
        let child = unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::SIGCHLD as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
        if child == 0 {
            // SAFETY: alarm has no memory effects: a child stuck in `prepare` dies of SIGALRM.
            unsafe { libc::alarm(10) };
            // What `fork` in this child runs first; it waited for ever before the takeover.
            prepare();
            after();
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(0) };
        }
        drop(held);
        assert!(child > 0, "clone failed");
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(child as libc::pid_t, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the clone child's fork prepare handler did not return: status {status:#x}"
        );
    }
}
