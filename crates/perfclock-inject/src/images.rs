//! After `perf inject --jit`: the images it wrote for a containerised process made findable
//! while that process lives.
//!
//! perf reads a mapped file inside the mount namespace of the process that mapped it, as long
//! as the process lives; a container's process's `jitted-*.so` images are on the host, in the
//! copies' directory, so its samples stay unnamed until it exits. Giving each image's MMAP2
//! record the image's build id (`perfclock_perfdata::set_map_build_id`) and the image to perf's
//! build-id cache (`perf buildid-cache -a`, as the user who will report) makes perf look it up
//! in the cache instead, outside any namespace.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use perfclock_perfdata::{
    elf_build_id, maps_of, read_layout, set_map_build_id, PerfDataError, RecordType,
};

/// The largest image read for its build id (one function's code).
const MAX_IMAGE_BYTES: u64 = 64 << 20;
/// Images given to one `perf buildid-cache -a`.
const IMAGES_PER_CALL: usize = 256;

/// Why the images could not be made findable (their samples are named once their processes
/// exit).
#[derive(Debug)]
#[non_exhaustive]
pub enum ImagesError {
    /// The injected recording could not be read or changed.
    Recording(PerfDataError),
    /// `perf buildid-cache` could not be run.
    Cache(std::io::Error),
    /// `perf buildid-cache` failed.
    CacheFailed(std::process::ExitStatus),
}

impl fmt::Display for ImagesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Recording(_) => f.write_str("cannot give the JIT images' maps their build ids"),
            Self::Cache(_) => f.write_str("cannot run perf buildid-cache"),
            Self::CacheFailed(status) => write!(f, "perf buildid-cache -a failed ({status})"),
        }
    }
}

impl std::error::Error for ImagesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Recording(error) => Some(error),
            Self::Cache(error) => Some(error),
            Self::CacheFailed(_) => None,
        }
    }
}

/// Gives every MMAP2 record of `injected` (perf inject's output, perfclock's own file) that
/// maps an image under `copies` the image's build id, in place, and adds those images to
/// perf's build-id cache: how many.
///
/// # Errors
/// [`ImagesError`].
pub fn register(injected: &Path, copies: &Path) -> Result<usize, ImagesError> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(injected)
        .map_err(|error| ImagesError::Recording(PerfDataError::Io(error)))?;
    let layout = read_layout(&mut file).map_err(ImagesError::Recording)?;
    let maps = maps_of(&mut file, &layout, |_, path| path.starts_with(copies))
        .map_err(ImagesError::Recording)?;
    let mut images: Vec<PathBuf> = Vec::new();
    for map in maps.into_iter().filter(|map| map.kind == RecordType::MMAP2) {
        let Some(build_id) = read_build_id(&map.path) else {
            continue;
        };
        set_map_build_id(&mut file, map.offset, &build_id).map_err(ImagesError::Recording)?;
        if !images.contains(&map.path) {
            images.push(map.path);
        }
    }
    file.sync_all()
        .map_err(|error| ImagesError::Recording(PerfDataError::Io(error)))?;
    cache(&images)?;
    Ok(images.len())
}

fn read_build_id(image: &Path) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(image)
        .ok()?
        .take(MAX_IMAGE_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    elf_build_id(&bytes)
}

/// `perf buildid-cache -a` of `images`, a comma-separated list at a time (one by one for a path
/// that holds a comma itself).
fn cache(images: &[PathBuf]) -> Result<(), ImagesError> {
    let (plain, odd): (Vec<&PathBuf>, Vec<&PathBuf>) = images
        .iter()
        .partition(|image| !image.as_os_str().as_encoded_bytes().contains(&b','));
    let mut lists: Vec<std::ffi::OsString> = plain
        .chunks(IMAGES_PER_CALL)
        .map(|chunk| {
            let mut list = std::ffi::OsString::new();
            for (index, image) in chunk.iter().enumerate() {
                if index > 0 {
                    list.push(",");
                }
                list.push(image.as_os_str());
            }
            list
        })
        .collect();
    lists.extend(odd.iter().map(|image| image.as_os_str().to_owned()));
    for list in lists {
        let status = Command::new("perf")
            .args(["buildid-cache", "-a"])
            .arg(&list)
            .status()
            .map_err(ImagesError::Cache)?;
        if !status.success() {
            return Err(ImagesError::CacheFailed(status));
        }
    }
    Ok(())
}
