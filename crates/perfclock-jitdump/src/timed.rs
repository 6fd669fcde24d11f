//! A jitdump of code loads whose times were taken elsewhere: what a perf map (`START SIZE name`
//! lines, no time) becomes once each line was stamped with the counter when it appeared. The
//! dump is in the arch form (counter timestamps, converted by the recording's TIME_CONV); each
//! load's code is zeros of its size (a perf map gives no code: perf needs the size and the name
//! to name a sample, and the bytes only to disassemble).

use std::io::{self, Write};
use std::path::Path;

use crate::record::{self, CodeLoad};
use crate::JitDumpError;

/// One code load at a known counter value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedLoad<'a> {
    /// The counter value from which the code was at its address (0: since before anything).
    pub counter: u64,
    /// The code's address.
    pub address: u64,
    /// Its size, bytes.
    pub size: u64,
    /// Its name, without NUL.
    pub name: &'a [u8],
}

/// The most bytes of zeros one load's code may be (a perf map line claiming more is not code).
pub const MAX_CODE_BYTES: u64 = 16 << 20;

/// Writes to `out` (the file `path`, named in errors) the dump of process `pid` holding
/// `loads`, in order, indexed from 0.
///
/// # Errors
/// [`JitDumpError::NameContainsNul`], [`JitDumpError::EmptyCode`] for a load of size 0,
/// [`JitDumpError::RecordTooLarge`] for one past [`MAX_CODE_BYTES`] (nothing of that load is
/// written), or the write's error.
pub fn write_timed_dump<'a>(
    out: &mut impl Write,
    path: &Path,
    pid: u32,
    loads: impl IntoIterator<Item = TimedLoad<'a>>,
) -> Result<(), JitDumpError> {
    let io_error = |source: io::Error| JitDumpError::Io {
        op: "write",
        path: path.to_owned(),
        source,
    };
    out.write_all(&record::header(pid, 0, record::FLAGS_ARCH_TIMESTAMP))
        .map_err(io_error)?;
    let zeros = [0u8; 64 * 1024];
    let mut record = Vec::new();
    for (index, load) in loads.into_iter().enumerate() {
        if load.size > MAX_CODE_BYTES {
            return Err(JitDumpError::RecordTooLarge {
                name_len: load.name.len(),
                code_len: usize::try_from(load.size).unwrap_or(usize::MAX),
            });
        }
        let code_len = load.size as usize;
        record.clear();
        record::code_load_head(
            &mut record,
            &CodeLoad {
                timestamp: load.counter,
                pid,
                tid: pid,
                addr: load.address,
                code_index: index as u64,
                name: load.name,
                code: &[],
            },
            code_len,
        )?;
        out.write_all(&record).map_err(io_error)?;
        let mut left = code_len;
        while left > 0 {
            let chunk = left.min(zeros.len());
            out.write_all(&zeros[..chunk]).map_err(io_error)?;
            left -= chunk;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foreign::{copy, CopyCounts, CopyPolicy, DumpReader, Record};

    /// Reads a dump back with the crate's reader: each load's (timestamp, code, name).
    fn loads(bytes: &[u8]) -> Vec<(u64, (u64, u64), Vec<u8>)> {
        let mut reader = DumpReader::new(bytes, bytes.len() as u64).unwrap();
        assert!(reader.has_arch_timestamps());
        assert_eq!(reader.pid(), 42);
        let mut out = Vec::new();
        while let Some(record) = reader.next_record().unwrap() {
            let name_at = 16 + 40;
            let name = record.bytes[name_at..]
                .split(|&b| b == 0)
                .next()
                .unwrap()
                .to_vec();
            out.push((record.timestamp, record.code.unwrap(), name));
        }
        out
    }

    #[test]
    fn loads_are_written_with_their_times_and_zeros_for_code() {
        let mut bytes = Vec::new();
        write_timed_dump(
            &mut bytes,
            Path::new("jit-42.dump"),
            42,
            [
                TimedLoad {
                    counter: 0,
                    address: 0x1000,
                    size: 0x40,
                    name: b"first",
                },
                TimedLoad {
                    counter: 12345,
                    address: 0x1000,
                    size: 70_000,
                    name: b"second",
                },
            ],
        )
        .unwrap();
        assert_eq!(
            loads(&bytes),
            [
                (0, (0x1000, 0x40), b"first".to_vec()),
                (12345, (0x1000, 70_000), b"second".to_vec())
            ]
        );
        // Copies keep them whole (the copy path perf inject's input takes).
        struct Every;
        impl CopyPolicy for Every {
            type Error = crate::ForeignDumpError;
            fn keep_load(&mut self, _: &Record<'_>) -> bool {
                true
            }
            fn timestamp(&mut self, record: &Record<'_>) -> Result<u64, Self::Error> {
                Ok(record.timestamp)
            }
            fn arch_timestamps(&self) -> bool {
                true
            }
            fn pid(&self) -> Option<u32> {
                None
            }
        }
        let mut out = Vec::new();
        let mut reader = DumpReader::new(&bytes[..], bytes.len() as u64).unwrap();
        assert_eq!(
            copy(&mut reader, &mut out, &mut Every).unwrap(),
            CopyCounts { loads: 2, kept: 2 }
        );
        assert_eq!(out, bytes);
    }

    #[test]
    fn what_perf_cannot_take_is_refused() {
        let refused = |size, name: &[u8]| {
            write_timed_dump(
                &mut Vec::new(),
                Path::new("jit-1.dump"),
                1,
                [TimedLoad {
                    counter: 1,
                    address: 1,
                    size,
                    name,
                }],
            )
        };
        assert!(matches!(refused(0, b"f"), Err(JitDumpError::EmptyCode)));
        assert!(matches!(
            refused(MAX_CODE_BYTES + 1, b"f"),
            Err(JitDumpError::RecordTooLarge { .. })
        ));
        assert!(matches!(
            refused(8, b"f\0g"),
            Err(JitDumpError::NameContainsNul { position: 1 })
        ));
    }
}
