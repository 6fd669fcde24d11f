//! Reading what `perf script` prints.

/// A `tod` field of `perf script -F tod` run with `TZ=UTC`, `2026-12-03 20:09:22.464579`, as ns
/// since the epoch (`None` if it is not one).
pub fn tod_ns(tod: &str) -> Option<u64> {
    let (date, time) = tod.split_once(' ')?;
    let mut ymd = date.split('-').map(|part| part.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let (hms, micros) = time.split_once('.')?;
    let mut hms = hms.split(':').map(|part| part.parse::<i64>().ok());
    let (h, min, s) = (hms.next()??, hms.next()??, hms.next()??);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3_600 + min * 60 + s;
    Some(secs as u64 * 1_000_000_000 + micros.parse::<u64>().ok()? * 1_000)
}
