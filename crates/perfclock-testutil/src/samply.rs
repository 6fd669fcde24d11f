//! samply 0.13's reading of a marker line (`process_marker_span_line`), for the markers crate's
//! unit tests (`src/line.rs`) and hostile tests alike.

/// `start end name` as samply parses it, `None` where samply stops reading the file.
pub fn parse_like_samply(line: &str) -> Option<(u64, u64, &str)> {
    let mut split = line.splitn(3, ' ');
    let start = split.next()?;
    let end = split.next()?;
    let name = split.next()?;
    if name.is_empty() {
        return None;
    }
    Some((start.parse().ok()?, end.parse().ok()?, name))
}
