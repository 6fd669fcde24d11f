//! Threads pinned to different CPUs hand timestamps to each other; none may see one go back.
//!
//! The baton is a timestamp plus a turn counter. The thread whose turn it is loads the turn
//! (Acquire, pairing with the other thread's Release store), reads the clock, checks it is not
//! below the timestamp it was handed, and hands its own over.
//!
//! Run with both reads of the facade. `perfclock::now_ns_ordered()` promises never to go back
//! across such an edge: any backstep fails. `perfclock::now_ns()` is unordered (its `rdtsc` may
//! run before the load that received the other thread's value), so its backsteps are reported,
//! not judged; only read errors, a stuck side or failed pinning fail it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use core_affinity::CoreId;

use crate::report::Report;
use crate::Budget;

/// A handoff that takes longer than this means the other thread is stuck: fail, don't hang.
const STUCK: Duration = Duration::from_secs(30);

#[derive(Debug, Default, Clone, Copy)]
struct Side {
    handoffs: u64,
    backsteps: u64,
    worst_backstep_ns: u64,
    read_errors: u64,
    stuck: bool,
    pinned: bool,
}

struct Baton {
    turn: AtomicU64,
    ns: AtomicU64,
}

fn side(
    cpu: CoreId,
    me: u64,
    baton: &Baton,
    n: u64,
    read: &(impl Fn() -> Option<u64> + Sync),
) -> Side {
    let mut s = Side {
        pinned: core_affinity::set_for_current(cpu),
        ..Side::default()
    };
    // Turns 0, 2, 4, ... belong to side 0; 1, 3, 5, ... to side 1; 2n turns in all.
    let mut turn = me;
    while turn < 2 * n {
        let mut spins = 0u32;
        let mut since = None;
        // ATOMICS: Acquire pairs with the other side's Release store of `turn`, so its store to
        // `ns` (sequenced before) is visible below.
        while baton.turn.load(Ordering::Acquire) != turn {
            spins += 1;
            if spins % 1024 == 0 {
                std::thread::yield_now();
                let t0 = *since.get_or_insert_with(Instant::now);
                if t0.elapsed() > STUCK {
                    s.stuck = true;
                    return s;
                }
            }
            std::hint::spin_loop();
        }
        let handed = baton.ns.load(Ordering::Relaxed);
        match read() {
            Some(now) => {
                if now < handed {
                    s.backsteps += 1;
                    s.worst_backstep_ns = s.worst_backstep_ns.max(handed - now);
                }
                baton.ns.store(now, Ordering::Relaxed);
            }
            None => s.read_errors += 1,
        }
        s.handoffs += 1;
        // ATOMICS: Release publishes the `ns` store above to the other side's Acquire load.
        baton.turn.store(turn + 1, Ordering::Release);
        turn += 2;
    }
    s
}

/// Whether a read promises never to go back across a handoff.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    Ordered,
    Unordered,
}

fn handoff(
    report: &mut Report,
    name: &str,
    order: Order,
    cpus: [CoreId; 2],
    n: u64,
    read: impl Fn() -> Option<u64> + Sync,
) {
    let baton = Baton {
        turn: AtomicU64::new(0),
        ns: AtomicU64::new(0),
    };
    let sides: Vec<Side> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2u64)
            .map(|me| {
                let (baton, read) = (&baton, &read);
                scope.spawn(move || side(cpus[me as usize], me, baton, n, read))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or(Side {
                    stuck: true,
                    ..Side::default()
                })
            })
            .collect()
    });
    let total = |f: fn(&Side) -> u64| sides.iter().map(f).sum::<u64>();
    let handoffs = total(|s| s.handoffs);
    let backsteps = total(|s| s.backsteps);
    let errors = total(|s| s.read_errors);
    let worst = sides.iter().map(|s| s.worst_backstep_ns).max().unwrap_or(0);
    let stuck = sides.iter().any(|s| s.stuck);
    let pinned = sides.iter().all(|s| s.pinned);
    report.check(
        handoffs == 2 * n
            && (backsteps == 0 || order == Order::Unordered)
            && errors == 0
            && !stuck
            && pinned,
        "handoff",
        format_args!(
            "read={name} ordered={} cpus={},{} handoffs={handoffs} backsteps={backsteps} \
             worst_backstep_ns={worst} read_errors={errors} stuck={stuck} pinned={pinned}",
            order == Order::Ordered,
            cpus[0].id,
            cpus[1].id
        ),
    );
}

pub(crate) fn run(report: &mut Report, budget: &Budget, cpus: [CoreId; 2]) {
    // Each side takes every other turn: `budget.handoffs` handoffs per kind of read.
    let n = budget.handoffs / 2;
    if perfclock::init().is_err() {
        report.fail("handoff", format_args!("perfclock::init failed"));
        return;
    }
    let nonzero = |ns: u64| (ns != 0).then_some(ns);
    handoff(report, "now_ns", Order::Unordered, cpus, n, || {
        nonzero(perfclock::now_ns())
    });
    handoff(report, "now_ns_ordered", Order::Ordered, cpus, n, || {
        nonzero(perfclock::now_ns_ordered())
    });
}
