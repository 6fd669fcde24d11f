//! The thread-safe writer of `jit-<pid>.dump` and its timeconv record.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use perfclock::Clock;
use perfclock_core::{BootId, ReadError, TimeConversion};
use perfclock_os::mapping::ExecMarkerMapping;
use perfclock_os::thread;
use perfclock_os::time::{self, monotonic_ns};
use perfclock_os::{shared_file, CreateError};
use perfclock_process_files::{ClockMismatch, FileKey, ForkChild, Registry, Retention};

use crate::record::{self, CodeLoad, DebugEntry};
use crate::timeconv::{self, TimeConvRecord};
use crate::{JitClock, JitDumpError};

/// Sidecar rewrites from [`JitDump::code_load`] are at least this far apart, so a JIT loading
/// thousands of functions a second does not rename a file for each.
const TIMECONV_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// Tries at reading the clock's conversion before giving up: a read only fails while the
/// calibrator republishes, which takes microseconds.
const CONVERSION_READ_ATTEMPTS: usize = 100;

/// An open `jit-<pid>.dump`: JIT code loads, stamped with the raw counter that `perf inject
/// --jit` converts with `PERF_RECORD_TIME_CONV`, plus `jit-<pid>.dump.timeconv` holding the
/// conversion for recordings that lack that record.
///
/// Thread-safe: [`JitDump::code_load`] may be called from any number of threads at once.
///
/// One dump per process and directory: a second [`JitDump::create`] on a directory this process
/// already writes a dump into (by any name) returns a handle to the same dump, so a JVM agent
/// and a JNI library of one process both write into it; the close record is written when the
/// last handle is closed or dropped.
///
/// # Fork
/// A handle is its process's: in a fork child every call on an inherited handle writes nothing
/// and returns [`JitDumpError::ForkChild`] (closing or dropping it frees the child's copy), so
/// the parent's dump stays intact whatever the child does. A child that generates code creates
/// its own dump (`jit-<child pid>.dump`).
#[derive(Debug)]
pub struct JitDump {
    /// `None` only while closing or dropping.
    shared: Option<Arc<Shared>>,
}

/// The dump behind every handle of one process and directory.
#[derive(Debug)]
struct Shared {
    clock: &'static Clock,
    /// The clock of the dump's timestamps.
    jit_clock: JitClock,
    path: PathBuf,
    timeconv_path: PathBuf,
    pid: u32,
    boot_id: BootId,
    key: FileKey,
    state: Mutex<State>,
    timeconv: Mutex<Option<Published>>,
    /// The executable mapping of the dump's first page: `perf record` logs it as an `MMAP2` of
    /// `jit-<pid>.dump`, which is how `perf inject --jit` finds the dump. Held so the mapping
    /// lives as long as the dump (dropped last, after the close record).
    _marker: ExecMarkerMapping,
}

/// Every dump this process has open, for [`JitDump::create`] to share: by the directory's
/// device and inode, whatever name reached it.
static OPEN: Registry<Shared> = Registry::new(Retention::WhileOpen);

/// What the lock serialises: the file's end and the next index.
#[derive(Debug)]
struct State {
    file: File,
    /// Length of the file up to its last complete record; the next record is written here.
    end: u64,
    next_index: u64,
    /// Set when a failed write left bytes past `end` that could not be truncated away.
    torn: bool,
}

/// What the timeconv record last said, and when.
#[derive(Debug, Clone, Copy)]
struct Published {
    conversion: TimeConversion,
    error_bound_ns: u64,
    at: Instant,
}

fn read_conversion(clock: &Clock) -> Result<TimeConversion, JitDumpError> {
    let mut last = ReadError::Contended;
    for _ in 0..CONVERSION_READ_ATTEMPTS {
        match clock.conversion() {
            Ok(conversion) => return Ok(conversion),
            Err(ReadError::Contended) => std::thread::yield_now(),
            Err(error) => {
                last = error;
                break;
            }
        }
    }
    Err(JitDumpError::ClockRead(last))
}

