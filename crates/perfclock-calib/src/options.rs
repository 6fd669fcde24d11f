//! [`CalibrationOptions`]: every calibration setting, as a builder with private fields so that
//! settings can be added without breaking callers.

use std::time::Duration;

use crate::error::CalibError;
use crate::fit::FitOptions;
use crate::kind::RecordKind;
use crate::published::BoundModel;

/// Brackets collected before the first fit: a few thousand over every kind on our machines,
/// enough for a bound under a microsecond, while `init()` stays a short wait.
const DEFAULT_INIT_BUDGET: Duration = Duration::from_millis(30);
/// `start` gives up after this: far beyond a first calibration even on a loaded machine.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(2);
/// History kept for the fit: a long baseline pins the slope; a clock that is not one line over
/// it is caught by the window shrinking.
const DEFAULT_WINDOW: Duration = Duration::from_secs(600);
/// Brackets per refinement at the longest pause: enough to hit the tight ones again.
const DEFAULT_REFINE_BATCH: usize = 192;
/// Bound growth allowed between republishes, ns: a few percent of the narrowest bound our
/// machines' brackets allow (about 380 ns), for a refinement every 5 ms early on and about one a
/// second after a minute.
const DEFAULT_ALLOWED_GROWTH_NS: u64 = 10;
/// Shortest pause between refinements: caps the thread's CPU early on.
const DEFAULT_MIN_REFINE_INTERVAL: Duration = Duration::from_millis(5);
/// Longest pause between refinements: also how late a clock jump is noticed.
const DEFAULT_MAX_REFINE_INTERVAL: Duration = Duration::from_secs(1);
/// Smallest refinement batch: a clock jump is at least 2 brackets and half of a batch outside
/// the published bound, which needs 3 to tell from one stray bracket.
pub(crate) const MIN_REFINE_BATCH: usize = 3;
/// Largest refinement batch: a batch is allocated and collected in one go on the calibration
/// thread (about a microsecond per bracket), so a larger one would stall refinement for seconds
/// or exhaust memory.
const MAX_REFINE_BATCH: usize = 1 << 16;
/// Longest init budget: the first calibration collects for up to 4 times this, and `start`
/// blocks for it; beyond a minute the fit gains nothing a refinement would not bring.
const MAX_INIT_BUDGET: Duration = Duration::from_secs(60);
/// The history window holds at least this many of the longest pauses between refinements, so
/// that a fit always spans more than one batch.
const MIN_WINDOW_PAUSES: u32 = 2;

/// Settings for [`crate::CalibratedClock::start`]. `Default` is what the facade uses.
///
/// ```
/// use std::time::Duration;
/// use perfclock_calib::CalibrationOptions;
///
/// let options = CalibrationOptions::default()
///     .refine(false)
///     .init_budget(Duration::from_millis(50));
/// assert!(!options.refines());
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CalibrationOptions {
    pub(crate) refine: bool,
    pub(crate) init_budget: Duration,
    pub(crate) start_timeout: Duration,
    pub(crate) fit: FitOptions,
    pub(crate) window: Duration,
    pub(crate) refine_batch: usize,
    pub(crate) allowed_growth_ns: u64,
    pub(crate) min_refine_interval: Duration,
    pub(crate) max_refine_interval: Duration,
    pub(crate) kinds: Vec<RecordKind>,
}

impl Default for CalibrationOptions {
    fn default() -> Self {
        Self {
            refine: true,
            init_budget: DEFAULT_INIT_BUDGET,
            start_timeout: DEFAULT_START_TIMEOUT,
            fit: FitOptions::default(),
            window: DEFAULT_WINDOW,
            refine_batch: DEFAULT_REFINE_BATCH,
            allowed_growth_ns: DEFAULT_ALLOWED_GROWTH_NS,
            min_refine_interval: DEFAULT_MIN_REFINE_INTERVAL,
            max_refine_interval: DEFAULT_MAX_REFINE_INTERVAL,
            kinds: Vec::new(),
        }
    }
}

impl CalibrationOptions {
    /// Keep refining in the background (and watch for clock jumps), the default. Off: calibrate
    /// once; the bound then grows with the time since calibration.
    pub fn refine(mut self, refine: bool) -> Self {
        self.refine = refine;
        self
    }

    /// Whether the clock keeps refining.
    pub fn refines(&self) -> bool {
        self.refine
    }

    /// Time spent collecting brackets before the first fit: above zero, at most a minute, and
    /// below [`CalibrationOptions::start_timeout`].
    pub fn init_budget(mut self, budget: Duration) -> Self {
        self.init_budget = budget;
        self
    }

    /// How long `start` waits for the first result before giving up with
    /// [`CalibError::Timeout`]; the calibration thread is then told to stop and left to finish on
    /// its own (never waited for), so `start` returns within about this time whatever the
    /// thread is doing.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Fit tuning.
    pub fn fit(mut self, fit: FitOptions) -> Self {
        self.fit = fit;
        self
    }

    /// History kept for the fit: the slope baseline. At least twice the longest pause between
    /// refinements ([`CalibrationOptions::refine_interval`]), so a fit spans several batches.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Brackets per refinement (at the longest pause; shorter pauses take fewer): 3 to 65536.
    pub fn refine_batch(mut self, brackets: usize) -> Self {
        self.refine_batch = brackets;
        self
    }

