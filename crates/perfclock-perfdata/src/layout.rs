//! The checked layout of a perf.data: header, attribute entries (with their ID sections) and
//! the feature table, every section inside the file and outside the data section and the
//! feature table, so that bytes can be inserted at the data's start or into the table and
//! every section after that point moved.

use std::io::{Read, Seek, SeekFrom};

use crate::bounds::{FILE_HEADER_SIZE, MAX_ATTRS};
use crate::error::{FormatError, LayoutError, PatchError, PerfDataError};
use crate::features::{Feature, FeatureSet};
use crate::header::{at, FileHeader};
use crate::section::{u32_at, u64_at, Section, SECTION_SIZE};

/// `PERF_ATTR_SIZE_VER0`: the smallest `perf_event_attr`, and what `size == 0` means.
const ATTR_SIZE_VER0: u64 = 64;
/// Larger attribute entries than this are no `perf_event_attr` any kernel defines.
const MAX_ATTR_SIZE: u64 = 4096;
/// `perf_event_attr`: where `size` is, where its flag bits are, the `use_clockid` bit, and
/// where `clockid` is.
const ATTR_SIZE_AT: usize = 4;
const ATTR_FLAGS_AT: usize = 40;
const ATTR_USE_CLOCKID_BIT: u32 = 25;
const ATTR_CLOCKID_AT: usize = 92;
/// Where `sample_type` is in `perf_event_attr`.
const ATTR_SAMPLE_TYPE_AT: usize = 24;

/// An offset field of the file, at `position`, describing `section`: moved when bytes are
/// inserted at or before the section's offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffsetField {
    pub position: u64,
    pub section: Section,
}

/// A checked perf.data layout, from [`read_layout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The file's length when checked.
    pub file_len: u64,
    /// The header's sections and feature bits.
    pub header: FileHeader,
    /// The data section (the records).
    pub data: Section,
    /// The feature table (right after the data).
    pub feature_table: Section,
    /// Each feature's section, in bit order.
    pub feature_sections: Vec<(Feature, Section)>,
    /// The clock of the first event opened with `use_clockid` (`perf record -k`), if any:
    /// such samples are not stamped with the perf clock.
    pub clockid: Option<i32>,
    /// The events' `sample_type`, if every event has the same one (perf records them so unless
    /// told otherwise): where a sample's time is ([`Layout::sample_time_at`]).
    pub sample_type: Option<u64>,
    /// Every offset field of the file (header, attribute ID sections, feature table), at most
    /// 2 + [`MAX_ATTRS`] + 256.
    pub(crate) offset_fields: Vec<OffsetField>,
}

impl Layout {
    /// Where a `PERF_RECORD_SAMPLE`'s time is in its body, if its events stamp one
    /// (`PERF_SAMPLE_TIME`) and share a `sample_type`: after the identifier, the IP and the
    /// pid/tid, whichever are sampled.
    pub fn sample_time_at(&self) -> Option<usize> {
        const IP: u64 = 1 << 0;
        const TID: u64 = 1 << 1;
        const TIME: u64 = 1 << 2;
        const IDENTIFIER: u64 = 1 << 16;
        let sample_type = self.sample_type?;
        (sample_type & TIME != 0).then(|| {
            [IDENTIFIER, IP, TID]
                .iter()
                .filter(|bit| sample_type & **bit != 0)
                .count()
                * 8
        })
    }

    /// The file's feature bits.
    pub fn features(&self) -> FeatureSet {
        self.header.features
    }

    /// `feature`'s section, if the file has it.
    pub fn feature_section(&self, feature: Feature) -> Option<Section> {
        self.feature_sections
            .iter()
            .find(|(present, _)| *present == feature)
            .map(|(_, section)| *section)
    }
}

