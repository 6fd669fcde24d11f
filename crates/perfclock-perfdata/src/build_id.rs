//! Build ids for the images `perf inject --jit` writes: read from an image's GNU build-id note,
//! and put into the MMAP2 records that map it, in place, so perf looks the image up in its
//! build-id cache rather than by path.
//!
//! perf opens a mapped file by path inside the mount namespace of the process that mapped it,
//! as long as that process lives (`nsinfo`): a containerised process's `jitted-*.so`, written on
//! the host, is not there, and its samples stay unnamed until it exits. A map that carries a
//! build id (`PERF_RECORD_MISC_MMAP_BUILD_ID`, the id in place of the device and inode: same
//! size) is looked up in the build-id cache first, outside any namespace.
//!
//! The image reader is written here, over the few fields it needs, rather than with an ELF
//! crate: an image is perf's, but what it holds came from a runtime's dump; every length is
//! checked, and the `build_id` fuzz target feeds it arbitrary bytes.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{PatchError, PerfDataError, RecordsError};
use crate::layout::Layout;
use crate::record::{
    RecordHeader, RecordType, MMAP2_FILENAME_AT, MMAP_FILENAME_AT, RECORD_HEADER_SIZE,
};

/// The largest build id an MMAP2 record holds (a SHA-1's).
pub const MAX_BUILD_ID_BYTES: usize = 20;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: the MMAP2 record holds a build id, not device and inode.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// Where the device/inode union starts in an MMAP2 body (after pid, tid, addr, len, pgoff).
const MMAP2_ID_AT: usize = 32;
/// `SHT_NOTE`, `NT_GNU_BUILD_ID`.
const SHT_NOTE: u32 = 7;
const NT_GNU_BUILD_ID: u32 = 3;

/// The GNU build id of the little-endian ELF64 image `bytes`, if it has one of at most
/// [`MAX_BUILD_ID_BYTES`] (what an MMAP2 record can carry).
pub fn elf_build_id(bytes: &[u8]) -> Option<Vec<u8>> {
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB.
    if bytes.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let section_headers = usize::try_from(u64_at(0x28)?).ok()?;
    let entry_size = usize::from(u16_at(0x3a)?);
    let count = usize::from(u16_at(0x3c)?);
    if entry_size < 0x40 {
        return None;
    }
    for index in 0..count {
        let header = section_headers.checked_add(index.checked_mul(entry_size)?)?;
        if u32_at(header.checked_add(4)?)? != SHT_NOTE {
            continue;
        }
        let offset = usize::try_from(u64_at(header.checked_add(0x18)?)?).ok()?;
        let size = usize::try_from(u64_at(header.checked_add(0x20)?)?).ok()?;
        let notes = bytes.get(offset..offset.checked_add(size)?)?;
        if let Some(id) = gnu_build_id(notes) {
            return Some(id);
        }
    }
    None
}

/// The `NT_GNU_BUILD_ID` note among `notes` (each: namesz, descsz, type, name and desc padded
/// to 4 bytes).
fn gnu_build_id(mut notes: &[u8]) -> Option<Vec<u8>> {
    while notes.len() >= 12 {
        let word = |at: usize| u32::from_le_bytes(notes[at..at + 4].try_into().unwrap_or([0; 4]));
        let (name_size, desc_size, kind) = (word(0) as usize, word(4) as usize, word(8));
        let name_end = 12usize.checked_add(name_size.checked_next_multiple_of(4)?)?;
        let desc_end = name_end.checked_add(desc_size.checked_next_multiple_of(4)?)?;
        if desc_end > notes.len() {
            return None;
        }
        if kind == NT_GNU_BUILD_ID
            && notes[12..12 + name_size] == *b"GNU\0"
            && (1..=MAX_BUILD_ID_BYTES).contains(&desc_size)
        {
            return Some(notes[name_end..name_end + desc_size].to_vec());
        }
        notes = &notes[desc_end..];
    }
    None
}

/// A map record of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapAt {
    /// Its file offset.
    pub offset: u64,
    /// Its type (`MMAP` or `MMAP2`).
    pub kind: RecordType,
    /// The pid it maps into.
    pub pid: u32,
    /// The file it names (`//anon` for anonymous memory).
    pub path: std::path::PathBuf,
}