    /// How much the bound may grow between republishes, ns; also how much nearer the fit a line
    /// must come before the refiner steps forward to it (see docs/design.md).
    pub fn allowed_growth_ns(mut self, ns: u64) -> Self {
        self.allowed_growth_ns = ns;
        self
    }

    /// Shortest and longest pause between refinements (the longest is also the jump-detection
    /// latency).
    pub fn refine_interval(mut self, min: Duration, max: Duration) -> Self {
        self.min_refine_interval = min;
        self.max_refine_interval = max;
        self
    }

    /// The pause after publishing `bound` on a line of `ns_per_tick`: until the bound has grown
    /// by the allowed growth, within the refine intervals. The refiner's, and a publisher's
    /// that republishes its line (`perfclock serve`).
    pub fn pause_after(&self, bound: &BoundModel, ns_per_tick: f64) -> Duration {
        let ticks = bound.ticks_until_growth(self.allowed_growth_ns);
        let pause = Duration::from_nanos((ticks as f64 * ns_per_tick).min(u64::MAX as f64) as u64);
        pause.clamp(self.min_refine_interval, self.max_refine_interval)
    }

    /// Record kinds to calibrate from; empty (the default): every kind this process can open.
    /// Mixing kinds narrows the band (see [`crate::fit`]).
    pub fn kinds(mut self, kinds: &[RecordKind]) -> Self {
        self.kinds = kinds.to_vec();
        self
    }

    /// Checks the settings together, before a thread is spawned for them.
    ///
    /// # Errors
    /// [`CalibError::InvalidOptions`] naming the setter to change.
    pub fn validate(&self) -> Result<(), CalibError> {
        let invalid = |setting, reason| Err(CalibError::InvalidOptions { setting, reason });
        if self.init_budget.is_zero() || self.init_budget > MAX_INIT_BUDGET {
            return invalid("init_budget", "must be above zero and at most 60 s");
        }
        if self.start_timeout.is_zero() {
            return invalid("start_timeout", "must be above zero");
        }
        if self.init_budget >= self.start_timeout {
            return invalid(
                "start_timeout",
                "must be longer than init_budget, or start always times out",
            );
        }
        if !(MIN_REFINE_BATCH..=MAX_REFINE_BATCH).contains(&self.refine_batch) {
            return invalid("refine_batch", "must be 3 to 65536");
        }
        if self.min_refine_interval.is_zero() || self.min_refine_interval > self.max_refine_interval
        {
            return invalid("refine_interval", "needs 0 < min <= max");
        }
        // checked_mul: a max pause near Duration::MAX has no window long enough.
        match self.max_refine_interval.checked_mul(MIN_WINDOW_PAUSES) {
            Some(shortest) if self.window >= shortest => Ok(()),
            _ => invalid(
                "window",
                "must be at least twice refine_interval's max, so a fit spans several batches",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_refine() {
        let options = CalibrationOptions::default();
        assert_eq!(options.validate(), Ok(()));
        assert!(options.refines());
        assert!(!options.refine(false).refines());
    }

    #[test]
    fn invalid_settings_name_their_setter() {
        let default = CalibrationOptions::default;
        let cases = [
            (default().init_budget(Duration::ZERO), "init_budget"),
            (default().init_budget(Duration::MAX), "init_budget"),
            (
                default()
                    .init_budget(Duration::from_secs(5))
                    .start_timeout(Duration::from_millis(100)),
                "start_timeout",
            ),
            (default().refine_batch(0), "refine_batch"),
            (default().refine_batch(1), "refine_batch"),
            (default().refine_batch(2), "refine_batch"),
            (default().refine_batch(1 << 40), "refine_batch"),
            (
                default().refine_interval(Duration::from_secs(2), Duration::from_secs(1)),
                "refine_interval",
            ),
            (
                default().refine_interval(Duration::ZERO, Duration::from_secs(1)),
                "refine_interval",
            ),
            (default().start_timeout(Duration::ZERO), "start_timeout"),
            (default().window(Duration::ZERO), "window"),
            (default().window(Duration::from_millis(1500)), "window"),
            (
                default()
                    .refine_interval(Duration::from_millis(5), Duration::MAX)
                    .window(Duration::MAX),
                "window",
            ),
        ];
        for (options, setter) in cases {
            match options.validate() {
                Err(error @ CalibError::InvalidOptions { setting, .. }) => {
                    assert_eq!(setting, setter, "{options:?}");
                    assert!(error.to_string().contains(setter), "{error}");
                }
                other => panic!("{options:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_edges_of_each_range_are_valid() {
        let default = CalibrationOptions::default;
        let cases = [
            default().refine_batch(3),
            default().refine_batch(1 << 16),
            default().start_timeout(Duration::MAX),
            default()
                .init_budget(Duration::from_secs(60))
                .start_timeout(Duration::from_secs(61)),
            default().window(Duration::from_secs(2)),
            default().window(Duration::MAX),
        ];
        for options in cases {
            assert_eq!(options.validate(), Ok(()), "{options:?}");
        }
    }
}
