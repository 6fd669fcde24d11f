//! Why a recording could not be read or drawn.

use std::{fmt, io};

/// Why `perf script`'s output could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum ParseError {
    /// A line of the structure run that is neither part of a sample's header nor a frame.
    Line {
        /// Its number (from 1).
        number: usize,
        /// Its text.
        text: String,
    },
    /// The names run does not hold the structure run's next sample or frame.
    NamesDisagree {
        /// The sample (from 1) where the two part.
        sample: usize,
        /// How many samples the structure run holds.
        samples: usize,
    },
    /// Reading the output failed.
    Io(io::Error),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Line { number, text } => write!(
                f,
                "perf script's line {number} is neither part of a sample's header nor a frame: \
                 {text:?} (a perf whose output perfclock does not know?)"
            ),
            ParseError::NamesDisagree { sample, samples } => write!(
                f,
                "perf script's names do not follow its samples at sample {sample} of {samples} \
                 (did the recording change between the two runs?)"
            ),
            ParseError::Io(_) => f.write_str("cannot read perf script's output"),
        }
    }
}

impl std::error::Error for ParseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ParseError::Io(error) => Some(error),
            ParseError::Line { .. } | ParseError::NamesDisagree { .. } => None,
        }
    }
}

/// Why no flame graph was written.
#[derive(Debug)]
#[non_exhaustive]
pub enum FlameGraphError {
    /// There are no samples to draw.
    NoSamples,
    /// Writing the SVG failed.
    Write(io::Error),
}

impl fmt::Display for FlameGraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlameGraphError::NoSamples => f.write_str(
                "the recording has no samples to draw (did the workload run long enough, or \
                 perf record sample the event?)",
            ),
            FlameGraphError::Write(_) => f.write_str("cannot write the flame graph's SVG"),
        }
    }
}

impl std::error::Error for FlameGraphError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FlameGraphError::Write(error) => Some(error),
            FlameGraphError::NoSamples => None,
        }
    }
}