/// A counter read that cannot run ahead of the lock acquisition before it, so timestamps
/// taken under the lock never decrease in file order.
fn counter() -> u64 {
    perfclock_core::counter::read_counter_ordered().unwrap_or(0)
}

/// A timestamp in `jit_clock`, taken after every earlier instruction (under the writer's lock,
/// so stamps never decrease in file order).
fn timestamp(clock: &Clock, jit_clock: JitClock) -> Result<u64, JitDumpError> {
    match jit_clock {
        JitClock::Arch => Ok(counter()),
        // The clock's own conversion: exact in every mode (perf's form of paravirt mode's clock
        // is only within a few ns, and drifts by 2^-33 ns per cycle from its anchor).
        JitClock::Perf => {
            let cycles = counter();
            clock.cycles_to_ns(cycles).map_err(JitDumpError::ClockRead)
        }
        JitClock::Monotonic => Ok(monotonic_ns()),
    }
}

impl JitDump {
    /// Opens the process clock ([`perfclock::init`]), creates `dir/jit-<pid>.dump`, writes its
    /// header, maps its first page executable (perf's marker) and writes
    /// `dir/jit-<pid>.dump.timeconv`. If this process already has a dump open in `dir`, returns
    /// a handle to it instead (see [`JitDump`]).
    ///
    /// Both files are created exclusively ([`shared_file::create_exclusive`]): never through a
    /// link, never into a file another user could have prepared; a stale file of an earlier
    /// process with this pid is replaced only if it is a regular file of this user that no live
    /// writer holds (the dump's lock, held while it is open, proves its writer alive).
    ///
    /// The dump is created with mode 0644 (less the umask): `perf inject` may run as another
    /// user and must read it, and only this process should write it.
    ///
    /// # Errors
    /// [`JitDumpError::Clock`] if the clock cannot be opened; [`JitDumpError::NameTaken`] if a
    /// link, a FIFO, a device, a directory or another user's file is at either name (it is left
    /// as it was); [`JitDumpError::NameLive`] if another live writer's dump is at the name (a
    /// process with the same pid in another pid namespace; left as it was, with its sidecar);
    /// [`JitDumpError::Io`] if the
    /// directory is missing or not writable, the disk is full, or the file cannot be mapped
    /// executable (a `noexec` mount); [`JitDumpError::ClockRead`] if the conversion cannot be
    /// read.
    pub fn create(dir: impl AsRef<Path>) -> Result<JitDump, JitDumpError> {
        JitDump::create_with_clock(dir, JitClock::Arch)
    }

    /// As [`JitDump::create`], with the timestamps in `jit_clock` ([`JitClock::Arch`] is what
    /// [`JitDump::create`] uses). The sidecar records the clock (`clock=`).
    ///
    /// # Errors
    /// As [`JitDump::create`]; [`JitDumpError::ClockMismatch`] if this process already has a
    /// dump open in `dir` in another clock.
    pub fn create_with_clock(
        dir: impl AsRef<Path>,
        jit_clock: JitClock,
    ) -> Result<JitDump, JitDumpError> {
        let clock = perfclock::init().map_err(JitDumpError::Clock)?;
        let names = Names::new(dir.as_ref(), std::process::id());
        let key = FileKey::of(names.dir, names.pid).map_err(io_error("create", &names.path))?;
        let mut open = OPEN.lock();
        if let Some(shared) = open.get(key) {
            if shared.jit_clock != jit_clock {
                return Err(JitDumpError::ClockMismatch(ClockMismatch {
                    path: shared.path.clone(),
                    open: shared.jit_clock,
                    requested: jit_clock,
                }));
            }
            return Ok(JitDump {
                shared: Some(shared),
            });
        }
        let shared = Arc::new(Shared::create(clock, jit_clock, &names, key)?);
        open.insert(key, &shared);
        Ok(JitDump {
            shared: Some(shared),
        })
    }

    fn shared(&self) -> &Shared {
        self.shared
            .as_deref()
            .expect("only close and drop take the dump, and both consume the handle")
    }

