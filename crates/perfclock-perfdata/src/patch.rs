//! Insertion of records at the start of the data section and of new feature sections, in one
//! streaming copy.
//!
//! Nothing in the ecosystem writes perf.data, so the insertion is done here against the layout
//! perf's `tools/perf/util/header.c` reads (`perf_file_header`, `perf_file_attr`, the feature
//! table right after the data). Inserting `n` bytes at a point moves every section that starts
//! at or after it by `n`: records go at the data's start (the data size grows), a new feature's
//! table entry goes into the table at its bit's place, and its contents at the end of the file.
//! [`read_layout`](crate::read_layout) has checked that no section straddles these points.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::error::{FormatError, LayoutError, PatchError, PerfDataError};
use crate::features::Feature;
use crate::header::at;
use crate::layout::Layout;
use crate::record::{with_file_name, RecordHeader, RECORD_HEADER_SIZE};
use crate::scan::JitDumpMap;
use crate::section::SECTION_SIZE;

/// Records and feature sections to insert into a file laid out as a [`Layout`].
#[derive(Debug, Clone)]
pub struct Patch<'a> {
    layout: &'a Layout,
    records: Vec<u8>,
    features: Vec<(Feature, Vec<u8>)>,
    /// Bytes of the data section replaced in place, by file offset. Ordered, so a new place is
    /// checked against its two neighbours only: a system-wide recording can disable tens of
    /// thousands of maps.
    overwrites: BTreeMap<u64, Vec<u8>>,
}

/// What is done at one position of the input.
#[derive(Debug)]
enum Edit<'a> {
    /// Bytes written before the input byte at this position.
    Insert(Cow<'a, [u8]>),
    /// The input's bytes at this position replaced by these (same length).
    Overwrite(Vec<u8>),
}

impl<'a> Patch<'a> {
    /// Nothing inserted yet.
    pub fn new(layout: &'a Layout) -> Self {
        Self {
            layout,
            records: Vec::new(),
            features: Vec::new(),
            overwrites: BTreeMap::new(),
        }
    }

    /// Inserts `record` (header included, its size field equal to its length, a multiple of 8)
    /// at the start of the data section, after records inserted before it.
    ///
    /// # Errors
    /// [`PatchError::BadInsertion`] if `record` is not one whole record.
    pub fn insert_record(&mut self, record: &[u8]) -> Result<&mut Self, PerfDataError> {
        let header = record
            .first_chunk::<RECORD_HEADER_SIZE>()
            .map(|header| RecordHeader::parse(*header));
        match header {
            Some(header) if usize::from(header.size) == record.len() && record.len() % 8 == 0 => {
                self.records.extend_from_slice(record);
                Ok(self)
            }
            _ => Err(PatchError::BadInsertion(format!(
                "a record to insert must be whole and 8-byte aligned ({} bytes given)",
                record.len()
            ))
            .into()),
        }
    }

    /// Replaces the input's bytes at file offset `at` by `bytes` (as many: nothing moves), inside
    /// the data section: a byte of a record's file name, for example.
    ///
    /// # Errors
    /// [`PatchError::BadInsertion`] if the bytes do not lie inside the data section or
    /// overlap bytes overwritten before.
    pub fn overwrite(&mut self, at: u64, bytes: &[u8]) -> Result<&mut Self, PerfDataError> {
        let data = self.layout.data;
        let end = at.checked_add(bytes.len() as u64);
        let inside = !bytes.is_empty()
            && at >= data.offset
            && end.is_some_and(|end| Some(end) <= data.end());
        // Evaluated only inside the data section, where neither end can overflow.
        let meets = |(other, old): (&u64, &Vec<u8>)| {
            at < other + old.len() as u64 && *other < at + bytes.len() as u64
        };
        let new_place = inside
            && !self.overwrites.range(..=at).next_back().is_some_and(meets)
            && !self.overwrites.range(at..).next().is_some_and(meets);
        if !new_place {
            return Err(PatchError::BadInsertion(format!(
                "{} bytes at offset {at} are not a new place inside the data section",
                bytes.len()
            ))
            .into());
        }
        self.overwrites.insert(at, bytes.to_vec());
        Ok(self)
    }

    /// Disables every map of `map`'s jitdump that lies outside compressed records: perf's
    /// `/jit-` becomes `/jiX-` (same length: nothing moves), so `perf inject --jit` passes them
    /// by.
    ///
    /// # Errors
    /// As [`Patch::overwrite`].
    pub fn disable_jitdump(&mut self, map: &JitDumpMap) -> Result<&mut Self, PerfDataError> {
        for &slash in &map.marker_slashes {
            self.overwrite(slash + 3, b"X")?;
        }
        Ok(self)
    }