/// The MMAP and MMAP2 records (outside compressed records) of the recording `file`, laid out
/// as `layout`, that `wanted` accepts (given the pid and the path they name).
///
/// # Errors
/// A read error, or a record that does not fit the data section.
pub fn maps_of(
    file: &mut File,
    layout: &Layout,
    mut wanted: impl FnMut(u32, &Path) -> bool,
) -> Result<Vec<MapAt>, PerfDataError> {
    let mut reader = BufReader::with_capacity(1 << 16, &mut *file);
    reader.seek(SeekFrom::Start(layout.data.offset))?;
    let end = layout.data.offset + layout.data.size;
    let mut offset = layout.data.offset;
    let mut found = Vec::new();
    let mut body = Vec::new();
    while offset < end {
        let mut header = [0u8; RECORD_HEADER_SIZE];
        if end - offset < RECORD_HEADER_SIZE as u64 {
            return Err(RecordsError::RecordPastData { offset }.into());
        }
        reader.read_exact(&mut header)?;
        let parsed = RecordHeader::parse(header);
        let size = u64::from(parsed.size);
        if size < RECORD_HEADER_SIZE as u64 {
            return Err(RecordsError::RecordTooSmall { offset, size }.into());
        }
        if size > end - offset {
            return Err(RecordsError::RecordPastData { offset }.into());
        }
        body.resize(size as usize - RECORD_HEADER_SIZE, 0);
        reader.read_exact(&mut body)?;
        let name_at = match parsed.kind {
            RecordType::MMAP => Some(MMAP_FILENAME_AT),
            RecordType::MMAP2 => Some(MMAP2_FILENAME_AT),
            _ => None,
        };
        if let (Some(name), Some(pid)) = (
            name_at.and_then(|at| body.get(at..)),
            body.first_chunk::<4>().map(|pid| u32::from_le_bytes(*pid)),
        ) {
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            let path = Path::new(std::ffi::OsStr::from_bytes(name));
            if wanted(pid, path) {
                found.push(MapAt {
                    offset,
                    kind: parsed.kind,
                    pid,
                    path: path.to_path_buf(),
                });
            }
        }
        offset += size;
    }
    Ok(found)
}

/// Writes `build_id` into the MMAP2 record at `offset` of `file`, in place: its misc flag says
/// so, and the id takes the place of the device and inode (the record keeps its size).
///
/// # Errors
/// Not an MMAP2 record there, a build id longer than [`MAX_BUILD_ID_BYTES`], or an I/O error.
pub fn set_map_build_id(
    file: &mut File,
    offset: u64,
    build_id: &[u8],
) -> Result<(), PerfDataError> {
    let mut header = [0u8; RECORD_HEADER_SIZE];
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(&mut header)?;
    let parsed = RecordHeader::parse(header);
    if parsed.kind != RecordType::MMAP2
        || usize::from(parsed.size) < RECORD_HEADER_SIZE + MMAP2_FILENAME_AT
        || build_id.len() > MAX_BUILD_ID_BYTES
    {
        return Err(PatchError::BadInsertion(format!(
            "no MMAP2 record at offset {offset} to carry a build id of {} bytes",
            build_id.len()
        ))
        .into());
    }
    let marked = RecordHeader {
        misc: parsed.misc | MISC_MMAP_BUILD_ID,
        ..parsed
    };
    let mut id = [0u8; 24];
    id[0] = build_id.len() as u8;
    id[4..4 + build_id.len()].copy_from_slice(build_id);
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(&marked.to_bytes())?;
    file.seek(SeekFrom::Start(
        offset + (RECORD_HEADER_SIZE + MMAP2_ID_AT) as u64,
    ))?;
    file.write_all(&id)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 image: header, one SHT_NOTE section holding `note`.
    fn image(note: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0u8; 0x40];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        let notes_at = 0x40u64;
        let headers_at = notes_at + note.len() as u64;
        bytes[0x28..0x30].copy_from_slice(&headers_at.to_le_bytes());
        bytes[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes());
        bytes[0x3c..0x3e].copy_from_slice(&2u16.to_le_bytes());
        bytes.extend_from_slice(note);
        bytes.extend_from_slice(&[0u8; 0x40]);
        let mut section = [0u8; 0x40];
        section[4..8].copy_from_slice(&SHT_NOTE.to_le_bytes());
        section[0x18..0x20].copy_from_slice(&notes_at.to_le_bytes());
        section[0x20..0x28].copy_from_slice(&(note.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&section);
        bytes
    }

    fn note(kind: u32, name: &[u8], desc: &[u8]) -> Vec<u8> {
        let mut note = Vec::new();
        note.extend_from_slice(&(name.len() as u32).to_le_bytes());
        note.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        note.extend_from_slice(&kind.to_le_bytes());
        note.extend_from_slice(name);
        note.resize(note.len().next_multiple_of(4), 0);
        note.extend_from_slice(desc);
        note.resize(note.len().next_multiple_of(4), 0);
        note
    }

    #[test]
    fn the_gnu_build_id_note_is_found() {
        let id: Vec<u8> = (1..=20).collect();
        let notes = [note(1, b"GNU\0", &[9; 16]), note(3, b"GNU\0", &id)].concat();
        assert_eq!(elf_build_id(&image(&notes)), Some(id));
        assert_eq!(elf_build_id(&image(&note(3, b"XYZ\0", &[1; 20]))), None);
        assert_eq!(elf_build_id(&image(&note(3, b"GNU\0", &[1; 21]))), None);
        assert_eq!(elf_build_id(b"\x7fELF\x01\x01 elf32"), None);
        let mut cut = image(&note(3, b"GNU\0", &[7; 20]));
        cut.truncate(0x50);
        assert_eq!(elf_build_id(&cut), None);
    }
}
