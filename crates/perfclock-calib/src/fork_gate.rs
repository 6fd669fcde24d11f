//! Keeps `fork` from copying a calibrated page in the middle of an update.
//!
//! The calibrated page is ordinary memory, copied into a fork child as it is at that instant. A
//! child forked between the writer's odd and even lock stores would keep an odd lock forever
//! (its copy has no writer), and every read there would end in `Contended`. The writer holds this
//! gate around each update; [`prepare`], run as a `pthread_atfork` prepare handler, takes it
//! too, so `fork` waits the nanoseconds an update lasts, and [`after`], run as the parent and
//! child handlers, opens it again.
//!
//! This crate registers no handler itself: the process-wide fork story has one registration,
//! the `perfclock` facade's. A program that uses [`crate::CalibratedClock`] directly and forks
//! registers `prepare` and `after` with `pthread_atfork`.
//!
//! # Safety
//! The handlers touch only an atomic flag. The writer thread blocks every signal, so no handler
//! running on it can fork while it holds the gate. The only unsafe call is `sched_yield`.
#![allow(unsafe_code)]

use std::hint::spin_loop;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set while an update or a fork is in progress.
static CLOSED: AtomicBool = AtomicBool::new(false);

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
    let mut spins = 0u32;
    // ATOMICS: Acquire pairs with the Release in `open`, so what the previous holder wrote is
    // visible to the next.
    while CLOSED
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < SPINS_BEFORE_YIELD {
            spin_loop();
        } else {
            // SAFETY: sched_yield has no preconditions and is async-signal-safe.
            unsafe { libc::sched_yield() };
        }
    }
}

/// The `pthread_atfork` prepare handler: waits for an update in progress to finish and keeps
/// the next from starting until [`after`]. Async-signal-safe (an atomic flag, `sched_yield`).
pub extern "C" fn prepare() {
    close();
}

/// The `pthread_atfork` parent and child handler: lets updates run again.
pub extern "C" fn after() {
    open();
}

fn open() {
    // ATOMICS: Release publishes the holder's writes to whoever closes the gate next.
    CLOSED.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn fork_waits_for_the_holder_and_the_child_finds_the_gate_open() {
        // What the facade's one registration does for the gate.
        // SAFETY: plain `extern "C"` functions valid for the life of the process.
        unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(after)) };
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
            let open_in_child = !CLOSED.load(Ordering::Acquire);
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
            !CLOSED.load(Ordering::Acquire),
            "the parent handler left the gate closed"
        );
    }
}
