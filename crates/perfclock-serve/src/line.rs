//! What the server publishes and when: the in-process refiner's line, continued across its
//! refits with perfclock-calib's `continue_within` (the first of the continuations the
//! in-process refiner chooses among between its own fits); after a clock jump the refiner
//! detected, the new line as it is. The refiner's [`LinePublisher`] writes each step, as it
//! writes the refiner's own.

use perfclock_calib::published::{
    bound_toward, continue_within, slope_of, tighter_at, BoundModel, LinePublisher, LineTarget,
    Solution, Step,
};
use perfclock_core::shared_page::SharedPageWriter;
use perfclock_core::TimeConversion;

/// Horizon over which a line that would step back slews into the new one, as the in-process
/// refiner's (its longest refinement pause).
const SLEW_HORIZON_NS: f64 = 1e9;

/// The line the shared page publishes, the refiner's line it was continued toward, and the
/// refiner's jump count when it was published.
#[derive(Debug, Clone, Copy)]
pub struct PublishedLine {
    published: LinePublisher,
    toward: Option<TimeConversion>,
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
            published: LinePublisher::new(inherited),
            toward: None,
            jumps,
        }
    }

    /// What the page publishes now.
    pub fn current(&self) -> Option<Solution> {
        self.published.current()
    }

    /// Publishes `target` at counter value `now`, continuing the published line unless the
    /// refiner's jump count moved past `jumps`; refreshes the heartbeat. When only `target`'s
    /// bound moved (the refiner kept its line), the published line stays and its bound is
    /// re-measured toward it: continuing it again would step it up by the continuity margin at
    /// every poll.
    pub fn publish(
        &mut self,
        writer: &SharedPageWriter,
        target: Solution,
        jumps: u64,
        now: u64,
    ) -> Publication {
        let page = SharedLine { writer, now };
        let (step, publication) = self.step(target, jumps, now);
        if !self.published.take(&page, step, now) {
            return Publication::Deferred;
        }
        if matches!(step, Step::Switch { .. }) {
            self.toward = Some(target.conversion);
            self.jumps = jumps;
        }
        publication
    }

    /// The server's rule: what publishing `target` at counter value `now` does to the line
    /// the page carries (see [`PublishedLine::publish`]), and what that is called.
    fn step(&self, target: Solution, jumps: u64, now: u64) -> (Step, Publication) {
        let first = Step::Switch {
            line: target,
            before: u64::MAX,
        };
        let Some(old) = self.published.current() else {
            return (first, Publication::First);
        };
        if jumps != self.jumps {
            return (first, Publication::Jumped(jumps - self.jumps));
        }
        if old.conversion == target.conversion {
            return (Step::Keep(Some(target.bound)), Publication::Unchanged);
        }
        let horizon = (SLEW_HORIZON_NS / slope_of(&target.conversion)) as u64;
        if self.toward == Some(target.conversion) {
            let remeasured = bound_toward(&old.conversion, &target, now);
            let bound = tighter_at(now.saturating_add(horizon), remeasured, old.bound);
            return (Step::Keep(Some(bound)), Publication::Unchanged);
        }
        match continue_within(&old.conversion, &target, now, horizon) {
            Some((line, before)) => (Step::Switch { line, before }, Publication::Continued),
            None => (Step::Keep(Some(old.bound)), Publication::Deferred),
        }
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
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_step_back_is_continued_not_taken() {
        let old = TimeConversion::new(1 << 31, 31, 1_000_000).unwrap();
        let now = 5_000_000_000;
        let target = line(0, 10, now);
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

    /// A refiner's line at 1 ns per tick, `zero` ns ahead of the counter, with bound `base_ns`.
    pub(crate) fn line(zero: u64, base_ns: u64, now: u64) -> Solution {
        Solution {
            conversion: TimeConversion::new(1 << 31, 31, zero).unwrap(),
            bound: BoundModel {
                base_ns,
                growth_q48: 0,
                counter_ref: now,
            },
        }
    }

    #[test]
    fn a_new_bound_on_the_same_line_is_stored_the_line_kept() {
        let page = crate::publisher::LivePage::new(None).expect("a page");
        let now = 5_000_000_000;
        let mut published = PublishedLine::new(None, 0);
        let first = line(1_000_000, 10, now);
        let publication = page.with_writer(|w| published.publish(w, first, 0, now));
        assert_eq!(publication, Publication::First);
        let wider = line(1_000_000, 30, now + 1_000);
        let publication = page.with_writer(|w| published.publish(w, wider, 0, now + 1_000));
        assert_eq!(publication, Publication::Unchanged);
        assert_eq!(published.current(), Some(wider));
    }

    #[test]
    fn a_line_slewing_into_a_target_keeps_slewing_when_only_the_target_s_bound_moves() {
        let page = crate::publisher::LivePage::new(None).expect("a page");
        // The real counter: a continuation is written only before its deadline passes.
        let now = perfclock_core::counter::read_counter().expect("a counter");
        let mut published = PublishedLine::new(None, 0);
        page.with_writer(|w| published.publish(w, line(1_000_000, 10, now), 0, now));
        // 1 ms back: continued, not taken.
        let target = line(0, 10, now);
        let publication = page.with_writer(|w| published.publish(w, target, 0, now));
        assert_eq!(publication, Publication::Continued);
        let slewing = published.current().expect("a line");
        assert_ne!(slewing.conversion, target.conversion);
        // The refiner kept its line and re-measured its bound, tighter: the page keeps its line
        // (a new continuation would start the margin above it again) with the bound measured
        // toward the new one.
        let later = now + 1_000;
        let remeasured = line(0, 5, later);
        let publication = page.with_writer(|w| published.publish(w, remeasured, 0, later));
        assert_eq!(publication, Publication::Unchanged);
        let kept = published.current().expect("a line");
        assert_eq!(kept.conversion, slewing.conversion);
        let gap = kept
            .conversion
            .cycles_to_ns(later)
            .abs_diff(target.conversion.cycles_to_ns(later));
        assert!(
            kept.bound.at(later) >= 5 + gap && kept.bound.at(later) < slewing.bound.at(later),
            "{:?} for a gap of {gap} ns, before {:?}",
            kept.bound,
            slewing.bound
        );
    }
}
