//! The marker writer: per-thread buffers in front of the shared marker file.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{compiler_fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use thread_local::ThreadLocal;

use crate::clock::to_monotonic;
use crate::error::MarkerError;
use crate::file::SharedFile;
use crate::line::{clean_name, clean_name_bytes, push_line_with};
use crate::process::{self, current_pid};
use crate::{ForkChild, MarkerClock};

/// A thread's buffer is written out once it holds this many bytes (about 400 markers of short
/// names): one `write(2)` per that many markers on the thread that fills it.
pub const FLUSH_AT_BYTES: usize = 16 * 1024;

/// Writers alive in this process, flushed by the `atexit` handler.
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// Appends markers to `marker-<pid>.txt` in a directory, for samply to show beside the samples of
/// a `perf record` of this process.
///
/// Cheap to clone (all clones write to the same buffers) and safe to share between threads. Each
/// thread formats its markers into its own buffer, so a marker costs no system call and takes no
/// lock another thread holds (except while [`Markers::flush`] drains that buffer). Buffers are
/// written out when one fills ([`FLUSH_AT_BYTES`]), on [`Markers::flush`], when the last clone is
/// dropped or [`Markers::close`]d, and when the process exits through `exit(3)` (returning from
/// `main` included). Markers still buffered when the process is killed or calls `_exit` are lost;
/// the file then still ends with a whole line.
///
/// # Signal handlers
/// [`Markers::span`] and [`Markers::instant`] may be called from a signal handler: a call that
/// finds its own thread already inside the writer (the handler interrupted a marker call or a
/// flush on that thread) returns [`MarkerError::Busy`] at once and counts the marker as lost,
/// instead of waiting for a lock the interrupted code holds. Otherwise the marker is buffered (it
/// may wait while another thread flushes this thread's buffer, which that thread finishes). A
/// thread's first marker allocates its buffer, so write one from ordinary code on each thread
/// that marks from a handler; the buffer never grows after that.
///
/// # Fork
/// A handle is its process's: in a fork child every call on an inherited handle writes nothing
/// and returns [`MarkerError::ForkChild`] (markers are counted as lost; the buffered markers the
/// child inherited stay the parent's to write), and the exit-time flush writes nothing in the
/// child, so the parent's file stays intact whatever the child does. samply reads the file as
/// the parent's, by the `marker-<pid>.txt` mapping. Open a new writer in the child.
#[derive(Debug, Clone)]
pub struct Markers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    file: Arc<SharedFile>,
    buffers: ThreadLocal<Mutex<Vec<u8>>>,
    /// Markers lost to failed writes or to a missing clock since open.
    lost: AtomicU64,
}

