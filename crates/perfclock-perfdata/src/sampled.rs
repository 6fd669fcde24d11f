//! The code addresses a recording's samples landed in, by process: every sample's IP and every
//! address of its call chain, read with linux-perf-data's reader. What `perf inject --jit` needs
//! to write an image for is the JIT code these fall in ([`SampledAddresses::any_in`]).
//!
//! That reader sizes its allocations by counts the file claims (feature sections, the legacy
//! event-types section), and an impossible size aborts the process (found by fuzzing). So the
//! file must first pass this crate's own layout checks ([`crate::read_layout`]: attributes and
//! sections inside the file, counts bounded), and the reader is shown the header with its
//! feature bits and event-types section cleared ([`HeaderMasked`]): it needs neither to read
//! samples. It also sizes a buffer by the AUX data an AUXTRACE record claims, so every such
//! claim is checked against the data section first.

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};

use linux_perf_data::linux_perf_event_reader::{
    Endianness, EventRecord, RawEventRecord, ReadFormat, RecordType, SampleFormat,
};
use linux_perf_data::{PerfFileReader, PerfFileRecord};

use crate::error::{PerfDataError, RecordsError};
use crate::header::at;

/// Call-chain entries from here up are `PERF_CONTEXT_*` markers (the kernel's `perf_event.h`:
/// `PERF_CONTEXT_MAX` is `(u64)-4095`), not addresses.
const PERF_CONTEXT_MAX: u64 = u64::MAX - 4094;

/// The sampled code addresses of each process, sorted, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SampledAddresses {
    by_pid: HashMap<u32, Vec<u64>>,
    /// Each sample's own IP (its leaf), by process, sorted, repeats kept.
    leaves: HashMap<u32, Vec<u64>>,
    samples: u64,
    user_stacks: bool,
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

    /// How many samples of process `pid` have their IP inside one of `ranges` (each `(start,
    /// size)`, the end excluded; overlapping ranges count a sample once).
    pub fn samples_in(&self, pid: u32, ranges: &[(u64, u64)]) -> u64 {
        let Some(leaves) = self.leaves.get(&pid) else {
            return 0;
        };
        let mut ranges: Vec<(u64, u64)> = ranges
            .iter()
            .map(|&(start, size)| (start, start.saturating_add(size)))
            .collect();
        ranges.sort_unstable();
        let mut counted = 0;
        let mut covered_to = 0;
        for (start, end) in ranges {
            let from = start.max(covered_to);
            if from < end {
                let first = leaves.partition_point(|&ip| ip < from);
                let past = leaves.partition_point(|&ip| ip < end);
                counted += (past - first) as u64;
                covered_to = end;
            }
        }
        counted
    }

    /// Whether process `pid` has a sample.
    pub fn has_process(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid)
    }

    /// The pids of the processes with a sample, in no order.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_pid.keys().copied()
    }

    /// How many samples were read.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Whether samples carry a copy of the user stack (`--call-graph dwarf`): perf unwinds
    /// those only when it reports, so the frames it will reach are not among the addresses.
    pub fn has_user_stacks(&self) -> bool {
        self.user_stacks
    }

    /// How many processes have samples.
    pub fn processes(&self) -> usize {
        self.by_pid.len()
    }
}

