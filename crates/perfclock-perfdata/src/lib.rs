//! perf.data files (file mode, little-endian) read and patched: the layout checked, the records
//! scanned in one streaming pass, and records and feature sections inserted in one streaming
//! copy, for tools that complete what `perf record` could not write:
//!
//! - `PERF_RECORD_TIME_CONV` ([`time_conv_record`]), which `perf inject --jit` needs for
//!   jitdumps with counter timestamps, where the kernel withholds the conversion;
//! - `HEADER_CLOCK_DATA` ([`ClockData`]), which `perf script -F+tod` needs for wall-clock time.
//!
//! ```no_run
//! use std::fs::File;
//! use perfclock_perfdata::{read_layout, scan_records, ClockData, Feature, OutputFile, Patch};
//!
//! let mut input = File::open("perf.data")?;
//! let layout = read_layout(&mut input)?;
//! let scan = scan_records(&mut input, &layout)?;
//! println!("{} records, jitdumps: {:?}", scan.records, scan.jit_dumps);
//! let mut patch = Patch::new(&layout);
//! patch.add_feature(Feature::CLOCK_DATA, ClockData::perf_clock(1_700_000_000_000_000_000, 5_000).to_bytes().to_vec())?;
//! let mut out = OutputFile::create("perf.tod.data".as_ref(), 0o644)?;
//! patch.write(&mut input, &mut std::io::BufWriter::new(out.file()))?;
//! out.commit()?;
//! # Ok::<(), perfclock_perfdata::PerfDataError>(())
//! ```
//!
//! The scan is by hand rather than through `linux-perf-data`, because that crate panics or
//! aborts on some malformed inputs (an MMAP2 build-id length above 20, an attribute size of 0,
//! an `EVENT_DESC` count it pre-allocates) and reads every feature section into memory first;
//! this scan needs only the 8-byte record headers and a few bodies. Every hostile input is an
//! error, never a panic: the `perfdata` fuzz target runs scan and patch.
#![deny(unsafe_code)]

mod bounds;
mod build_id;
mod clock_data;
mod decompress;
mod error;
mod features;
mod header;
mod jitdump_name;
mod layout;
mod output;
mod patch;
mod record;
mod sampled;
mod scan;
mod section;
#[cfg(feature = "synth")]
pub mod synth;
mod time_conv;

pub use bounds::{
    FILE_HEADER_SIZE, MAX_ATTRS, MAX_JIT_DUMPS, MAX_JIT_DUMP_NAME_BYTES, MAX_MARKER_PLACES,
};
pub use build_id::{elf_build_id, maps_of, set_map_build_id, MapAt, MAX_BUILD_ID_BYTES};
pub use clock_data::{ClockData, WallClockPair, MAX_REALTIME_SLEW_PPM, PERF_CLOCK_CLOCKID};
pub use error::{FormatError, LayoutError, PatchError, PerfDataError, RecordsError};
pub use features::{Feature, FeatureSet};
pub use header::FileHeader;
pub use jitdump_name::{jitdump_file_name, jitdump_pid};
pub use layout::{read_layout, Layout};
pub use output::{check_output_path, OutputFile, TEMP_PREFIX};
pub use patch::Patch;
pub use record::{with_file_name, RecordHeader, RecordType, RECORD_HEADER_SIZE};
pub use sampled::{sampled_addresses, SampledAddresses};
pub use scan::{scan_records, JitDumpMap, Scan};
pub use section::{Section, SECTION_SIZE};
pub use time_conv::{time_conv_record, TIME_CONV_RECORD_SIZE};