    /// The dump file, `dir/jit-<pid>.dump`.
    pub fn path(&self) -> &Path {
        &self.shared().path
    }

    /// The conversion record, `dir/jit-<pid>.dump.timeconv`.
    pub fn timeconv_path(&self) -> &Path {
        &self.shared().timeconv_path
    }

    /// The perfclock clock of the process (its counter stamps `arch` records, its conversion
    /// the `perf` ones and the sidecar).
    pub fn clock(&self) -> &'static Clock {
        self.shared().clock
    }

    /// The clock of the dump's timestamps.
    pub fn jit_clock(&self) -> JitClock {
        self.shared().jit_clock
    }

    /// Records that `code` now sits at `addr` under `name`: a `JIT_CODE_LOAD` stamped with the
    /// counter at this call. Call it before the code first runs, so samples in it follow the
    /// record. Returns the record's `code_index` (unique and increasing; perf names the image
    /// `jitted-<pid>-<code_index>.so`). Every byte of `name` except NUL passes through as is
    /// (perf prints it as a C string).
    ///
    /// The record reaches the file in one write; if the write fails or is short, the file is
    /// truncated back to its last complete record. Also refreshes the timeconv record, at most
    /// once per second and only when the conversion or its bound changed; a failed refresh is
    /// not reported here (the record is written), but [`JitDump::close`] rewrites it and
    /// reports failure, and [`JitDump::write_timeconv`] does so on demand.
    ///
    /// # Errors
    /// [`JitDumpError::NameContainsNul`], [`JitDumpError::EmptyCode`],
    /// [`JitDumpError::RecordTooLarge`] for arguments perf cannot represent (nothing is
    /// written); [`JitDumpError::ForkChild`] in a fork child of the process that created the
    /// dump (nothing is written); [`JitDumpError::Io`] when the write fails (e.g. `ENOSPC`);
    /// [`JitDumpError::Torn`] after a failure that could not be cleaned up.
    pub fn code_load(&self, name: &[u8], addr: u64, code: &[u8]) -> Result<u64, JitDumpError> {
        self.code_load_with_debug_info(name, addr, code, &[])
    }

    /// [`JitDump::code_load`] preceded by a `JIT_CODE_DEBUG_INFO` record of `entries` (source
    /// lines of `code`), both stamped with one clock read and written under one lock
    /// acquisition: `perf inject --jit` gives a debug record to the next load in the file, so no
    /// other thread's load may come between them. With no entries it is `code_load`.
    ///
    /// # Errors
    /// As [`JitDump::code_load`], and for the entries (nothing is written then):
    /// [`JitDumpError::NameContainsNul`] for a file name with a NUL (`position` is its offset in
    /// that name), [`JitDumpError::RecordTooLarge`] if the debug record's size does not fit its
    /// 32-bit size field (`name_len` is then the entries' count).
    pub fn code_load_with_debug_info(
        &self,
        name: &[u8],
        addr: u64,
        code: &[u8],
        entries: &[DebugEntry<'_>],
    ) -> Result<u64, JitDumpError> {
        let shared = self.shared();
        shared.check_process()?;
        // Encoded outside the lock: copying a large code blob must not hold up other threads.
        let records = LoadRecords::encode(shared.pid, name, addr, code, entries)?;
        shared.append_load(records)
    }

    /// Rewrites the timeconv record now, with the clock's current conversion and bound.
    ///
    /// # Errors
    /// [`JitDumpError::ClockRead`] if the conversion cannot be read; [`JitDumpError::Io`] if the
    /// record cannot be written; [`JitDumpError::ForkChild`] in a fork child.
    pub fn write_timeconv(&self) -> Result<(), JitDumpError> {
        let shared = self.shared();
        shared.check_process()?;
        shared.write_timeconv()
    }

    /// Closes this handle. The last handle of the dump writes `JIT_CODE_CLOSE`, rewrites the
    /// timeconv record and unmaps the marker. Call it once every `code_load` has returned;
    /// dropping the handle does the same, ignoring errors.
    ///
    /// # Errors
    /// As [`JitDump::code_load`] for the close record and [`JitDump::write_timeconv`] for the
    /// timeconv record; the marker is unmapped either way. [`JitDumpError::ForkChild`] in a
    /// fork child, where nothing is written (the child's copy is freed).
    pub fn close(mut self) -> Result<(), JitDumpError> {
        self.release()
    }

    /// Gives up this handle's share of the dump; the last one finishes it.
    fn release(&mut self) -> Result<(), JitDumpError> {
        let Some(shared) = self.shared.take() else {
            return Ok(());
        };
        if let Err(error) = shared.check_process() {
            // A fork child: its registry may be locked by a thread that no longer exists, and
            // the dump is not its to finish. Dropping the Arc frees the child's copy (the last
            // one unmaps the child's copy of the marker).
            drop(shared);
            return Err(error);
        }
        let last = {
            let mut open = OPEN.lock();
            let last = Arc::into_inner(shared);
            if let Some(last) = &last {
                open.remove(last.key);
            }
            last
        };
        match last {
            Some(shared) => shared.finish(),
            None => Ok(()),
        }
    }
}