thread_local! {
    /// Set while this thread is inside a marker writer (a marker call or a flush). Const and
    /// without a destructor, so it is readable at any time, also at exit and in a signal handler.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as inside the writer until dropped; `None` if it already is (a
/// signal handler interrupted the writer on this thread).
struct Entered(());

impl Entered {
    fn enter() -> Option<Entered> {
        if INSIDE.with(|inside| inside.replace(true)) {
            return None;
        }
        // A handler runs between this thread's instructions: keep the compiler from moving the
        // locking below above the flag.
        compiler_fence(Ordering::SeqCst);
        Some(Entered(()))
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        compiler_fence(Ordering::SeqCst);
        INSIDE.with(|inside| inside.set(false));
    }
}

fn new_buffer() -> Mutex<Vec<u8>> {
    // A line is at most ~1.1 KB and a buffer is written out once it holds FLUSH_AT_BYTES, so it
    // never grows past this capacity.
    Mutex::new(Vec::with_capacity(FLUSH_AT_BYTES + 2048))
}

impl Markers {
    /// Creates `dir/marker-<pid>.txt` and maps it executable, so a `perf record` running now or
    /// started later records the mapping samply looks for. Writers opened on the same directory
    /// in one process share the file, whatever name reached the directory (a symlink, a bind
    /// mount). The file is created exclusively: never through a link or into a file another
    /// user prepared; a stale file of an earlier process with this pid is replaced only if it is
    /// a regular file of this user that no live writer holds.
    ///
    /// # Errors
    /// [`MarkerError::Create`] if `dir` is missing or not writable, [`MarkerError::NameTaken`] if
    /// a link, a FIFO or another user's file is at the name, [`MarkerError::NameLive`] if another
    /// live writer's file is (a process with the same pid in another pid namespace),
    /// [`MarkerError::Map`] if `dir` is on a `noexec` mount.
    pub fn open(dir: impl AsRef<Path>) -> Result<Markers, MarkerError> {
        Markers::open_with_clock(dir, MarkerClock::Perf)
    }

    /// As [`Markers::open`], writing the file in `clock`: callers still pass perf-clock ns,
    /// which a [`MarkerClock::Monotonic`] writer converts (see [`MarkerClock`]'s module docs
    /// for the pairing's freshness and uncertainty).
    ///
    /// # Errors
    /// As [`Markers::open`]; [`MarkerError::Clock`] if `clock` is `Monotonic` and the perf
    /// clock cannot be opened; [`MarkerError::ClockMismatch`] if this process already writes
    /// `dir`'s marker file in the other clock.
    pub fn open_with_clock(
        dir: impl AsRef<Path>,
        clock: MarkerClock,
    ) -> Result<Markers, MarkerError> {
        if clock == MarkerClock::Monotonic {
            perfclock::init().map_err(MarkerError::Clock)?;
        }
        let file = SharedFile::open(dir.as_ref(), clock)?;
        let inner = Arc::new(Inner {
            file,
            buffers: ThreadLocal::new(),
            lost: AtomicU64::new(0),
        });
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&inner));
        drop(live);
        process::register_hooks(flush_all_at_exit);
        Ok(Markers { inner })
    }

    /// The marker file's absolute path.
    pub fn path(&self) -> &Path {
        &self.inner.file.path
    }

    /// The clock of the file's times.
    pub fn clock(&self) -> MarkerClock {
        self.inner.file.clock
    }

    /// Buffers a span from `start_ns` to `end_ns` (perf-clock ns, e.g. from
    /// [`perfclock::now_ns`]); `start_ns == end_ns` is an instant. Control characters in `name`
    /// are replaced (a marker is one line) and it is cut to
    /// [`MAX_NAME_BYTES`](crate::line::MAX_NAME_BYTES). May be called from a signal handler (see
    /// [`Markers`]).
    ///
    /// # Errors
    /// [`MarkerError::EndBeforeStart`], [`MarkerError::EmptyName`]; [`MarkerError::ForkChild`]
    /// in a fork child and [`MarkerError::Busy`] when the thread is already inside the writer
    /// (both count the marker in [`Markers::lost`]); or the error of writing out this thread's
    /// buffer when it filled (the buffered markers are then lost and counted in
    /// [`Markers::lost`]).
    pub fn span(&self, name: &str, start_ns: u64, end_ns: u64) -> Result<(), MarkerError> {
        self.push(name.as_bytes(), start_ns, end_ns, |out| {
            clean_name(name, out)
        })
    }

    /// As [`Markers::span`] for a name in bytes that may not be UTF-8 (from C): invalid
    /// sequences become U+FFFD, without allocating.
    ///
    /// # Errors
    /// As [`Markers::span`].
    pub fn span_bytes(&self, name: &[u8], start_ns: u64, end_ns: u64) -> Result<(), MarkerError> {
        self.push(name, start_ns, end_ns, |out| clean_name_bytes(name, out))
    }

    fn push(
        &self,
        name: &[u8],
        start_ns: u64,
        end_ns: u64,
        clean: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), MarkerError> {
        if end_ns < start_ns {
            return Err(MarkerError::EndBeforeStart { start_ns, end_ns });
        }
        if name.is_empty() {
            return Err(MarkerError::EmptyName);
        }
        if let Err(error) = self.check_process() {
            self.inner.lost.fetch_add(1, Ordering::Relaxed);
            return Err(error);
        }
        let (start_ns, end_ns) = match self.inner.file.clock {
            MarkerClock::Perf => (start_ns, end_ns),
            MarkerClock::Monotonic => {
                to_monotonic(start_ns, end_ns).ok_or(MarkerError::NoPairing)?
            }
        };
        let Some(_entered) = Entered::enter() else {
            self.inner.lost.fetch_add(1, Ordering::Relaxed);
            return Err(MarkerError::Busy);
        };
        let mut lines = self
            .inner
            .buffers
            .get_or(new_buffer)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        push_line_with(&mut lines, start_ns, end_ns, clean);
        if lines.len() >= FLUSH_AT_BYTES {
            return self.inner.write_out(&mut lines);
        }
        Ok(())
    }

    /// Buffers an instant at `at_ns` (a span of length 0). See [`Markers::span`].
    ///
    /// # Errors
    /// As [`Markers::span`].
    pub fn instant(&self, name: &str, at_ns: u64) -> Result<(), MarkerError> {
        self.span(name, at_ns, at_ns)
    }

    /// Stamps the start now with the process-wide perf clock and the end when the guard is
    /// dropped. Errors at the end (a failed write) are counted in [`Markers::lost`].
    ///
    /// # Errors
    /// [`MarkerError::Clock`] if the process-wide clock cannot be opened,
    /// [`MarkerError::EmptyName`].
    pub fn start(&self, name: impl Into<String>) -> Result<SpanGuard, MarkerError> {
        let name = name.into();
        if name.is_empty() {
            return Err(MarkerError::EmptyName);
        }
        let clock = perfclock::init().map_err(MarkerError::Clock)?;
        let start_ns = clock.now_ns().unwrap_or(0);
        Ok(SpanGuard {
            markers: self.clone(),
            name,
            start_ns,
        })
    }

    /// Writes out every thread's buffered markers.
    ///
    /// # Errors
    /// The first write error ([`MarkerError::Write`], [`MarkerError::Broken`]); the other
    /// buffers are still written. [`MarkerError::ForkChild`] in a fork child (nothing is
    /// written), [`MarkerError::Busy`] from a signal handler that interrupted this writer.
    pub fn flush(&self) -> Result<(), MarkerError> {
        self.check_process()?;
        self.inner.flush()
    }

    /// Flushes and drops this handle (other clones keep writing).
    ///
    /// # Errors
    /// As [`Markers::flush`]; in a fork child the handle is dropped and nothing written.
    pub fn close(self) -> Result<(), MarkerError> {
        self.flush()
    }

    /// Markers lost since open: failed writes, span guards without a clock reading, markers
    /// refused as [`MarkerError::Busy`], and markers given to a writer inherited through `fork`.
    pub fn lost(&self) -> u64 {
        self.inner.lost.load(Ordering::Relaxed)
    }

    /// Counts markers a caller could not stamp (no clock) as lost.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    pub(crate) fn count_lost(&self, markers: u64) {
        self.inner.lost.fetch_add(markers, Ordering::Relaxed);
    }

    fn check_process(&self) -> Result<(), MarkerError> {
        self.inner.check_process()
    }
}

