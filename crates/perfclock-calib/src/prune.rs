//! Pruning the constraint history before a fit: any subset of the constraints gives a polygon
//! at least as large (see [`crate::fit`]), so pruning never makes the bound dishonest; it keeps
//! the refiner's fit cheap on a long history. Two ways: the tightest per slice of counter time
//! ([`prune`]), and the convex hulls that alone can bind ([`prune_hull`], lossless).

use crate::fit::{signed_diff, Constraint};

/// Keep, in each of `buckets` equal slices of counter time, the `keep` tightest constraints on
/// each side as judged at slope `slope`. Any subset gives a polygon at least as large, so
/// pruning never makes the bound dishonest; it keeps the fit cheap on a long history. Linear
/// time; `keep == 0` or `buckets == 0` keeps everything.
pub fn prune(
    constraints: &[Constraint],
    slope: f64,
    buckets: usize,
    keep: usize,
) -> Vec<Constraint> {
    let mut out = Vec::new();
    prune_into(
        constraints,
        slope,
        buckets,
        keep,
        &mut out,
        &mut PruneScratch::default(),
    );
    out
}

/// Working storage of [`prune_into`], kept by the refiner between rounds.
#[derive(Debug, Default)]
pub(crate) struct PruneScratch {
    /// The constraints grouped by slice, each slice in input order.
    sorted: Vec<Constraint>,
    /// Where each slice starts in `sorted` (one more entry than slices).
    starts: Vec<usize>,
}

impl PruneScratch {
    /// Room for `constraints` brackets in `buckets` slices.
    pub(crate) fn with_capacity(constraints: usize, buckets: usize) -> Self {
        Self {
            sorted: Vec::with_capacity(constraints),
            starts: Vec::with_capacity(buckets + 1),
        }
    }
}