/// The names of one process's dump in one directory.
struct Names<'a> {
    dir: &'a Path,
    pid: u32,
    name: String,
    path: PathBuf,
    timeconv_name: String,
    timeconv_path: PathBuf,
}

impl Names<'_> {
    fn new(dir: &Path, pid: u32) -> Names<'_> {
        let name = perfclock_perfdata::jitdump_file_name(pid);
        let timeconv_name = format!("{name}{}", timeconv::SUFFIX);
        Names {
            dir,
            pid,
            path: dir.join(&name),
            timeconv_path: dir.join(&timeconv_name),
            name,
            timeconv_name,
        }
    }
}

/// The error of `op` on `path`, for `map_err`.
fn io_error(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> JitDumpError {
    let path = path.to_owned();
    move |source| JitDumpError::Io { op, path, source }
}

/// The error of an exclusive create in `dir`, for `map_err`.
fn create_error(dir: &Path) -> impl FnOnce(CreateError) -> JitDumpError + '_ {
    move |error| match error {
        CreateError::Taken(taken) => JitDumpError::NameTaken(taken),
        CreateError::Live(live) => JitDumpError::NameLive(live),
        CreateError::Io { path, source } => JitDumpError::Io {
            op: "create",
            path,
            source,
        },
        other => JitDumpError::Io {
            op: "create",
            path: dir.to_owned(),
            source: io::Error::other(other),
        },
    }
}

impl Shared {
    /// Creates the dump and its sidecar: the header written, the first page mapped executable
    /// (perf's marker), the timeconv record written. On failure nothing is left behind.
    fn create(
        clock: &'static Clock,
        jit_clock: JitClock,
        names: &Names<'_>,
        key: FileKey,
    ) -> Result<Shared, JitDumpError> {
        let boot_id = time::boot_id().map_err(io_error("read", Path::new(time::BOOT_ID_PATH)))?;
        // The dump first: its lock is what proves a live writer's sidecar its own, so another
        // writer's dump at the name fails this before its sidecar is touched.
        let file = shared_file::create_exclusive(names.dir, &names.name, 0o644)
            .map_err(create_error(names.dir))?;
        let opened = (|| {
            // The sidecar is renamed over later, so only a stale file of ours may be at its
            // name (never locked: the dump's lock, held now, speaks for it); if the name is
            // taken, the dump goes again.
            shared_file::remove_stale_at(names.dir, &names.timeconv_name)
                .map_err(create_error(names.dir))?;
            let flags = match jit_clock {
                JitClock::Arch => record::FLAGS_ARCH_TIMESTAMP,
                JitClock::Perf | JitClock::Monotonic => 0,
            };
            let header = record::header(names.pid, timestamp(clock, jit_clock)?, flags);
            write_once(&file, &header, 0).map_err(io_error("write header", &names.path))?;
            let marker = ExecMarkerMapping::new(&file).map_err(io_error(
                "map (PROT_EXEC marker for perf record; noexec mount?)",
                &names.path,
            ))?;
            let shared = Shared {
                clock,
                jit_clock,
                path: names.path.clone(),
                timeconv_path: names.timeconv_path.clone(),
                pid: names.pid,
                boot_id,
                key,
                state: Mutex::new(State {
                    file,
                    end: header.len() as u64,
                    next_index: 0,
                    torn: false,
                }),
                timeconv: Mutex::new(None),
                _marker: marker,
            };
            // Not `finish` on failure: no close record for a dump that never opened.
            shared.write_timeconv()?;
            Ok(shared)
        })();
        // A dump without its header, marker or sidecar is of no use to perf.
        opened.inspect_err(|_| {
            let _ = std::fs::remove_file(&names.path);
        })
    }

