//! perf events: the attributes perfclock opens them with ([`EventAttr`]), the open event
//! ([`PerfEvent`]) and its mappings, the ring's reader ([`RingReader`]), and [`record`], a pure
//! decoder of the records perfclock reads (over byte slices, fuzzed).

mod attr;
mod event;
pub mod record;
mod ring;

pub use attr::{sample, EventAttr};
pub use event::{remap_page_after_fork, PerfEvent};
pub use ring::{DrainStats, RingReader};
