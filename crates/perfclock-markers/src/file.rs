//! The marker file of one process and directory: created once, mapped executable so perf records
//! it, appended to in whole, block-aligned lines (see [`crate::line`]).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use perfclock_process_files::{ClockMismatch, FileKey, Registry, Retention};

use perfclock_os::mapping::ExecMarkerMapping;
use perfclock_os::shared_file::create_exclusive;
use perfclock_os::CreateError;

use crate::error::MarkerError;
use crate::line::{layout_in, LastLine, MAX_LAYOUT_BYTES};
use crate::MarkerClock;

/// Every marker file this process created, kept (with its mapping) until exit: perf attaching
/// later (`perf record -p`) reads the mapping from `/proc/<pid>/maps`, and samply reads a file
/// once per mapping, so a file is created and mapped once per process and directory, whatever
/// name reached the directory.
static FILES: Registry<SharedFile> = Registry::new(Retention::UntilExit);

/// A marker file and its append state.
#[derive(Debug)]
pub(crate) struct SharedFile {
    /// The process that created it: a fork child must not append to its parent's file.
    pub pid: u32,
    /// The file's canonical path, as perf will see it through the mapping.
    pub path: PathBuf,
    /// The clock of the file's times.
    pub clock: MarkerClock,
    state: Mutex<AppendState>,
    /// Held only so the mapping lives as long as the process.
    _mapping: ExecMarkerMapping,
}

#[derive(Debug)]
struct AppendState {
    file: File,
    /// Bytes of complete lines in the file; the file is never longer once a flush returns.
    len: u64,
    /// The file's last line, which the next flush may lengthen.
    last: Option<LastLine>,
    /// Set when a failed write could not be undone: appending more could glue onto a partial line.
    broken: bool,
    /// Where each flush lays its bytes out: allocated once, so a flush allocates nothing (a
    /// marker from a signal handler may be the one that fills its buffer).
    scratch: Vec<u8>,
}

impl SharedFile {
    /// The marker file of this process in `dir`, created and mapped on first use: exclusively
    /// ([`create_exclusive`]), never through a link or into a file another user prepared; a
    /// stale file of an earlier process with this pid is replaced only if it is a regular file
    /// of this user that no live writer holds.
    ///
    /// # Errors
    /// [`MarkerError::Create`], [`MarkerError::NameTaken`], [`MarkerError::NameLive`] or
    /// [`MarkerError::Map`].
    pub(crate) fn open(dir: &Path, clock: MarkerClock) -> Result<Arc<SharedFile>, MarkerError> {
        let pid = std::process::id();
        let name = format!("marker-{pid}.txt");
        let create_error = |source| MarkerError::Create {
            path: dir.join(&name),
            source,
        };
        let key = FileKey::of(dir, pid).map_err(create_error)?;
        let mut files = FILES.lock();
        if let Some(file) = files.get(key) {
            if file.clock != clock {
                return Err(MarkerError::ClockMismatch(ClockMismatch {
                    path: file.path.clone(),
                    open: file.clock,
                    requested: clock,
                }));
            }
            return Ok(file);
        }
        // Canonical: the path perf records for the mapping.
        let path = std::fs::canonicalize(dir)
            .map_err(create_error)?
            .join(&name);
        let file = create(&path, &name)?;
        let mapping = ExecMarkerMapping::new(&file).map_err(|source| MarkerError::Map {
            path: path.clone(),
            source,
        })?;
        let shared = Arc::new(SharedFile {
            pid,
            path,
            clock,
            state: Mutex::new(AppendState {
                file,
                len: 0,
                last: None,
                broken: false,
                scratch: Vec::with_capacity(MAX_LAYOUT_BYTES),
            }),
            _mapping: mapping,
        });
        files.insert(key, &shared);
        Ok(shared)
    }

    /// Appends `lines` (complete lines, each shorter than [`BLOCK`](crate::line::BLOCK)). On
    /// failure the file ends at a line boundary: the lines not written are lost, never
    /// half-written.
    ///
    /// # Errors
    /// [`MarkerError::Write`] (`lost` counts the lines of `lines` not written) or
    /// [`MarkerError::Broken`].
    pub(crate) fn append(&self, lines: &[u8]) -> Result<(), MarkerError> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.broken {
            return Err(MarkerError::Broken {
                path: self.path.clone(),
                lost: lines.iter().filter(|&&b| b == b'\n').count() as u64,
            });
        }
        let scratch = std::mem::take(&mut state.scratch);
        let mut plan = layout_in(scratch, state.len, state.last.as_ref(), lines);
        let result = write_all_at(&state.file, &plan.bytes, plan.offset);
        let Err((written, source)) = result else {
            state.len = plan.offset + plan.bytes.len() as u64;
            plan.update_last_line(&mut state.last);
            state.scratch = std::mem::take(&mut plan.bytes);
            return Ok(());
        };
        let (whole, last_whole) = plan.whole_prefix(written);
        let lost = plan.new_lines_from(whole);
        let undo = if whole > 0 {
            // Whole lines made it (the rewritten last line among them, if any: it comes first):
            // keep them, cut whatever follows.
            let end = plan.offset + whole as u64;
            state.file.set_len(end).map(|()| (end, last_whole))
        } else if plan.rewritten_len > 0 {
            // The lengthened last line may be half-written over the old one: put the old one
            // back and cut the file after it.
            let last = state.last.clone();
            restore(&state.file, last.as_ref(), state.len).map(|()| (state.len, last))
        } else {
            let (len, last) = (state.len, state.last.clone());
            state.file.set_len(len).map(|()| (len, last))
        };
        match undo {
            Ok((len, last)) => {
                state.len = len;
                state.last = last;
            }
            Err(_) => state.broken = true,
        }
        state.scratch = plan.bytes;
        Err(MarkerError::Write {
            path: self.path.clone(),
            lost,
            source,
        })
    }
}

/// Creates `path` (`name` in its directory) exclusively.
fn create(path: &Path, name: &str) -> Result<File, MarkerError> {
    let dir = path.parent().expect("joined onto a directory");
    create_exclusive(dir, name, 0o644).map_err(|error| match error {
        CreateError::Taken(taken) => MarkerError::NameTaken(taken),
        CreateError::Live(live) => MarkerError::NameLive(live),
        CreateError::Io { source, .. } => MarkerError::Create {
            path: path.to_owned(),
            source,
        },
        other => MarkerError::Create {
            path: path.to_owned(),
            source: io::Error::other(other),
        },
    })
}

/// Writes the old last line back in place and cuts the file at `len`.
fn restore(file: &File, last: Option<&LastLine>, len: u64) -> io::Result<()> {
    if let Some(last) = last {
        write_all_at(file, &last.bytes, last.offset).map_err(|(_, e)| e)?;
    }
    file.set_len(len)
}

/// `pwrite` until done; on error, how many bytes were written and why it stopped.
fn write_all_at(file: &File, mut bytes: &[u8], mut offset: u64) -> Result<(), (usize, io::Error)> {
    let mut written = 0;
    while !bytes.is_empty() {
        match file.write_at(bytes, offset) {
            Ok(0) => return Err((written, io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                written += n;
                bytes = &bytes[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((written, e)),
        }
    }
    Ok(())
}
