//! Keeps `fork` from copying a calibrated page in the middle of an update.
//!
//! The calibrated page is ordinary memory, copied into a fork child as it is at that instant. A
//! child forked between the writer's odd and even lock stores would keep an odd lock forever
//! (its copy has no writer), and every read there would end in `Contended`. The writer holds this
//! gate around each update; a `pthread_atfork` prepare handler takes it too, so `fork` waits the
//! nanoseconds an update lasts, and the parent and child handlers open it again.
//!
//! # Safety
//! The handlers touch only an atomic flag. The writer thread blocks every signal, so no handler
//! running on it can fork while it holds the gate.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// Set while an update or a fork is in progress.
static CLOSED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

/// Spins before yielding the CPU: an update lasts nanoseconds, a fork can last milliseconds.
const SPINS_BEFORE_YIELD: u32 = 1_000;

/// Registers the fork handlers (once per process).
pub fn install() {
    INSTALL.call_once(|| {
        // SAFETY: plain `extern "C"` functions that stay valid for the life of the process and
        // only use an atomic flag.
        unsafe { libc::pthread_atfork(Some(close_for_fork), Some(open), Some(open)) };
    });
}

/// The gate, held: no fork copies the process until it is dropped.
#[derive(Debug)]
pub struct Held(());

/// Waits until no fork is in progress and holds the gate.
pub fn hold() -> Held {
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

extern "C" fn close_for_fork() {
    close();
}

extern "C" fn open() {
    // ATOMICS: Release publishes the holder's writes to whoever closes the gate next.
    CLOSED.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn fork_waits_for_the_holder_and_the_child_finds_the_gate_open() {
        install();
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