/// [`prune`], appending to `out` and working in `scratch`: no allocation when their
/// capacities suffice (the input's length, and `buckets + 1` slice starts).
pub(crate) fn prune_into(
    constraints: &[Constraint],
    slope: f64,
    buckets: usize,
    keep: usize,
    out: &mut Vec<Constraint>,
    scratch: &mut PruneScratch,
) {
    if constraints.len() <= buckets.saturating_mul(keep).saturating_mul(2)
        || buckets == 0
        || keep == 0
    {
        out.extend_from_slice(constraints);
        return;
    }
    let first = constraints.iter().map(|c| c.before).min().unwrap_or(0);
    let last = constraints.iter().map(|c| c.after).max().unwrap_or(0);
    let width = (last.saturating_sub(first) / buckets as u64).max(1);
    let bucket_of =
        |c: &Constraint| ((c.before.saturating_sub(first) / width) as usize).min(buckets - 1);
    // A counting sort by slice: stable, so each slice holds its constraints in input order.
    let starts = &mut scratch.starts;
    starts.clear();
    starts.resize(buckets + 1, 0);
    for c in constraints {
        starts[bucket_of(c) + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let sorted = &mut scratch.sorted;
    sorted.clear();
    sorted.resize(
        constraints.len(),
        Constraint {
            before: 0,
            after: 0,
            kernel_ns: 0,
        },
    );
    // `starts[b]` walks through slice b as it fills, ending at slice b + 1's start.
    for c in constraints {
        let b = bucket_of(c);
        sorted[starts[b]] = *c;
        starts[b] += 1;
    }
    let mut begin = 0;
    for &end in &starts[..buckets] {
        let slice = &mut sorted[begin..end];
        begin = end;
        if slice.len() <= keep * 2 {
            out.extend_from_slice(slice);
            continue;
        }
        // Tight on the lo side: large kernel_ns - s * after. Tight on the hi side: small
        // kernel_ns - s * before. Relative to the slice's first bracket to keep precision.
        let base = slice[0];
        let lo_key = |c: &Constraint| {
            signed_diff(c.kernel_ns, base.kernel_ns) - slope * signed_diff(c.after, base.before)
        };
        let hi_key = |c: &Constraint| {
            signed_diff(c.kernel_ns, base.kernel_ns) - slope * signed_diff(c.before, base.before)
        };
        // Linear-time selection: the `keep` largest lo keys first, then the `keep` smallest hi
        // keys among the rest.
        slice.select_nth_unstable_by(keep - 1, |a, b| lo_key(b).total_cmp(&lo_key(a)));
        out.extend_from_slice(&slice[..keep]);
        let rest = &mut slice[keep..];
        rest.select_nth_unstable_by(keep - 1, |a, b| hi_key(a).total_cmp(&hi_key(b)));
        out.extend_from_slice(&rest[..keep]);
    }
}

/// `(b - a) x (c - a)` for integer points, exact in `i128`: > 0 when `a, b, c` turn left.
fn cross(a: (u64, u64), b: (u64, u64), c: (u64, u64)) -> i128 {
    let d = |p: u64, q: u64| i128::from(p) - i128::from(q);
    d(b.0, a.0) * d(c.1, a.1) - d(b.1, a.1) * d(c.0, a.0)
}

/// The upper (`upper = true`) or lower convex hull of `points` (sorted by x then y), by
/// Andrew's monotone chain, written to `chain` (cleared first).
fn hull(points: &[(u64, u64, usize)], upper: bool, chain: &mut Vec<(u64, u64, usize)>) {
    let h = chain;
    h.clear();
    for &p in points {
        while h.len() >= 2 {
            let turn = cross(
                (h[h.len() - 2].0, h[h.len() - 2].1),
                (h[h.len() - 1].0, h[h.len() - 1].1),
                (p.0, p.1),
            );
            // Upper hull: drop the middle point unless the chain turns right (clockwise).
            let drop = if upper { turn >= 0 } else { turn <= 0 };
            if drop {
                h.pop();
            } else {
                break;
            }
        }
        h.push(p);
    }
}

/// Keep only the constraints that can bind, losslessly: `lo(s) = max_i (k_i - s * after_i)` is
/// attained, for every `s`, at a vertex of the upper convex hull of the points
/// `(after_i, kernel_ns_i)`, and `hi(s) = min_i (k_i - s * before_i)` at a vertex of the lower
/// hull of `(before_i, kernel_ns_i)`. `layers` hull layers are kept on each side (peeling), so
/// that dropping up to `layers - 1` binding constraints as outliers still sees the next ones.
/// The result is a few dozen constraints whatever the history length, so refits stay cheap.
pub fn prune_hull(constraints: &[Constraint], layers: usize) -> Vec<Constraint> {
    let mut out = Vec::new();
    prune_hull_into(constraints, layers, &mut out, &mut HullScratch::default());
    out
}

/// Working storage of [`prune_hull_into`], kept by the refiner between rounds.
#[derive(Debug, Default)]
pub(crate) struct HullScratch {
    keep: Vec<bool>,
    points: Vec<(u64, u64, usize)>,
    chain: Vec<(u64, u64, usize)>,
}

impl HullScratch {
    /// Room for `constraints` brackets.
    pub(crate) fn with_capacity(constraints: usize) -> Self {
        Self {
            keep: Vec::with_capacity(constraints),
            points: Vec::with_capacity(constraints),
            chain: Vec::with_capacity(constraints),
        }
    }
}

/// [`prune_hull`], appending to `out` (in input order) and working in `scratch`: no allocation
/// when their capacities hold the input's length.
pub(crate) fn prune_hull_into(
    constraints: &[Constraint],
    layers: usize,
    out: &mut Vec<Constraint>,
    scratch: &mut HullScratch,
) {
    let HullScratch {
        keep,
        points: pts,
        chain,
    } = scratch;
    keep.clear();
    keep.resize(constraints.len(), false);
    for upper in [true, false] {
        pts.clear();
        pts.extend(
            constraints
                .iter()
                .enumerate()
                .filter(|(_, c)| c.after >= c.before)
                .map(|(i, c)| (if upper { c.after } else { c.before }, c.kernel_ns, i)),
        );
        pts.sort_unstable();
        // Equal x: only the best y can bind (largest for upper, smallest for lower).
        pts.dedup_by(|next, prev| {
            if next.0 != prev.0 {
                return false;
            }
            if upper && next.1 > prev.1 {
                *prev = *next;
            }
            true
        });
        for _ in 0..layers {
            if pts.is_empty() {
                break;
            }
            hull(pts, upper, chain);
            for p in chain.iter() {
                keep[p.2] = true;
            }
            pts.retain(|p| !chain.iter().any(|h| h.2 == p.2));
        }
    }
    out.extend(
        constraints
            .iter()
            .zip(keep.iter())
            .filter_map(|(c, &k)| k.then_some(*c)),
    );
}