impl Inner {
    /// Writes `buffer` out and empties it; counts its markers as lost on failure.
    fn write_out(&self, buffer: &mut Vec<u8>) -> Result<(), MarkerError> {
        let result = self.file.append(buffer);
        buffer.clear();
        if let Err(MarkerError::Write { lost, .. } | MarkerError::Broken { lost, .. }) = &result {
            self.lost.fetch_add(*lost, Ordering::Relaxed);
        }
        result
    }

    fn check_process(&self) -> Result<(), MarkerError> {
        ForkChild::check(self.file.pid, current_pid()).map_err(MarkerError::ForkChild)
    }

    /// Writes out every buffer; the caller is in the writer's process.
    fn flush(&self) -> Result<(), MarkerError> {
        // This thread is inside the writer while it holds the buffers' and the file's locks: a
        // marker from a signal handler on it must not wait for them.
        let Some(_entered) = Entered::enter() else {
            return Err(MarkerError::Busy);
        };
        let mut first_error = None;
        for buffer in self.buffers.iter() {
            let mut lines = buffer.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = self.write_out(&mut lines) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Errors are counted in `lost`, which nobody can read any more; `close` reports them.
        if self.check_process().is_ok() {
            let _ = self.flush();
        }
    }
}

/// Flushes every live writer when the process exits through `exit(3)`.
extern "C" fn flush_all_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        // try_lock: in a fork child, a thread that no longer exists may hold the lock.
        let Ok(registered) = LIVE.try_lock() else {
            return;
        };
        let live: Vec<Arc<Inner>> = registered.iter().filter_map(Weak::upgrade).collect();
        drop(registered);
        for inner in live {
            if inner.check_process().is_ok() {
                let _ = inner.flush();
            }
        }
    });
}

/// A span that ends when dropped. See [`Markers::start`].
#[derive(Debug)]
#[must_use = "the span ends when the guard is dropped: `markers.start(name)?;` records an empty span; bind it (`let _span = ...`)"]
pub struct SpanGuard {
    markers: Markers,
    name: String,
    start_ns: u64,
}

impl SpanGuard {
    /// The span's start, perf-clock ns.
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }
}

impl Drop for SpanGuard {
    fn drop(&mut self) {
        let end_ns = perfclock::try_now_ns().unwrap_or(0);
        if self.start_ns == 0 || end_ns == 0 {
            self.markers.inner.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // A failed write is counted in `lost` by `span`.
        let _ = self.markers.span(&self.name, self.start_ns, end_ns);
    }
}