/// Checks `reader`'s header and sections. Reads the header, the attribute entries and the
/// feature table; not the data.
///
/// # Errors
/// [`PerfDataError`]: not a file-mode little-endian perf.data, a section outside the file or
/// inside the data or the feature table, or a feature whose offsets cannot be moved (AUX trace
/// index, directory format).
pub fn read_layout<R: Read + Seek>(reader: &mut R) -> Result<Layout, PerfDataError> {
    let file_len = reader.seek(SeekFrom::End(0))?;
    reader.seek(SeekFrom::Start(0))?;
    let header = FileHeader::read(reader, file_len)?;
    if header.features.contains(Feature::DIR_FORMAT) {
        return Err(LayoutError::DirFormat.into());
    }
    if header.features.contains(Feature::AUXTRACE) {
        return Err(LayoutError::Auxtrace.into());
    }
    let bounds = Bounds::of(&header, file_len)?;
    bounds.outside_data("attribute section", header.attrs)?;
    bounds.outside_data("event type section", header.event_types)?;
    let mut offset_fields = vec![
        OffsetField {
            position: at::ATTRS as u64,
            section: header.attrs,
        },
        OffsetField {
            position: at::EVENT_TYPES as u64,
            section: header.event_types,
        },
    ];
    let (clockid, sample_type) = read_attrs(reader, &header, &bounds, &mut offset_fields)?;
    let feature_sections = read_feature_table(reader, &header, &bounds, &mut offset_fields)?;
    check_fields_apart(&offset_fields)?;
    Ok(Layout {
        file_len,
        header,
        data: header.data,
        feature_table: bounds.feature_table,
        feature_sections,
        clockid,
        sample_type,
        offset_fields,
    })
}

/// Where sections may lie: inside the file, and wholly before the data or wholly after the
/// feature table.
struct Bounds {
    file_len: u64,
    data: Section,
    feature_table: Section,
}

impl Bounds {
    /// The data section and the feature table of `header`, checked to lie inside the file.
    fn of(header: &FileHeader, file_len: u64) -> Result<Bounds, PerfDataError> {
        let data = header.data;
        let data_end = data.end().ok_or(PatchError::OffsetOverflow)?;
        let bounds = Bounds {
            file_len,
            data,
            feature_table: Section {
                offset: data_end,
                size: SECTION_SIZE * header.features.len() as u64,
            },
        };
        bounds.within_file("data section", data)?;
        // perf record writes a header with no data and no features first, and the real one
        // when it finishes.
        if data.size == 0 && header.features.is_empty() && file_len > data.offset {
            return Err(LayoutError::Unfinished {
                trailing: file_len - data.offset,
            }
            .into());
        }
        if data.offset < FILE_HEADER_SIZE {
            return Err(LayoutError::InsideData {
                what: "header".to_owned(),
            }
            .into());
        }
        bounds.within_file("feature section table", bounds.feature_table)?;
        Ok(bounds)
    }

    fn within_file(&self, what: &str, section: Section) -> Result<(), PerfDataError> {
        match section.end() {
            Some(end) if end <= self.file_len => Ok(()),
            _ => Err(LayoutError::OutOfFile {
                what: what.to_owned(),
                offset: section.offset,
                size: section.size,
                file_len: self.file_len,
            }
            .into()),
        }
    }

    /// A metadata section must lie wholly before the data or wholly after the feature table:
    /// it is moved with what it follows or not at all, and never cut by an insertion. Empty
    /// sections are never read, only moved if after an insertion.
    fn outside_data(&self, what: &str, section: Section) -> Result<(), PerfDataError> {
        if section.size == 0 {
            return Ok(());
        }
        self.within_file(what, section)?;
        let end = section.offset + section.size;
        let table_end = self.feature_table.offset + self.feature_table.size;
        if end <= self.data.offset || section.offset >= table_end {
            Ok(())
        } else {
            Err(LayoutError::InsideData {
                what: what.to_owned(),
            }
            .into())
        }
    }
}

