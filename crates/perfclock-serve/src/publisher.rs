//! The page's directory (owned by the server alone, locked: one server per directory), the live
//! page (a sealed memfd, see `perfclock_os::memfd`) and the thread that hands it to
//! clients over `PATH.sock`, the file beside it (written with `write`/`pwrite`, never mapped)
//! and the published paravirt offset's file.
//!
//! # Safety
//! Unsafe code here builds the core's `SharedPageWriter` and `SharedPageReader` over the live
//! page, a [`Mapping`] of a memfd of exactly the page's size (mapped before it is sealed,
//! unmapped on drop), written only through the core's atomic writer, which is lent out only for
//! the duration of a closure.
#![allow(unsafe_code)]

use std::fs::{DirBuilder, File};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::Duration;

use perfclock_core::shared_page::{
    parse, SharedPageReader, SharedPageWriter, FILE_BYTES, HEADER_OFFSET, MAGIC,
};
use perfclock_core::PageDefect;
use perfclock_os::{memfd, peer, shared_file, Access, Mapping, Sharing};

use crate::PublishError;

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PublishError {
    let path = path.to_owned();
    move |source| PublishError::Io { op, path, source }
}

/// The page's directory, created with mode 0755 (whatever the umask) if missing, checked to be writable by its owner
/// (the server's user) alone, and locked (`flock`): one server per directory. Unlocked on drop.
#[derive(Debug)]
pub struct PageDir {
    /// Held for its `flock`, which lasts as long as the descriptor.
    _lock: File,
}

impl PageDir {
    /// Prepares and locks `dir`.
    ///
    /// # Errors
    /// [`PublishError::Io`] (it cannot be created or opened as a directory without following a
    /// symlink), [`PublishError::Directory`], [`PublishError::Busy`].
    pub fn lock(dir: &Path) -> Result<PageDir, PublishError> {
        let created = match DirBuilder::new().mode(0o755).create(dir) {
            Ok(()) => true,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => false,
            Err(error) => return Err(io_error("create", dir)(error)),
        };
        let lock = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir)
            .map_err(io_error(
                "open as a directory without following a symlink",
                dir,
            ))?;
        let meta = lock.metadata().map_err(io_error("stat", dir))?;
        let euid = peer::effective_uid();
        if meta.uid() != euid || meta.mode() & 0o022 != 0 {
            return Err(PublishError::Directory {
                dir: dir.to_owned(),
                owner: meta.uid(),
                mode: meta.mode(),
                euid,
            });
        }
        if created {
            // The umask narrowed the mode `create` asked for; clients of other users must be
            // able to reach the page.
            lock.set_permissions(std::fs::Permissions::from_mode(0o755))
                .map_err(io_error("chmod", dir))?;
        }
        if shared_file::try_lock_exclusive(&lock).is_err() {
            return Err(PublishError::Busy {
                dir: dir.to_owned(),
            });
        }
        Ok(PageDir { _lock: lock })
    }
}

/// The live page: a memfd mapped read-write by this process only, sealed once written, handed to
/// clients by [`LivePage::serve`]; unmapped on drop.
#[derive(Debug)]
pub struct LivePage {
    memfd: File,
    page: Mapping,
}

impl LivePage {
    /// A new page, holding `inherited` (an earlier server's file, [`reuse_existing`]) if given:
    /// its lock words then continue the earlier server's, so a client moving over from that
    /// page never pairs their values.
    ///
    /// # Errors
    /// [`PublishError::Memory`] (`memfd_create`, `mmap`, the copy).
    pub fn new(inherited: Option<&[u8]>) -> Result<LivePage, PublishError> {
        let memory = |op| move |source| PublishError::Memory { op, source };
        let memfd =
            memfd::create_memfd(c"perfclock-clock", FILE_BYTES as u64).map_err(memory("create"))?;
        // Mapped writable before the seals forbid new writable mappings.
        let mapping = Mapping::file(
            memfd.as_fd(),
            FILE_BYTES,
            Access::ReadWrite,
            Sharing::Shared,
        )
        .map_err(memory("map"))?;
        let page = LivePage {
            memfd,
            page: mapping,
        };
        if let Some(bytes) = inherited {
            let bytes = bytes.get(..FILE_BYTES).unwrap_or(bytes);
            page.memfd.write_all_at(bytes, 0).map_err(memory("fill"))?;
        }
        Ok(page)
    }

    /// Runs `write` with the page's writer (this process is the page's only writer: the
    /// directory lock, the seals).
    pub fn with_writer<T>(&self, write: impl FnOnce(&SharedPageWriter) -> T) -> T {
        // SAFETY: a page-aligned FILE_BYTES mapping that lives while `self` does, and the writer
        // does not outlive this call; clients only load atomically.
        write(&unsafe { SharedPageWriter::new(self.page.as_ptr()) })
    }

    /// A consistent copy of the page's bytes.
    ///
    /// # Errors
    /// [`PublishError::Memory`] if the header lock stayed odd (a writer interrupted).
    pub fn bytes(&self) -> Result<Vec<u8>, PublishError> {
        // SAFETY: as for `with_writer`; read through atomics, the reader dropped here.
        let reader = unsafe { SharedPageReader::new(self.page.as_ptr()) };
        let layout = reader.snapshot().map_err(|defect| PublishError::Memory {
            op: "read",
            source: io::Error::other(defect),
        })?;
        let mut bytes = vec![0u8; FILE_BYTES];
        bytes[..layout.len()].copy_from_slice(&layout);
        Ok(bytes)
    }