    /// Moves the map record at file offset `at` (an MMAP or MMAP2 record, [`crate::maps_of`])
    /// to pid and tid 0, so perf no longer maps it into its process: what `perf inject --jit`
    /// does itself to a process's anonymous maps once it has read the process's jitdump, where
    /// perfclock hands perf the dump as pid 0's.
    ///
    /// # Errors
    /// As [`Patch::overwrite`].
    pub fn orphan_map(&mut self, at: u64) -> Result<&mut Self, PerfDataError> {
        self.overwrite(at + RECORD_HEADER_SIZE as u64, &[0; 8])
    }

    /// Points the recording at another file in place of `map`'s jitdump: a copy of its first
    /// map record naming `file_name` instead, its pid and tid replaced by `pid` if given, is
    /// inserted ([`Patch::insert_map_copy`]), and the original maps are disabled
    /// ([`Patch::disable_jitdump`]).
    ///
    /// # Errors
    /// [`PatchError::BadInsertion`] if the map's first record was inside a compressed
    /// record or is not a map record; a read error.
    pub fn redirect_jitdump<R: Read + Seek>(
        &mut self,
        input: &mut R,
        map: &JitDumpMap,
        file_name: &[u8],
        pid: Option<u32>,
    ) -> Result<&mut Self, PerfDataError> {
        let at = map.first_record.ok_or_else(|| {
            PatchError::BadInsertion(
                "the jitdump's map is inside a compressed record (perf record -z): record \
                 without -z"
                    .to_owned(),
            )
        })?;
        self.insert_map_copy(input, at, file_name, pid)?;
        self.disable_jitdump(map)
    }

    /// Inserts a copy of the map record (MMAP or MMAP2) at offset `at` of `input` (the file
    /// this patch's layout was read from), naming `file_name` instead, its pid and tid replaced
    /// by `pid` if given: a map of that file at the same time, in the same process.
    ///
    /// # Errors
    /// [`PatchError::BadInsertion`] if the record there is not a map record; a read error.
    pub fn insert_map_copy<R: Read + Seek>(
        &mut self,
        input: &mut R,
        at: u64,
        file_name: &[u8],
        pid: Option<u32>,
    ) -> Result<&mut Self, PerfDataError> {
        let mut header = [0u8; RECORD_HEADER_SIZE];
        input.seek(SeekFrom::Start(at))?;
        input.read_exact(&mut header)?;
        let mut record = vec![0u8; usize::from(RecordHeader::parse(header).size)];
        input.seek(SeekFrom::Start(at))?;
        input.read_exact(&mut record)?;
        let mut renamed = with_file_name(&record, file_name)?;
        if let Some(pid) = pid {
            // MMAP and MMAP2 bodies start with pid and tid.
            renamed[RECORD_HEADER_SIZE..RECORD_HEADER_SIZE + 4].copy_from_slice(&pid.to_le_bytes());
            renamed[RECORD_HEADER_SIZE + 4..RECORD_HEADER_SIZE + 8]
                .copy_from_slice(&pid.to_le_bytes());
        }
        self.insert_record(&renamed)?;
        Ok(self)
    }

    /// Adds a feature section with `contents`; the file must not have `feature` yet.
    ///
    /// # Errors
    /// [`PatchError::FeaturePresent`] if the file (or this patch) has it already,
    /// [`PatchError::BadInsertion`] for a bit past 255.
    pub fn add_feature(
        &mut self,
        feature: Feature,
        contents: Vec<u8>,
    ) -> Result<&mut Self, PerfDataError> {
        if feature.0 >= Feature::BITS {
            return Err(PatchError::BadInsertion(format!(
                "{feature} is past the header's 256 feature bits"
            ))
            .into());
        }
        if self.layout.features().contains(feature)
            || self.features.iter().any(|(added, _)| *added == feature)
        {
            return Err(PatchError::FeaturePresent(feature).into());
        }
        self.features.push((feature, contents));
        self.features.sort_by_key(|(feature, _)| *feature);
        Ok(self)
    }

