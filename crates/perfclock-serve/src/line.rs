//! What the server publishes and when: the in-process refiner's line, continued across its
//! refits with perfclock-calib's `continue_within` (the first of the continuations the
//! in-process refiner chooses among between its own fits), with the union of both bounds while
//! the two switch; after a clock jump the refiner detected, the new line as it is.

use perfclock_calib::published::{
    continue_within, slope_of, switch_line, BoundModel, LineTarget, Solution,
};
use perfclock_core::shared_page::SharedPageWriter;
use perfclock_core::TimeConversion;

/// Horizon over which a line that would step back slews into the new one, as the in-process
/// refiner's (its longest refinement pause).
const SLEW_HORIZON_NS: f64 = 1e9;

/// The line the shared page publishes, and the refiner's jump count when it was published.
#[derive(Debug, Clone, Copy)]
pub struct PublishedLine {
    published: Option<Solution>,
    jumps: u64,
}

/// What [`PublishedLine::publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication {
    /// The page's first line.
    First,
    /// The same line: the bound (and heartbeat) refreshed.
    Unchanged,
    /// A line that continues the published one.
    Continued,
    /// The refiner saw clock jumps (this many since the last publication): the new line as it
    /// is.
    Jumped(u64),
    /// A continuation could not be published safely now: the line stays, its bound growing
    /// honestly, until the next poll.
    Deferred,
}

impl PublishedLine {
    /// A line that continues `inherited` (an earlier server's, from its file), or none; `jumps`
    /// is the refiner's count now.
    pub fn new(inherited: Option<Solution>, jumps: u64) -> Self {
        PublishedLine {
            published: inherited,
            jumps,
        }
    }

    /// What the page publishes now.
    pub fn current(&self) -> Option<Solution> {
        self.published
    }

    /// Publishes `target` at counter value `now`, continuing the published line unless the
    /// refiner's jump count moved past `jumps`; refreshes the heartbeat.
    pub fn publish(
        &mut self,
        writer: &SharedPageWriter,
        target: Solution,
        jumps: u64,
        now: u64,
    ) -> Publication {
        let page = SharedLine { writer, now };
        let Some(old) = self.published else {
            switch_line(&page, None, &target, now, u64::MAX);
            self.published = Some(target);
            self.jumps = jumps;
            return Publication::First;
        };
        if old.conversion == target.conversion && old.bound == target.bound {
            writer.store_bound(&old.bound, now);
            return Publication::Unchanged;
        }
        let (next, publish_before, publication) = if jumps != self.jumps {
            (target, u64::MAX, Publication::Jumped(jumps - self.jumps))
        } else {
            let horizon = (SLEW_HORIZON_NS / slope_of(&target.conversion)) as u64;
            match continue_within(&old.conversion, &target, now, horizon) {
                Some((next, before)) => (next, before, Publication::Continued),
                None => {
                    writer.store_bound(&old.bound, now);
                    return Publication::Deferred;
                }
            }
        };
        if next.conversion == old.conversion {
            writer.store_bound(&next.bound, now);
        } else if !switch_line(&page, Some(&old), &next, now, publish_before) {
            return Publication::Deferred;
        }
        self.published = Some(next);
        self.jumps = jumps;
        publication
    }
}

/// The shared page as [`switch_line`] writes it: every bound stored also refreshes the heartbeat
/// (to `now`).
struct SharedLine<'a> {
    writer: &'a SharedPageWriter,
    now: u64,
}

impl LineTarget for SharedLine<'_> {
    fn publish_conversion(&self, conversion: &TimeConversion) {
        self.writer.publish(conversion);
    }

    fn store_bound(&self, bound: &BoundModel) {
        self.writer.store_bound(bound, self.now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_back_is_continued_not_taken() {
        let old = TimeConversion::new(1 << 31, 31, 1_000_000).unwrap();
        let target = Solution {
            conversion: TimeConversion::new(1 << 31, 31, 0).unwrap(),
            bound: BoundModel {
                base_ns: 10,
                growth_q48: 0,
                counter_ref: 5_000_000_000,
            },
        };
        let now = 5_000_000_000;
        let horizon = (SLEW_HORIZON_NS / 1.0) as u64;
        let (next, before) = continue_within(&old, &target, now, horizon).expect("a continuation");
        assert!(before > now);
        // Never below the old line from `now` to the end of the margin.
        for c in (now..before).step_by(1_000_000).chain([before]) {
            assert!(
                next.conversion.cycles_to_ns(c) >= old.cycles_to_ns(c),
                "{c}"
            );
        }
        assert!(next.bound.at(now) >= 1_000_000, "{:?}", next.bound);
    }
}
