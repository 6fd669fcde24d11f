//! What to do: the recording, OUT, where the sidecars and dumps may be, the clock data.

use std::path::PathBuf;

/// What [`inject`](crate::inject) is asked to do.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InjectOptions {
    /// The recording, never modified.
    pub input: PathBuf,
    /// Where the recording with its TIME_CONV goes.
    pub output: PathBuf,
    /// Directories to look for the dumps' time conversion records (`jit-<pid>.dump.timeconv`)
    /// instead of each dump's own, and for a dump that is no longer where the recording names
    /// it.
    pub dump_dirs: Vec<PathBuf>,
    /// Whether to add HEADER_CLOCK_DATA, and from which snapshot.
    pub clock_data: ClockDataSource,
    /// Snapshots taken during the recording (`perfclock record`): the `CLOCK_MONOTONIC`
    /// pairings of other writers' dumps. Empty: one is taken when needed, for a recording of
    /// this boot.
    pub pairings: Vec<perfclock::ClockSnapshot>,
    /// The dumps' copies go into a new private `NAME.jitted-XXXXXX` beside this path (the final
    /// output's: `perfclock record` writes OUT through a temporary file elsewhere).
    pub copies_beside: PathBuf,
    /// Give perf inject every code load, not only those a sample or call chain touched.
    pub all_jit_code: bool,
    /// Dumps opened while their processes lived ([`crate::Watch`]): read through these
    /// instead of their paths.
    pub held: Option<std::sync::Arc<crate::HeldDumps>>,
}

impl InjectOptions {
    /// `input` to `output`, the copies beside `output`, no clock data, sidecars beside their
    /// dumps, only sampled code.
    pub fn new(input: PathBuf, output: PathBuf) -> Self {
        InjectOptions {
            input,
            copies_beside: output.clone(),
            output,
            dump_dirs: Vec::new(),
            clock_data: ClockDataSource::None,
            pairings: Vec::new(),
            all_jit_code: false,
            held: None,
        }
    }
}

/// Where HEADER_CLOCK_DATA's pairing of wall-clock and perf-clock time comes from.
#[derive(Debug, Clone)]
pub enum ClockDataSource {
    /// No HEADER_CLOCK_DATA.
    None,
    /// A snapshot taken now, for a recording made earlier on this boot (checked against IN's
    /// modification time for a CLOCK_REALTIME step since: [`crate::clock_data`]).
    Now,
    /// A snapshot taken during the recording (`perfclock record`, which checks for a step
    /// itself).
    Recorded(perfclock::ClockSnapshot),
}
