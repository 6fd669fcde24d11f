//! What a perf recording turns into (`perfclock report`): an interactive flame graph that
//! opens offline in any browser ([`flamegraph`]) and a pprof profile that the fleet's profilers
//! ingest ([`pprof`]), both from the samples `perf script` symbolizes ([`samples`]): JIT frames
//! with the names `perf inject --jit` gave them, kernel frames told apart. perf's output is read
//! by its structure, so no thread or function name can forge a sample or stop the report.
//!
//! Around them: two recordings made comparable for a differential flame graph and a pprof pair
//! ([`compare`], [`flamegraph::write_diff_svg`]); the spans of perfclock's marker files given to
//! the samples inside them ([`markers`]); the source lines of JIT code from the jitdump's debug
//! info ([`jit_lines`]).
#![deny(unsafe_code)]

pub mod build_ids;
pub mod compare;
pub mod error;
pub mod flamegraph;
pub mod jit_lines;
pub mod markers;
pub mod pprof;
pub mod samples;

pub use error::{FlameGraphError, ParseError};
pub use samples::{
    read_structure, Frame, FrameKind, Sample, SourceLine, Structure, NAMES_ARGS, STRUCTURE_ARGS,
};