    fn check_process(&self) -> Result<(), JitDumpError> {
        ForkChild::check(self.pid, std::process::id()).map_err(JitDumpError::ForkChild)
    }

    /// Stamps `records` with one clock read and the next code index, and appends them in one
    /// locked write: `perf inject --jit` gives a debug record to the next load in the file, so no
    /// other thread's load may come between them.
    fn append_load(&self, records: LoadRecords) -> Result<u64, JitDumpError> {
        let LoadRecords { mut bytes, load_at } = records;
        let index = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let index = state.next_index;
            let stamp = timestamp(self.clock, self.jit_clock)?;
            let (debug_info, load) = bytes.split_at_mut(load_at);
            if !debug_info.is_empty() {
                record::patch_timestamp(debug_info, stamp);
            }
            record::patch_timestamp(load, stamp);
            record::patch_code_index(load, index);
            self.append(&mut state, &bytes)?;
            state.next_index += 1;
            index
        };
        self.refresh_timeconv();
        Ok(index)
    }

    fn write_timeconv(&self) -> Result<(), JitDumpError> {
        let mut published = self.timeconv.lock().unwrap_or_else(PoisonError::into_inner);
        self.publish(&mut published)
    }

    /// The close record and the last timeconv record; the marker is unmapped when `self` drops.
    fn finish(self) -> Result<(), JitDumpError> {
        let close = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let mut bytes = Vec::with_capacity(record::PREFIX_SIZE);
            timestamp(self.clock, self.jit_clock).and_then(|stamp| {
                record::code_close(&mut bytes, stamp);
                self.append(&mut state, &bytes)
            })
        };
        let timeconv = self.write_timeconv();
        close.and(timeconv)
    }

    /// Writes one whole record at the end, or leaves the file as it was.
    fn append(&self, state: &mut State, bytes: &[u8]) -> Result<(), JitDumpError> {
        if state.torn {
            return Err(JitDumpError::Torn {
                path: self.path.clone(),
            });
        }
        match write_once(&state.file, bytes, state.end) {
            Ok(()) => {
                state.end += bytes.len() as u64;
                Ok(())
            }
            Err(source) => {
                // A short write left part of the record; cut it so the file ends at a record
                // boundary and later records are not read as part of this one.
                if state.file.set_len(state.end).is_err() {
                    state.torn = true;
                }
                Err(JitDumpError::Io {
                    op: "write record",
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }

    /// The timeconv refresh from `code_load`: skipped if another thread is at it, if the last
    /// write is under [`TIMECONV_REFRESH_INTERVAL`] old, or if nothing changed.
    fn refresh_timeconv(&self) {
        let Ok(mut published) = self.timeconv.try_lock() else {
            return;
        };
        let Some(last) = *published else {
            return;
        };
        if last.at.elapsed() < TIMECONV_REFRESH_INTERVAL {
            return;
        }
        let unchanged = read_conversion(self.clock).is_ok_and(|c| c == last.conversion)
            && self.sidecar_bound_ns(counter()) == last.error_bound_ns;
        if unchanged {
            // Checked again in a second, not on every load until then.
            *published = Some(Published {
                at: Instant::now(),
                ..last
            });
            return;
        }
        // Best effort by design (see `code_load`); `close` reports a failure to write it.
        let _ = self.publish(&mut published);
    }

    /// The bound a sidecar written at counter value `cycles` carries: the clock's own (0 in
    /// kernel mode) plus how far the recorded conversion is from the clock there (perf's form
    /// of paravirt mode's pvclock drifts; 0 in the other modes). A sidecar with paravirt mode's
    /// exact form (`pvclock=`) carries the clock's own only: its readers anchor the conversion
    /// where they use it and add the drift from there.
    fn sidecar_bound_ns(&self, cycles: u64) -> u64 {
        let drift = if paravirt_form(self.clock).is_some() {
            0
        } else {
            self.clock.conversion_error_ns(cycles)
        };
        self.clock.error_bound_ns().saturating_add(drift)
    }

    fn publish(&self, published: &mut Option<Published>) -> Result<(), JitDumpError> {
        let conversion = read_conversion(self.clock)?;
        let written = counter();
        let error_bound_ns = self.sidecar_bound_ns(written);
        let record = TimeConvRecord::new(
            self.pid,
            self.boot_id,
            self.clock.mode().into(),
            perfclock_core::counter::COUNTER_NAME,
            conversion,
            error_bound_ns,
            written,
        )
        .with_clock(self.jit_clock);
        let record = match paravirt_form(self.clock) {
            Some(pvclock) => record.with_pvclock(pvclock),
            None => record,
        };
        record
            .write_atomic(&self.timeconv_path)
            .map_err(|source| JitDumpError::Io {
                op: "write timeconv record",
                path: self.timeconv_path.clone(),
                source,
            })?;
        *published = Some(Published {
            conversion,
            error_bound_ns,
            at: Instant::now(),
        });
        Ok(())
    }
}

impl Drop for JitDump {
    fn drop(&mut self) {
        // Best effort: `close` is the way to learn about failures.
        let _ = self.release();
    }
}

/// One positional write of all of `bytes`; a short write is an error (`WriteZero`) so the
/// caller can truncate it away. Retried only on `EINTR`, which writes nothing.
fn write_once(file: &File, bytes: &[u8], at: u64) -> io::Result<()> {
    loop {
        match file.write_at(bytes, at) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(n) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("short write: {n} of {} bytes (disk full?)", bytes.len()),
                ))
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        }
    }
}

