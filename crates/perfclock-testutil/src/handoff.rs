//! Readings handed from one thread or process to another, and the verdict on them.
//!
//! A reading is the counter value and the nanoseconds the clock made of it, taken together (one
//! seqlock section). The consumer takes the producer's latest reading, then reads its own: its
//! counter read happens after the producer's, so its nanoseconds must not be below, unless the
//! counter itself went back. That happens: the counters of two CPUs are synchronised only so
//! well (on a KVM guest, a vCPU's TSC can read a few ticks below another vCPU's earlier read), and
//! no conversion of a counter can be more monotonic than the counter. So [`Verdict`] keeps two
//! counts apart: readings below the other's although our counter was not (the clock's fault:
//! tests assert 0) and readings below because the counter went back (the machine's; reported,
//! and checked not to be magnified by the conversion).

use core::sync::atomic::{fence, AtomicU64, Ordering};

/// One reading: counter value and nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// The raw counter value.
    pub cycles: u64,
    /// What the clock made of it.
    pub ns: u64,
}

/// The latest reading of one producer, for any number of consumers: a seqlock over three words
/// (in process memory or a shared mapping). `ATOMICS:` the producer's Release store of the even
/// sequence pairs with a consumer's Acquire load of it, so the reading happened before what the
/// consumer does next.
#[derive(Debug, Default)]
#[repr(C)]
pub struct HandoffCell {
    sequence: AtomicU64,
    cycles: AtomicU64,
    ns: AtomicU64,
}

/// Bytes a [`HandoffCell`] takes (for sizing a shared file).
pub const HANDOFF_CELL_BYTES: usize = core::mem::size_of::<HandoffCell>();

impl HandoffCell {
    /// Publishes `reading` (single producer).
    pub fn publish(&self, reading: Reading) {
        let sequence = self.sequence.load(Ordering::Relaxed);
        self.sequence
            .store(sequence.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.cycles.store(reading.cycles, Ordering::Relaxed);
        self.ns.store(reading.ns, Ordering::Relaxed);
        self.sequence
            .store(sequence.wrapping_add(2), Ordering::Release);
    }

    /// The latest reading with its sequence number, or `None` if none was published yet or the
    /// producer was writing.
    pub fn take(&self) -> Option<(u64, Reading)> {
        let sequence = self.sequence.load(Ordering::Acquire);
        if sequence == 0 || sequence % 2 == 1 {
            return None;
        }
        let reading = Reading {
            cycles: self.cycles.load(Ordering::Relaxed),
            ns: self.ns.load(Ordering::Relaxed),
        };
        fence(Ordering::Acquire);
        (self.sequence.load(Ordering::Relaxed) == sequence).then_some((sequence, reading))
    }
}

/// Handoffs counted by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Readings compared with the one handed over.
    pub handoffs: u64,
    /// Below the handed-over reading although the counter was not: the clock's fault.
    pub clock_backs: u64,
    /// The worst of those, ns.
    pub clock_worst_ns: u64,
    /// Below because the counter itself was below the handed-over counter value.
    pub counter_backs: u64,
    /// The worst counter step back, ticks.
    pub counter_worst_ticks: u64,
    /// The worst reading step back among `counter_backs`, ns.
    pub counter_worst_ns: u64,
}

impl Verdict {
    /// Counts one handoff: `ours` was taken after `theirs` was seen.
    pub fn record(&mut self, theirs: Reading, ours: Reading) {
        self.handoffs += 1;
        if ours.cycles < theirs.cycles {
            self.counter_backs += 1;
            self.counter_worst_ticks = self.counter_worst_ticks.max(theirs.cycles - ours.cycles);
            self.counter_worst_ns = self.counter_worst_ns.max(theirs.ns.saturating_sub(ours.ns));
        } else if ours.ns < theirs.ns {
            self.clock_backs += 1;
            self.clock_worst_ns = self.clock_worst_ns.max(theirs.ns - ours.ns);
        }
    }

    /// Adds another verdict's counts.
    pub fn merge(&mut self, other: &Verdict) {
        self.handoffs += other.handoffs;
        self.clock_backs += other.clock_backs;
        self.clock_worst_ns = self.clock_worst_ns.max(other.clock_worst_ns);
        self.counter_backs += other.counter_backs;
        self.counter_worst_ticks = self.counter_worst_ticks.max(other.counter_worst_ticks);
        self.counter_worst_ns = self.counter_worst_ns.max(other.counter_worst_ns);
    }

    /// One line, `KEY value` pairs after `prefix`, for a parent process or the log.
    pub fn line(&self, prefix: &str) -> String {
        format!(
            "{prefix} handoffs {} clock_backs {} clock_worst_ns {} counter_backs {} \
             counter_worst_ticks {} counter_worst_ns {}",
            self.handoffs,
            self.clock_backs,
            self.clock_worst_ns,
            self.counter_backs,
            self.counter_worst_ticks,
            self.counter_worst_ns
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backs_are_told_apart_by_the_counter() {
        let mut verdict = Verdict::default();
        let theirs = Reading {
            cycles: 1_000,
            ns: 500,
        };
        verdict.record(
            theirs,
            Reading {
                cycles: 1_010,
                ns: 505,
            },
        );
        verdict.record(
            theirs,
            Reading {
                cycles: 1_010,
                ns: 497,
            },
        );
        verdict.record(
            theirs,
            Reading {
                cycles: 994,
                ns: 498,
            },
        );
        assert_eq!(
            verdict,
            Verdict {
                handoffs: 3,
                clock_backs: 1,
                clock_worst_ns: 3,
                counter_backs: 1,
                counter_worst_ticks: 6,
                counter_worst_ns: 2,
            }
        );
    }

    #[test]
    fn a_cell_gives_back_what_was_published() {
        let cell = HandoffCell::default();
        assert_eq!(cell.take(), None);
        let reading = Reading { cycles: 7, ns: 9 };
        cell.publish(reading);
        assert_eq!(cell.take(), Some((2, reading)));
    }
}
