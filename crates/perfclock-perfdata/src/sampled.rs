//! The code addresses a recording's samples landed in, by process: every sample's IP and every
//! address of its call chain, read with linux-perf-data's reader. What `perf inject --jit` needs
//! to write an image for is the JIT code these fall in ([`SampledAddresses::any_in`]).

use std::collections::HashMap;
use std::io::{Read, Seek};

use linux_perf_data::linux_perf_event_reader::EventRecord;
use linux_perf_data::{PerfFileReader, PerfFileRecord};

use crate::error::PerfDataError;

/// Call-chain entries from here up are `PERF_CONTEXT_*` markers (the kernel's `perf_event.h`:
/// `PERF_CONTEXT_MAX` is `(u64)-4095`), not addresses.
const PERF_CONTEXT_MAX: u64 = u64::MAX - 4094;

/// The sampled code addresses of each process, sorted, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SampledAddresses {
    by_pid: HashMap<u32, Vec<u64>>,
    samples: u64,
}

impl SampledAddresses {
    /// Whether a sample of process `pid` was in `[start, start + size]`: the end included, as a
    /// caller's return address lies just past its call, which may end the code.
    pub fn any_in(&self, pid: u32, start: u64, size: u64) -> bool {
        let Some(addresses) = self.by_pid.get(&pid) else {
            return false;
        };
        let first = addresses.partition_point(|&address| address < start);
        addresses
            .get(first)
            .is_some_and(|&address| address <= start.saturating_add(size))
    }

    /// Whether process `pid` has a sample.
    pub fn has_process(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid)
    }

    /// How many samples were read.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// How many processes have samples.
    pub fn processes(&self) -> usize {
        self.by_pid.len()
    }
}

/// Every sample's addresses in the recording `reader` holds.
///
/// # Errors
/// [`PerfDataError::Unreadable`] where linux-perf-data cannot read the recording or a record
/// (a compressed one without its `zstd` feature among them).
pub fn sampled_addresses<R: Read + Seek>(reader: R) -> Result<SampledAddresses, PerfDataError> {
    let unreadable = |error: &dyn std::fmt::Display| PerfDataError::Unreadable(error.to_string());
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(reader).map_err(|e| unreadable(&e))?;
    let mut sampled = SampledAddresses::default();
    while let Some(record) = record_iter
        .next_record(&mut perf_file)
        .map_err(|e| unreadable(&e))?
    {
        let PerfFileRecord::EventRecord { record, .. } = record else {
            continue;
        };
        let Ok(EventRecord::Sample(sample)) = record.parse() else {
            continue;
        };
        sampled.samples += 1;
        let Some(pid) = sample.pid.and_then(|pid| u32::try_from(pid).ok()) else {
            continue;
        };
        let addresses = sampled.by_pid.entry(pid).or_default();
        addresses.extend(sample.ip);
        if let Some(chain) = sample.callchain {
            addresses.extend(
                (0..chain.len())
                    .filter_map(|index| chain.get(index))
                    .filter(|&address| address < PERF_CONTEXT_MAX),
            );
        }
    }
    for addresses in sampled.by_pid.values_mut() {
        addresses.sort_unstable();
        addresses.dedup();
    }
    Ok(sampled)
}
