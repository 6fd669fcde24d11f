//! Analysis of kernel-stamped brackets, for the calibration's tests and the `bracket_widths`
//! example: is there one affine line `kernel_ns = offset + slope * counter` that passes through
//! every bracket, and where inside its bracket does each stamp then sit? Floating point is fine
//! here: this is measurement, not the read path.
//!
//! It takes plain [`Stamp`]s, not `perfclock_calib::Bracket`s, so this crate depends on no
//! perfclock crate (see the crate's documentation); callers map their brackets.

/// A kernel stamp and the counter readings taken before and after the event it stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Counter read before the event.
    pub before: u64,
    /// Counter read after the event.
    pub after: u64,
    /// The kernel's stamp of the event, ns in the perf clock.
    pub kernel_ns: u64,
}

/// A line through (counter, kernel_ns) in coordinates centred on the first bracket.
#[derive(Debug, Clone, Copy)]
pub struct Line {
    /// Counter value of the first stamp (the origin of the counter axis).
    pub x0: u64,
    /// Kernel ns of the first stamp (the origin of the ns axis).
    pub y0: u64,
    /// ns per cycle.
    pub slope: f64,
    /// Feasible offsets (ns at `x0`) for this slope: every bracket holds its stamp iff
    /// `lo <= offset <= hi`. `hi - lo` is the slack; negative means no such line.
    pub lo: f64,
    /// The highest feasible offset (see `lo`).
    pub hi: f64,
}

impl Line {
    /// How far the line can move and still pass through every bracket, ns (negative: no line
    /// does).
    pub fn slack_ns(&self) -> f64 {
        self.hi - self.lo
    }
    /// The offset in the middle of the feasible ones, ns at `x0`.
    pub fn offset(&self) -> f64 {
        (self.lo + self.hi) / 2.0
    }
    /// ns the line gives for a counter value.
    pub fn ns_at(&self, cyc: u64) -> f64 {
        self.offset() + self.slope * (cyc as f64 - self.x0 as f64) + self.y0 as f64
    }
    /// The counter value at which the line reaches `ns`.
    pub fn cycles_at(&self, ns: u64) -> f64 {
        (ns as f64 - self.y0 as f64 - self.offset()) / self.slope + self.x0 as f64
    }
}

fn xy(b: &Stamp, x0: u64, y0: u64) -> (f64, f64, f64) {
    (
        b.before.wrapping_sub(x0) as f64,
        b.after.wrapping_sub(x0) as f64,
        b.kernel_ns.wrapping_sub(y0) as f64,
    )
}

fn offsets(bs: &[Stamp], x0: u64, y0: u64, slope: f64) -> (f64, f64) {
    let mut lo = f64::NEG_INFINITY;
    let mut hi = f64::INFINITY;
    for b in bs {
        let (xb, xa, y) = xy(b, x0, y0);
        // before <= (y - off)/slope <= after  <=>  y - slope*after <= off <= y - slope*before
        lo = lo.max(y - slope * xa);
        hi = hi.min(y - slope * xb);
    }
    (lo, hi)
}

/// Least squares of kernel_ns on the bracket midpoints.
pub fn least_squares_slope(bs: &[Stamp]) -> f64 {
    let x0 = bs[0].before;
    let y0 = bs[0].kernel_ns;
    let n = bs.len() as f64;
    let (mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0);
    for b in bs {
        let (xb, xa, y) = xy(b, x0, y0);
        let x = (xb + xa) / 2.0;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    (n * sxy - sx * sy) / (n * sxx - sx * sx)
}

/// The line with the most slack: slack is concave in the slope, so a ternary search around
/// the least-squares slope finds its maximum.
pub fn best_line(bs: &[Stamp]) -> Line {
    let x0 = bs[0].before;
    let y0 = bs[0].kernel_ns;
    let s0 = least_squares_slope(bs);
    let slack = |s: f64| {
        let (lo, hi) = offsets(bs, x0, y0, s);
        hi - lo
    };
    let (mut a, mut b) = (s0 * (1.0 - 1e-4), s0 * (1.0 + 1e-4));
    for _ in 0..200 {
        let m1 = a + (b - a) / 3.0;
        let m2 = b - (b - a) / 3.0;
        if slack(m1) < slack(m2) {
            a = m1;
        } else {
            b = m2;
        }
    }
    let slope = (a + b) / 2.0;
    let (lo, hi) = offsets(bs, x0, y0, slope);
    Line {
        x0,
        y0,
        slope,
        lo,
        hi,
    }
}

/// The `p` quantile (0..=1) of `sorted` (NaN if empty).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// `v`, sorted (NaNs last).
pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}