/// In paravirt mode, the entry's parameters and `C`: the record's exact form, from which a
/// reader anchors the conversion at its recording (`TimeConvRecord::conversion_at`).
fn paravirt_form(clock: &perfclock::Clock) -> Option<crate::timeconv::PvclockConversion> {
    let paravirt = clock.paravirt()?;
    let params = paravirt.reader().params().ok()?;
    Some(crate::timeconv::PvclockConversion {
        params,
        offset_ns: paravirt.offset().offset_ns,
    })
}

/// A `JIT_CODE_LOAD`, preceded by a `JIT_CODE_DEBUG_INFO` of its source lines unless there are
/// none, encoded with placeholder stamps and code index for [`Shared::append_load`] to patch.
struct LoadRecords {
    bytes: Vec<u8>,
    /// Where the load record starts in `bytes`.
    load_at: usize,
}

impl LoadRecords {
    fn encode(
        pid: u32,
        name: &[u8],
        addr: u64,
        code: &[u8],
        entries: &[DebugEntry<'_>],
    ) -> Result<Self, JitDumpError> {
        let load_size = record::check_load(name, code.len())?;
        let debug_size = if entries.is_empty() {
            0
        } else {
            record::check_debug_info(entries)?
        };
        let mut bytes = Vec::with_capacity(debug_size + load_size);
        if !entries.is_empty() {
            record::code_debug_info(&mut bytes, 0, addr, entries)?;
        }
        let load_at = bytes.len();
        record::code_load(
            &mut bytes,
            &CodeLoad {
                timestamp: 0,
                pid,
                tid: thread::gettid(),
                addr,
                code_index: 0,
                name,
                code,
            },
        )?;
        Ok(Self { bytes, load_at })
    }
}