/// Reads and checks the attribute entries, adding their ID sections to `offset_fields`;
/// returns the clock of the first event opened with `use_clockid`, and the events'
/// `sample_type` if they all share one.
fn read_attrs<R: Read + Seek>(
    reader: &mut R,
    header: &FileHeader,
    bounds: &Bounds,
    offset_fields: &mut Vec<OffsetField>,
) -> Result<(Option<i32>, Option<u64>), PerfDataError> {
    let (attrs, attr_size) = (header.attrs, header.attr_size);
    if !(ATTR_SIZE_VER0 + SECTION_SIZE..=MAX_ATTR_SIZE).contains(&attr_size) || attr_size % 8 != 0 {
        return Err(FormatError::AttrSize(attr_size).into());
    }
    if attrs.size % attr_size != 0 {
        return Err(FormatError::AttrSize(attr_size).into());
    }
    let attr_count = attrs.size / attr_size;
    if attr_count > MAX_ATTRS {
        return Err(LayoutError::TooManyAttrs(attr_count).into());
    }
    reader.seek(SeekFrom::Start(attrs.offset))?;
    let mut entry = vec![0u8; attr_size as usize];
    let mut clockid = None;
    let mut sample_types = Vec::new();
    for index in 0..attr_count {
        reader.read_exact(&mut entry)?;
        // perf's read_attr reads `attr.size` bytes (0 meaning VER0), then the ID section: the
        // entry is only where this module expects it when the two agree.
        let own_size = match u64::from(u32_at(&entry, ATTR_SIZE_AT)) {
            0 => ATTR_SIZE_VER0,
            size => size,
        };
        if own_size + SECTION_SIZE != attr_size {
            return Err(LayoutError::AttrLayout { index }.into());
        }
        sample_types.push(u64_at(&entry, ATTR_SAMPLE_TYPE_AT));
        let flags = u64_at(&entry, ATTR_FLAGS_AT);
        if flags & (1 << ATTR_USE_CLOCKID_BIT) != 0 && clockid.is_none() {
            clockid = Some(if own_size >= (ATTR_CLOCKID_AT + 4) as u64 {
                u32_at(&entry, ATTR_CLOCKID_AT) as i32
            } else {
                -1
            });
        }
        let ids = Section::parse(&entry[own_size as usize..]);
        bounds.outside_data(&format!("ID section of event attribute {index}"), ids)?;
        offset_fields.push(OffsetField {
            position: attrs.offset + index * attr_size + own_size,
            section: ids,
        });
    }
    sample_types.dedup();
    let sample_type = match sample_types[..] {
        [one] => Some(one),
        _ => None,
    };
    Ok((clockid, sample_type))
}

/// Reads the feature table, adding each feature's section to `offset_fields`.
fn read_feature_table<R: Read + Seek>(
    reader: &mut R,
    header: &FileHeader,
    bounds: &Bounds,
    offset_fields: &mut Vec<OffsetField>,
) -> Result<Vec<(Feature, Section)>, PerfDataError> {
    reader.seek(SeekFrom::Start(bounds.feature_table.offset))?;
    let mut table_entry = [0u8; SECTION_SIZE as usize];
    let mut feature_sections = Vec::with_capacity(header.features.len());
    for (index, feature) in header.features.iter().enumerate() {
        reader.read_exact(&mut table_entry)?;
        let section = Section::parse(&table_entry);
        bounds.outside_data(&format!("{feature} section"), section)?;
        offset_fields.push(OffsetField {
            position: bounds.feature_table.offset + SECTION_SIZE * index as u64,
            section,
        });
        feature_sections.push((feature, section));
    }
    Ok(feature_sections)
}

/// The copy rewrites offset fields in one pass, in file order: no two section descriptors
/// (offset, size) may overlap, or one rewrite would change another descriptor.
fn check_fields_apart(offset_fields: &[OffsetField]) -> Result<(), PerfDataError> {
    let mut descriptors: Vec<u64> = offset_fields.iter().map(|field| field.position).collect();
    descriptors.push(at::DATA as u64);
    descriptors.sort_unstable();
    if descriptors
        .windows(2)
        .any(|pair| pair[1] - pair[0] < SECTION_SIZE)
    {
        return Err(LayoutError::OverlappingFields.into());
    }
    Ok(())
}