    /// Whether the patch changes nothing: its output would be the input.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.features.is_empty() && self.overwrites.is_empty()
    }

    /// How many bytes the output has more than the input.
    pub fn grown_by(&self) -> u64 {
        self.records.len() as u64
            + self
                .features
                .iter()
                .map(|(_, contents)| SECTION_SIZE + contents.len() as u64)
                .sum::<u64>()
    }

    /// The edits, by input position: inserted records, new table entries, appended contents,
    /// then the header and offset fields rewritten.
    fn edits(&self) -> Result<Vec<(u64, u8, Edit<'_>)>, PerfDataError> {
        let layout = self.layout;
        let mut edits = Vec::new();
        if !self.records.is_empty() {
            edits.push((
                layout.data.offset,
                0,
                Edit::Insert(Cow::Borrowed(&self.records[..])),
            ));
        }
        // Every insertion point with its length, to move the sections after it.
        let mut insertions: Vec<(u64, u64)> = vec![(layout.data.offset, self.records.len() as u64)];
        for (feature, _) in &self.features {
            let index = layout.features().table_index(*feature) as u64;
            insertions.push((
                layout.feature_table.offset + SECTION_SIZE * index,
                SECTION_SIZE,
            ));
        }
        let moved = |offset: u64| -> Result<u64, PerfDataError> {
            insertions
                .iter()
                .filter(|(at, _)| *at <= offset)
                .try_fold(offset, |moved, (_, len)| moved.checked_add(*len))
                .ok_or(PerfDataError::Patch(PatchError::OffsetOverflow))
        };
        // New contents go after everything, in bit order.
        let mut contents_at = moved(layout.file_len)?;
        let mut entries = Vec::new();
        for (feature, contents) in &self.features {
            let index = layout.features().table_index(*feature) as u64;
            let mut entry = contents_at.to_le_bytes().to_vec();
            entry.extend_from_slice(&(contents.len() as u64).to_le_bytes());
            entries.push((layout.feature_table.offset + SECTION_SIZE * index, entry));
            contents_at = contents_at
                .checked_add(contents.len() as u64)
                .ok_or(PatchError::OffsetOverflow)?;
        }
        for (at, entry) in entries {
            edits.push((at, 1, Edit::Insert(Cow::Owned(entry))));
        }
        for (_, contents) in &self.features {
            edits.push((
                layout.file_len,
                2,
                Edit::Insert(Cow::Borrowed(&contents[..])),
            ));
        }
        for (at, bytes) in &self.overwrites {
            edits.push((*at, 3, Edit::Overwrite(bytes.clone())));
        }
        edits.extend(self.field_edits(moved)?);
        edits.sort_by_key(|(at, rank, _)| (*at, *rank));
        Ok(edits)
    }

    /// The header's data size and feature bits, and every offset field `moved` changes, as
    /// overwrites (rank 3: after any insertion at the same position).
    fn field_edits(
        &self,
        moved: impl Fn(u64) -> Result<u64, PerfDataError>,
    ) -> Result<Vec<(u64, u8, Edit<'_>)>, PerfDataError> {
        let layout = self.layout;
        let data_size = layout
            .data
            .size
            .checked_add(self.records.len() as u64)
            .ok_or(PatchError::OffsetOverflow)?;
        let mut edits = vec![(
            at::DATA_SIZE as u64,
            3,
            Edit::Overwrite(data_size.to_le_bytes().to_vec()),
        )];
        if !self.features.is_empty() {
            let mut features = layout.features();
            for (feature, _) in &self.features {
                features.insert(*feature);
            }
            let words = features
                .0
                .iter()
                .flat_map(|word| word.to_le_bytes())
                .collect();
            edits.push((at::FEATURES as u64, 3, Edit::Overwrite(words)));
        }
        for field in &layout.offset_fields {
            let offset = moved(field.section.offset)?;
            if offset != field.section.offset {
                edits.push((
                    field.position,
                    3,
                    Edit::Overwrite(offset.to_le_bytes().to_vec()),
                ));
            }
        }
        Ok(edits)
    }

    /// Copies `reader` (the file `layout` was read from) to `writer` with the insertions, the
    /// data size and feature bits updated, and every section offset after an insertion point
    /// moved.
    ///
    /// # Errors
    /// A read or write error; [`PatchError::OffsetOverflow`] if a moved offset would
    /// overflow; [`LayoutError::OverlappingFields`] if rewritten fields overlap;
    /// [`FormatError::TooShort`] if the input shrank since the layout was read.
    pub fn write<R: Read + Seek, W: Write>(
        &self,
        reader: &mut R,
        writer: &mut W,
    ) -> Result<(), PerfDataError> {
        let edits = self.edits()?;
        reader.seek(SeekFrom::Start(0))?;
        let mut position = 0u64;
        for (at, _, edit) in edits {
            copy_to(reader, writer, &mut position, at)?;
            match edit {
                Edit::Insert(bytes) => writer.write_all(&bytes)?,
                Edit::Overwrite(bytes) => {
                    let replaced = bytes.len() as u64;
                    let skipped = io::copy(&mut reader.by_ref().take(replaced), &mut io::sink())?;
                    if skipped != replaced {
                        return Err(FormatError::TooShort {
                            len: position + skipped,
                        }
                        .into());
                    }
                    position += replaced;
                    writer.write_all(&bytes)?;
                }
            }
        }
        copy_to(reader, writer, &mut position, self.layout.file_len)
    }
}

/// Copies the input from `position` up to `end`.
fn copy_to<R: Read, W: Write>(
    reader: &mut R,
    writer: &mut W,
    position: &mut u64,
    end: u64,
) -> Result<(), PerfDataError> {
    let wanted = end
        .checked_sub(*position)
        .ok_or(LayoutError::OverlappingFields)?;
    let copied = io::copy(&mut reader.by_ref().take(wanted), writer)?;
    *position += copied;
    if copied == wanted {
        Ok(())
    } else {
        Err(FormatError::TooShort { len: *position }.into())
    }
}