    /// Writes the page's bytes into `file` at `path` (with `pwrite`: the file is never mapped, so
    /// what others do to it cannot fault this process; a truncated file is restored).
    ///
    /// # Errors
    /// [`PublishError::Io`] or [`PublishError::Memory`].
    pub fn persist(&self, file: &File, path: &Path) -> Result<(), PublishError> {
        file.write_all_at(&self.bytes()?, 0)
            .map_err(io_error("update", path))
    }

    /// Seals the page: from now on no one can shrink, grow or write it but through this
    /// process's mapping.
    ///
    /// # Errors
    /// [`PublishError::Memory`].
    pub fn seal(&self) -> Result<(), PublishError> {
        memfd::seal(&self.memfd).map_err(|source| PublishError::Memory { op: "seal", source })
    }

    /// Listens on `socket` (replacing a socket an earlier server left: the directory is the
    /// caller's and locked) and hands every client that connects the page's sealed descriptor,
    /// from a thread of its own. A client costs nothing once it has its descriptor: it keeps no
    /// connection.
    ///
    /// # Errors
    /// [`PublishError::Io`] (bind, the socket's mode, the thread) or [`PublishError::Memory`].
    pub fn serve(&self, socket: &Path) -> Result<(), PublishError> {
        use std::os::unix::fs::FileTypeExt as _;
        if std::fs::symlink_metadata(socket).is_ok_and(|meta| meta.file_type().is_socket()) {
            let _ = std::fs::remove_file(socket);
        }
        let listener = UnixListener::bind(socket).map_err(io_error("listen on", socket))?;
        // Anyone may connect: the page's trust comes from this process's credentials, which the
        // client reads (SO_PEERCRED), not from the socket file.
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
            .map_err(io_error("open to clients", socket))?;
        let memfd = self
            .memfd
            .try_clone()
            .map_err(|source| PublishError::Memory {
                op: "share",
                source,
            })?;
        std::thread::Builder::new()
            .name("perfclock-serve-fds".into())
            .spawn(move || loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        // A client that does not read its descriptor holds this thread no
                        // longer.
                        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                        let _ = memfd::send_fd(&stream, memfd.as_fd());
                    }
                    // Out of descriptors or memory: retry later rather than spin.
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            })
            .map_err(io_error("start the thread serving", socket))?;
        Ok(())
    }
}

/// The file at `path` if an earlier server of this user left it (a regular file owned by us,
/// writable by us alone, with one link, holding a page in this format), with its bytes, to be
/// continued and updated in place. A symlink, a FIFO, an empty file or a damaged page (or one of
/// another version) is `None`: replaced by a new file.
///
/// # Errors
/// [`PublishError::NotAPage`] for any other file of ours (not ours to overwrite);
/// [`PublishError::Io`] if it cannot be read.
pub fn reuse_existing(path: &Path) -> Result<Option<(File, Vec<u8>)>, PublishError> {
    let Ok(file) = File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    else {
        // Absent, a symlink (ELOOP), a FIFO, ...: replaced by a new file.
        return Ok(None);
    };
    let meta = file.metadata().map_err(io_error("stat", path))?;
    let euid = peer::effective_uid();
    let ours = meta.file_type().is_file()
        && meta.uid() == euid
        && meta.mode() & 0o022 == 0
        && meta.nlink() == 1;
    if !ours {
        return Ok(None);
    }
    let mut bytes = vec![0u8; FILE_BYTES + 1];
    let len = read_up_to(&file, &mut bytes).map_err(io_error("read", path))?;
    if len == 0 {
        // Emptied (`truncate -s 0`, `> file`): nothing in it to lose or to continue.
        return Ok(None);
    }
    let magic = bytes.get(HEADER_OFFSET..HEADER_OFFSET + 8);
    if magic != Some(&MAGIC.to_ne_bytes()[..]) {
        return Err(PublishError::NotAPage {
            path: path.to_owned(),
        });
    }
    match parse(&bytes[..len]) {
        // A page of ours, complete, in this format (perhaps stale or from another boot).
        Ok(_) | Err(PageDefect::Stale { .. } | PageDefect::OtherBoot | PageDefect::Busy)
            if len == FILE_BYTES =>
        {
            bytes.truncate(FILE_BYTES);
            Ok(Some((file, bytes)))
        }
        // Another version, cut short or damaged: replaced by a new file.
        _ => Ok(None),
    }
}

/// Reads from the start of `file` until `buffer` is full or the file ends; the bytes read.
fn read_up_to(file: &File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut len = 0;
    while len < buffer.len() {
        match file.read_at(&mut buffer[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(len)
}

/// Writes `bytes` under a temporary name beside `path` (`.NAME.PID.tmp`: new, mode 0644, never
/// through a link; `write`, then `fsync`: a full file system is an error here, never a fault
/// later) and renames it to `path`; the temporary file is removed on every error. The file,
/// open for later updates.
///
/// # Errors
/// [`PublishError::Io`].
pub fn create_new(path: &Path, bytes: &[u8]) -> Result<File, PublishError> {
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| {
        io_error("name", path)(io::Error::new(io::ErrorKind::InvalidInput, "no file name"))
    })?;
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let open = || {
        File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
    };
    let file = match open() {
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            // Left by a killed server of ours with this pid: the directory is ours alone.
            let _ = std::fs::remove_file(&temp);
            open()
        }
        other => other,
    }
    .map_err(io_error("create", &temp))?;
    let written = (|| {
        use std::io::Write as _;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        (&file).write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    written.map_err(|error| {
        let _ = std::fs::remove_file(&temp);
        io_error("publish", path)(error)
    })?;
    Ok(file)
}
