//! Records inside `PERF_RECORD_COMPRESSED`/`COMPRESSED2` (`perf record -z`): one zstd stream
//! across all of them, as perf's `perf_session__process_compressed_event` reads them; a frame,
//! and a record, may continue in the next compressed record. Without the `zstd` feature a
//! compressed record is [`RecordsError::CompressedUnsupported`].

use crate::error::{PerfDataError, RecordsError};
use crate::scan::Inspector;

#[cfg(feature = "zstd")]
pub(crate) use with_zstd::Decompressed;

#[cfg(not(feature = "zstd"))]
pub(crate) use without_zstd::Decompressed;

#[cfg(feature = "zstd")]
mod with_zstd {
    use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};

    use super::{Inspector, PerfDataError, RecordsError};
    use crate::record::{RecordHeader, RECORD_HEADER_SIZE};

    /// How much is decompressed per call into the decoder.
    const CHUNK: usize = 1 << 16;

    /// The decoder, and the tail of a record cut by a compressed record's end.
    pub(crate) struct Decompressed {
        decoder: Decoder<'static>,
        /// Decompressed bytes not yet a whole record (less than one record, at most 64 KiB,
        /// after each chunk is parsed).
        pending: Vec<u8>,
        chunk: Vec<u8>,
    }

    impl Decompressed {
        pub(crate) fn new(offset: u64) -> Result<Self, PerfDataError> {
            Ok(Self {
                decoder: Decoder::new().map_err(|error| RecordsError::Compressed {
                    offset,
                    reason: format!("no zstd decompressor: {error}"),
                })?,
                pending: Vec::new(),
                chunk: vec![0; CHUNK],
            })
        }

        /// Decompresses `compressed` (the record at `offset`) and inspects every whole record.
        pub(crate) fn feed(
            &mut self,
            inspector: &mut Inspector,
            compressed: &[u8],
            offset: u64,
        ) -> Result<(), PerfDataError> {
            let corrupt = |reason: String| {
                PerfDataError::Records(RecordsError::Compressed { offset, reason })
            };
            let mut input = InBuffer::around(compressed);
            loop {
                let mut output = OutBuffer::around(&mut self.chunk[..]);
                self.decoder
                    .run(&mut input, &mut output)
                    .map_err(|error| corrupt(format!("zstd: {error}")))?;
                let produced = output.pos();
                self.pending.extend_from_slice(&self.chunk[..produced]);
                let mut at = 0;
                while self.pending.len() - at >= RECORD_HEADER_SIZE {
                    let mut header = [0u8; RECORD_HEADER_SIZE];
                    header.copy_from_slice(&self.pending[at..at + RECORD_HEADER_SIZE]);
                    let header = RecordHeader::parse(header);
                    let size = usize::from(header.size);
                    if size < RECORD_HEADER_SIZE {
                        return Err(corrupt(format!(
                            "a record inside claims {size} bytes, less than its own header"
                        )));
                    }
                    if self.pending.len() - at < size {
                        break;
                    }
                    let markers = inspector.scan.jit_dumps.len();
                    let body = &self.pending[at + RECORD_HEADER_SIZE..at + size];
                    inspector.inspect(header.kind, body, offset, true)?;
                    inspector.scan.compressed_markers |= inspector.scan.jit_dumps.len() > markers;
                    at += size;
                }
                self.pending.drain(..at);
                // Done when the input is used up and the last run did not fill the chunk (a
                // full chunk may mean more output is buffered in the decoder).
                if input.pos() == compressed.len() && produced < self.chunk.len() {
                    return Ok(());
                }
            }
        }

        /// The stream must end between records.
        pub(crate) fn finish(self, offset: u64) -> Result<(), PerfDataError> {
            if self.pending.is_empty() {
                Ok(())
            } else {
                Err(RecordsError::Compressed {
                    offset,
                    reason: "the compressed stream ends inside a record".to_owned(),
                }
                .into())
            }
        }
    }
}

#[cfg(not(feature = "zstd"))]
mod without_zstd {
    use super::{Inspector, PerfDataError, RecordsError};

    /// No decoder: any compressed record is refused.
    pub(crate) enum Decompressed {}

    impl Decompressed {
        pub(crate) fn new(offset: u64) -> Result<Self, PerfDataError> {
            Err(RecordsError::CompressedUnsupported { offset }.into())
        }

        pub(crate) fn feed(
            &mut self,
            _: &mut Inspector,
            _: &[u8],
            _: u64,
        ) -> Result<(), PerfDataError> {
            match *self {}
        }

        pub(crate) fn finish(self, _: u64) -> Result<(), PerfDataError> {
            match self {}
        }
    }
}