/// Every sample's addresses in the recording `reader` holds.
///
/// # Errors
/// [`RecordsError::Unreadable`] where linux-perf-data cannot read the recording or a record
/// (a compressed one without its `zstd` feature among them).
pub fn sampled_addresses<R: Read + Seek>(mut reader: R) -> Result<SampledAddresses, PerfDataError> {
    let layout = crate::read_layout(&mut reader)?;
    crate::scan::check_aux_data(&mut reader, &layout)?;
    reader.seek(SeekFrom::Start(0))?;
    let unreadable = |error: &dyn std::fmt::Display| RecordsError::Unreadable(error.to_string());
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(HeaderMasked::new(reader)).map_err(|e| unreadable(&e))?;
    let mut sampled = SampledAddresses::default();
    while let Some(record) = record_iter
        .next_record(&mut perf_file)
        .map_err(|e| unreadable(&e))?
    {
        let PerfFileRecord::EventRecord { record, .. } = record else {
            continue;
        };
        // Only samples are parsed: linux-perf-event-reader asserts on fields of other records
        // (an MMAP2 build id longer than 20 bytes panics it; found by the perfdata fuzz target),
        // and none of them holds a sampled address.
        if record.record_type != RecordType::SAMPLE || !callchain_length_fits(&record) {
            continue;
        }
        let Ok(EventRecord::Sample(sample)) = record.parse() else {
            continue;
        };
        sampled.samples += 1;
        sampled.user_stacks |= sample
            .user_stack
            .is_some_and(|(stack, _)| !stack.is_empty());
        let Some(pid) = sample.pid.and_then(|pid| u32::try_from(pid).ok()) else {
            continue;
        };
        sampled.leaves.entry(pid).or_default().extend(sample.ip);
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
    for leaves in sampled.leaves.values_mut() {
        leaves.sort_unstable();
    }
    Ok(sampled)
}

/// Whether linux-perf-event-reader can parse `record` without multiplying a sample's claimed
/// call-chain length by 8 past `usize` (it does so unchecked: a panic with overflow checks, a
/// wrapped length without; found by the perfdata fuzz target). Walks the fields before the call
/// chain as that crate reads them; a record too short for them is one it refuses on its own.
fn callchain_length_fits(record: &RawEventRecord<'_>) -> bool {
    let info = &record.parse_info;
    let format = info.sample_format;
    if !format.contains(SampleFormat::CALLCHAIN) {
        return true;
    }
    let bytes = record.data.as_slice();
    let word = |offset: u64| -> Option<u64> {
        let at = usize::try_from(offset).ok()?;
        let raw: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(match info.endian {
            Endianness::LittleEndian => u64::from_le_bytes(raw),
            Endianness::BigEndian => u64::from_be_bytes(raw),
        })
    };
    let words_before = [
        SampleFormat::IDENTIFIER,
        SampleFormat::IP,
        SampleFormat::TID,
        SampleFormat::TIME,
        SampleFormat::ADDR,
        SampleFormat::ID,
        SampleFormat::STREAM_ID,
        SampleFormat::CPU,
        SampleFormat::PERIOD,
    ]
    .iter()
    .filter(|flag| format.contains(**flag))
    .count() as u64;
    let mut offset = 8 * words_before;
    if format.contains(SampleFormat::READ) {
        let read = info.read_format;
        let times = u64::from(read.contains(ReadFormat::TOTAL_TIME_ENABLED))
            + u64::from(read.contains(ReadFormat::TOTAL_TIME_RUNNING));
        let id = u64::from(read.contains(ReadFormat::ID));
        // The crate's reading, whatever the kernel's layout: one value with GROUP, a count of
        // values otherwise.
        let read_words = if read.contains(ReadFormat::GROUP) {
            Some(1 + times + id)
        } else {
            word(offset).and_then(|count| count.checked_mul(1 + id)?.checked_add(1 + times))
        };
        match read_words.and_then(|words| offset.checked_add(words.checked_mul(8)?)) {
            Some(end) => offset = end,
            None => return true,
        }
    }
    word(offset)
        .is_none_or(|length| usize::try_from(length).is_ok_and(|n| n.checked_mul(8).is_some()))
}

/// A perf.data as linux-perf-data is shown it: the header's event-types section and feature
/// bits read as zeros (see the module docs), every other byte as it is.
struct HeaderMasked<R> {
    inner: R,
    position: u64,
}

impl<R> HeaderMasked<R> {
    /// The header's bytes read as zeros: the event-types section's offset and size, and the
    /// 256 feature bits.
    const MASKED: [(usize, usize); 2] = [(at::EVENT_TYPES, 16), (at::FEATURES, 32)];

    fn new(inner: R) -> Self {
        HeaderMasked { inner, position: 0 }
    }
}

impl<R: Read> Read for HeaderMasked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        for (start, len) in Self::MASKED {
            // The masked range, as indices of this read's bytes (empty past the header).
            let from = (start as u64)
                .saturating_sub(self.position)
                .min(read as u64) as usize;
            let to = ((start + len) as u64)
                .saturating_sub(self.position)
                .min(read as u64) as usize;
            buf[from..to].fill(0);
        }
        self.position += read as u64;
        Ok(read)
    }
}

impl<R: Seek> Seek for HeaderMasked<R> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.position = self.inner.seek(to)?;
        Ok(self.position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_in_ranges_count_each_sample_once() {
        let mut sampled = SampledAddresses::default();
        sampled
            .leaves
            .insert(7, vec![0x100, 0x100, 0x150, 0x1ff, 0x200, 0x300]);
        assert_eq!(sampled.samples_in(7, &[(0x100, 0x100)]), 4);
        // Overlapping and nested ranges: each sample once.
        assert_eq!(
            sampled.samples_in(7, &[(0x180, 0x100), (0x100, 0x60), (0x140, 0x20)]),
            5
        );
        assert_eq!(sampled.samples_in(7, &[(0x301, 0x10)]), 0);
        assert_eq!(sampled.samples_in(8, &[(0, u64::MAX)]), 0);
    }
}
