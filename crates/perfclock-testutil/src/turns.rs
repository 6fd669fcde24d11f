//! Tests of one binary that take turns: libtest runs a binary's tests on parallel threads, and a
//! test that judges what the machine delivers in a fixed time (signals handled, reads between
//! republishes, the width of kernel-stamped brackets) gets half of it on 2 cores when another
//! test runs beside it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Waits for this test's turn and holds it until the guard drops: call it first in each test
/// of a binary whose tests must not overlap. A test that failed while holding the turn does not
/// stop the others.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}
