//! `perfclock serve`: one calibration per machine. Calibrates the perf clock in this process
//! (perfclock-calib's refiner, as a client would) and mirrors its conversion and bound into a
//! shared page (`perfclock_core::shared_page`) that every client maps read-only instead of
//! calibrating on its own. On a KVM guest read through paravirt mode it publishes the boot's
//! constant offset instead (`perfclock_core::published_offset`) and exits: nothing to refresh.
//!
//! ```text
//! perfclock serve [--path P] [--once]
//! ```
//! Foreground, logs to stderr, stops on SIGINT/SIGTERM (the page stays; its heartbeat stops, so
//! clients' bound turns unknown after `STALE_AFTER_NS`). In kernel mode it says so and exits.
//! `--once` publishes the paravirt offset and exits (an error where there is none to publish).
//!
//! # The page and the file
//! The page lives in a memfd sealed against shrinking, growing and other writers
//! (`perfclock_event::sealed_page`), mapped writable by this process alone; a thread hands its
//! descriptor to every client that connects to the socket `P.sock`, and clients map it
//! read-only: no truncation can fault them. The file `P` holds a copy, written with `pwrite`
//! every poll (never mapped: nothing done to it can fault the server either), for the trust
//! checks clients make and for a server started later to continue the conversion.
//!
//! Default [`perfclock::shared_page::SYSTEM_PATH`] as root, `$XDG_RUNTIME_DIR/perfclock/clock`
//! otherwise. Its directory is created with mode 0755 if missing and must be a real directory
//! owned by this user and writable by no one else (so nobody else can put a file there). A new
//! file is written complete under a temporary name (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0644,
//! `write` and `fsync`: a full file system is an error, never a fault) and renamed into place; a
//! page left by an earlier server of this user is continued (never stepped back); a file there
//! that is not a perfclock page is an error, never overwritten. One server per directory: it
//! holds an exclusive `flock` on the directory.
//!
//! # What is published
//! Every [`POLL_INTERVAL`] the server takes the in-process conversion and bound; when they
//! changed, it publishes a line that continues the one in the page (perfclock-calib's
//! `continue_within`: the same slewing the in-process refiner does between its own fits), with
//! the union of both bounds while the two switch; every poll refreshes the heartbeat. After a
//! clock jump the in-process refiner detected, the new line is published as it is.
//!
//! # Safety
//! The memfd is mapped `MAP_SHARED` read-write and written only through the core's atomic
//! writer; the signal handler only stores an atomic.
#![allow(unsafe_code)]

use std::fs::{DirBuilder, File};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use perfclock::paravirt::{self, OffsetSource};
use perfclock::shared_page::socket_path;
use perfclock::{Clock, Error};
use perfclock_calib::published::{continue_within, union_bound, Solution};
use perfclock_calib::{CalibratedClock, CalibrationOptions};
use perfclock_core::counter;
use perfclock_core::published_offset::{OffsetOrigin, PublishedOffset};
use perfclock_core::shared_page::{
    parse, SharedPageReader, SharedPageWriter, FILE_BYTES, HEADER_OFFSET, HEARTBEAT_INTERVAL_NS,
    MAGIC,
};
use perfclock_core::PageDefect;
use perfclock_event::sealed_page;

use crate::output::errln;

const NAME: &str = "perfclock serve";
/// How often the server looks for a new in-process publication and refreshes the heartbeat
/// (at most [`HEARTBEAT_INTERVAL_NS`]).
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// A status line this often.
const STATUS_INTERVAL: Duration = Duration::from_secs(60);
/// Horizon over which a line that would step back slews into the new one, as the in-process
/// refiner's (its longest refinement pause).
const SLEW_HORIZON_NS: f64 = 1e9;

const _: () = assert!(POLL_INTERVAL.as_nanos() <= HEARTBEAT_INTERVAL_NS as u128);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(_signal: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Runs the server on `path` (or the default location) until SIGINT or SIGTERM; with `once`,
/// publishes the paravirt offset and exits.
pub(crate) fn run(path: Option<PathBuf>, once: bool) -> ExitCode {
    match serve(path, once) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            errln!("{NAME}: error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn serve(path: Option<PathBuf>, once: bool) -> Result<(), String> {
    match Clock::open_kernel_only() {
        Ok(_) => {
            errln!(
                "{NAME}: kernel mode: the kernel publishes the perf clock's conversion \
                 (cap_user_time_zero=1), so every process reads it exactly and needs no server; \
                 publishing nothing"
            );
            return Ok(());
        }
        Err(Error::KernelWithholdsTime(why)) => errln!("{NAME}: calibrated mode: {why}"),
        Err(other) => return Err(format!("no perf clock: {other}")),
    }
    let path = match path {
        Some(path) => path,
        None => perfclock::shared_page::default_server_path().ok_or(
            "no XDG_RUNTIME_DIR for a per-user page: name the file with --path (in a directory \
             only you can write)",
        )?,
    };
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_owned();
    let dir_lock = prepare_dir(&dir)?;
    let boot_id = boot_id()?;
    if paravirt::disabled_by_environment() {
        if once {
            return Err(format!(
                "--once publishes the paravirt offset, which {}=off disables",
                paravirt::ENV
            ));
        }
    } else {
        match publish_paravirt_offset(&dir, boot_id) {
            Ok(()) => return Ok(()),
            Err(message) if once => return Err(message),
            Err(message) => errln!("{NAME}: {message}; serving a calibration instead"),
        }
    }
    // SAFETY: both calls have no preconditions.
    let (pid, euid) = unsafe { (libc::getpid(), libc::geteuid()) };
    let existing = reuse_existing(&path, euid)?;
    let inherited = existing.as_ref().and_then(|(_, bytes)| {
        let snapshot = parse(bytes).ok()?;
        (snapshot.boot_id == boot_id).then_some(Solution {
            conversion: snapshot.conversion,
            bound: snapshot.bound,
        })
    });
    install_stop_handlers();
    let started = Instant::now();
    let clock = CalibratedClock::start(CalibrationOptions::default())
        .map_err(|error| format!("calibration failed: {error}"))?;
    errln!(
        "{NAME}: calibrated in {:.1} ms, bound {} ns",
        started.elapsed().as_secs_f64() * 1e3,
        clock.error_bound_ns()
    );
    let mut server = Server {
        clock,
        published: inherited,
        jumps: 0,
    };
    server.jumps = server.clock.stats().jumps;
    let target = server.target()?;
    let now = counter_now()?;
    let page = Page::new(existing.as_ref().map(|(_, bytes)| bytes))
        .map_err(|error| format!("cannot make the page in memory: {error}"))?;
    let writer = page.writer();
    writer.claim(boot_id, pid as u32, now);
    server.publish(&writer, target, now);
    let file = match existing {
        Some((file, _)) => {
            page.persist(&file)
                .map_err(|error| publish_error(&path, &path, &error))?;
            if inherited.is_some() {
                errln!(
                    "{NAME}: continuing the conversion of the earlier server in {}",
                    path.display()
                );
            }
            file
        }
        None => create_new(&dir, &path, &page.bytes()?)?,
    };
    page.seal()
        .map_err(|error| format!("cannot seal the page: {error}"))?;
    let socket = socket_path(&path);
    serve_descriptors(&socket, &page)?;
    errln!(
        "{NAME}: serving (pid {pid}) {} through {}; clients read it through \
         PERFCLOCK_SHARED_PAGE={} or the default location; SIGINT/SIGTERM stops",
        path.display(),
        socket.display(),
        path.display()
    );
    let mut last_status = Instant::now();
    while !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(POLL_INTERVAL);
        let now = counter_now()?;
        match server.target() {
            Ok(target) => server.publish(&writer, target, now),
            Err(message) => errln!("{NAME}: {message}; keeping the last publication"),
        }
        if let Err(error) = page.persist(&file) {
            errln!("{NAME}: cannot update {}: {error}", path.display());
        }
        if last_status.elapsed() >= STATUS_INTERVAL {
            last_status = Instant::now();
            let stats = server.clock.stats();
            errln!(
                "{NAME}: bound {} ns, {} refinements, {} jumps, refiner CPU {:.1} ms",
                server
                    .published
                    .map_or(u64::MAX, |sol| sol.bound.at(counter_now().unwrap_or(0))),
                stats.refinements,
                stats.jumps,
                stats.thread_cpu_ns as f64 / 1e6
            );
        }
    }
    errln!(
        "{NAME}: stopping; {} stays, its heartbeat stops, so clients report an unknown bound \
         after {} s until a server runs again",
        path.display(),
        perfclock_core::shared_page::STALE_AFTER_NS / 1_000_000_000
    );
    let _ = std::fs::remove_file(&socket);
    drop(dir_lock);
    Ok(())
}

/// Kernel-stamped brackets per record kind that cross-check the published offset (taken once).
const OFFSET_BRACKETS_PER_KIND: usize = 200;

/// On a KVM guest read through paravirt mode: measures `C` (the kernel log, cross-checked
/// against brackets) and publishes it in `dir` (see `perfclock::shared_page::OFFSET_SYSTEM_PATH`).
/// `C` is fixed for the boot: there is nothing to refresh afterwards.
fn publish_paravirt_offset(dir: &Path, boot_id: [u64; 2]) -> Result<(), String> {
    let measured = paravirt::measure_offset(OFFSET_BRACKETS_PER_KIND)
        .map_err(|refusal| format!("no paravirt offset to publish: {}", chain(&refusal)))?;
    let origin = match measured.source {
        OffsetSource::KernelLog => OffsetOrigin::KernelLog,
        OffsetSource::Brackets => OffsetOrigin::Brackets,
        other => {
            return Err(format!(
                "no paravirt offset to publish: it came from {other}"
            ))
        }
    };
    let intersection = measured
        .intersection
        .ok_or("no paravirt offset to publish: no bracket intersection checked it")?;
    let offset = PublishedOffset {
        boot_id,
        offset_ns: measured.offset_ns,
        origin,
        intersection_ns: (intersection.lo(), intersection.hi()),
        brackets: intersection.brackets(),
        writer_pid: std::process::id(),
    };
    let mut text = String::new();
    offset
        .encode(&mut text)
        .map_err(|_| "cannot format the offset".to_owned())?;
    let path = dir.join(OFFSET_FILE_NAME);
    let (file, temp) = create_temp(dir, &path)?;
    let written = (|| {
        use std::io::Write as _;
        (&file).write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, &path)
    })();
    written.map_err(|error| publish_error(&path, &temp, &error))?;
    errln!(
        "{NAME}: paravirt mode: published C = {} ns ({}, inside the intersection [{}, {}] ns of \
         {} kernel-stamped brackets) in {}; clients read it once at init(): nothing to refresh, \
         exiting",
        offset.offset_ns,
        measured.source,
        offset.intersection_ns.0,
        offset.intersection_ns.1,
        offset.brackets,
        path.display()
    );
    Ok(())
}

/// The published offset's file name, beside the page.
const OFFSET_FILE_NAME: &str = "pvclock-offset";

/// `error` and each of its causes, separated by `: `.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

struct Server {
    clock: CalibratedClock,
    /// What the file publishes now.
    published: Option<Solution>,
    /// Clock jumps the in-process refiner had seen at the last publication.
    jumps: u64,
}

impl Server {
    /// The in-process conversion and the bound that belongs to it (re-read if the refiner
    /// republished in between).
    fn target(&self) -> Result<Solution, String> {
        for _ in 0..100 {
            let bound = self.clock.bound_model();
            let conversion = self.clock.reader().conversion();
            if self.clock.bound_model() == bound {
                let conversion =
                    conversion.map_err(|error| format!("in-process page unreadable: {error}"))?;
                return Ok(Solution { conversion, bound });
            }
        }
        Err("the in-process refiner kept republishing".into())
    }

    /// Publishes `target` at counter value `now`, continuing the line in the file unless the
    /// refiner saw a clock jump; refreshes the heartbeat. A continuation that cannot be
    /// published safely now (see `continue_within`) waits for the next poll: the line in the file
    /// stays, its bound growing honestly.
    fn publish(&mut self, writer: &SharedPageWriter, target: Solution, now: u64) {
        let jumps = self.clock.stats().jumps;
        let Some(old) = self.published else {
            writer.store_bound(&target.bound, now);
            writer.publish(&target.conversion);
            writer.store_bound(&target.bound, now);
            self.published = Some(target);
            self.jumps = jumps;
            return;
        };
        if old.conversion == target.conversion && old.bound == target.bound {
            writer.store_bound(&old.bound, now);
            return;
        }
        let (next, publish_before) = if jumps != self.jumps {
            errln!(
                "{NAME}: the clock jumped (the refiner saw {} jumps); publishing the new line \
                 as it is",
                jumps - self.jumps
            );
            (target, u64::MAX)
        } else {
            let slope =
                f64::from(target.conversion.mult()) / (1u64 << target.conversion.shift()) as f64;
            let horizon = (SLEW_HORIZON_NS / slope) as u64;
            match continue_within(&old.conversion, &target, now, horizon) {
                Some(continued) => continued,
                None => {
                    writer.store_bound(&old.bound, now);
                    return;
                }
            }
        };
        if next.conversion != old.conversion {
            // A reader may pair either conversion with either bound while they switch.
            writer.store_bound(&union_bound(&old.bound, &next.bound, now), now);
            // The new line is above the old one only up to `publish_before`: a server preempted
            // past it (a loaded machine) must not publish it any more.
            if counter::read_counter().is_none_or(|late| late >= publish_before) {
                writer.store_bound(&old.bound, now);
                return;
            }
            writer.publish(&next.conversion);
        }
        writer.store_bound(&next.bound, now);
        self.published = Some(next);
        self.jumps = jumps;
    }
}

fn counter_now() -> Result<u64, String> {
    counter::read_counter().ok_or_else(|| "no counter on this architecture".to_owned())
}

fn boot_id() -> Result<[u64; 2], String> {
    perfclock_event::sys::boot_id().map_err(|error| {
        format!(
            "cannot read {}: {error}",
            perfclock_event::sys::BOOT_ID_PATH
        )
    })
}

fn install_stop_handlers() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, request_stop as *const () as libc::sighandler_t) };
    }
}

/// Creates `dir` (mode 0755) if missing, checks that only its owner (us) can write it, and
/// locks it: one server per directory.
fn prepare_dir(dir: &Path) -> Result<File, String> {
    match DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => {
            return Err(format!(
                "cannot create {}: {error} (create it, or choose another with --path)",
                dir.display()
            ))
        }
    }
    let handle = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|error| {
            format!(
                "cannot open {} as a directory without following a symlink: {error}",
                dir.display()
            )
        })?;
    let meta = handle.metadata().map_err(|error| error.to_string())?;
    // SAFETY: no preconditions.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is owned by uid {} with mode {:04o}: the page's directory must be owned by the \
             server's user (uid {euid}) and writable by no one else, or anyone who can write it \
             could replace the page (choose another with --path)",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(handle.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "another perfclock serve holds {} (one server per directory)",
            dir.display()
        ));
    }
    Ok(handle)
}

/// The page: a memfd mapped read-write by this process only, sealed once written (see
/// `perfclock_event::sealed_page`), handed to clients over the socket; unmapped on drop.
struct Page {
    memfd: File,
    base: NonNull<u8>,
}

impl Page {
    /// A new page, holding `inherited` (an earlier server's file) if given.
    fn new(inherited: Option<&Vec<u8>>) -> io::Result<Page> {
        let memfd = sealed_page::create_memfd(c"perfclock-clock", FILE_BYTES as u64)?;
        // SAFETY: maps FILE_BYTES of a memfd of exactly that size, shared and writable (before
        // the seals forbid new writable mappings); the kernel picks the address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).ok_or(io::ErrorKind::Other)?;
        let page = Page { memfd, base };
        if let Some(bytes) = inherited {
            // Before any client can see the page: its lock words continue the earlier
            // server's, so a client moving over from that page never pairs their values.
            use std::os::unix::fs::FileExt as _;
            page.memfd.write_at(&bytes[..FILE_BYTES], 0)?;
        }
        Ok(page)
    }

    fn writer(&self) -> SharedPageWriter {
        // SAFETY: a page-aligned FILE_BYTES mapping that lives while `self` does (the writers
        // made here are used only while the page lives); this process is the page's only
        // writer (the directory lock, the seals), and clients only load atomically.
        unsafe { SharedPageWriter::new(self.base) }
    }

    /// A consistent copy of the page's bytes.
    fn bytes(&self) -> Result<Vec<u8>, String> {
        // SAFETY: as for `writer`; read through atomics.
        let reader = unsafe { SharedPageReader::new(self.base) };
        let layout = reader
            .snapshot()
            .map_err(|defect| format!("the page is unreadable: {defect}"))?;
        let mut bytes = vec![0u8; FILE_BYTES];
        bytes[..layout.len()].copy_from_slice(&layout);
        Ok(bytes)
    }

    /// Writes the page's bytes into `file` (with `pwrite`: the file is never mapped, so what
    /// others do to it cannot fault this process), for a server started later to continue.
    fn persist(&self, file: &File) -> io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        let bytes = self.bytes().map_err(io::Error::other)?;
        file.write_all_at(&bytes, 0)
    }

    fn seal(&self) -> io::Result<()> {
        sealed_page::seal(&self.memfd)
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), FILE_BYTES) };
    }
}

/// Listens on `socket` (replacing a socket an earlier server left: the directory is ours and
/// locked) and hands every client that connects the page's sealed descriptor, from a thread of
/// its own. A client costs nothing once it has its descriptor: it keeps no connection.
fn serve_descriptors(socket: &Path, page: &Page) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt as _;
    if std::fs::symlink_metadata(socket).is_ok_and(|meta| meta.file_type().is_socket()) {
        let _ = std::fs::remove_file(socket);
    }
    let listener = UnixListener::bind(socket)
        .map_err(|error| format!("cannot listen on {}: {error}", socket.display()))?;
    // Anyone may connect: the page's trust comes from this process's credentials, which the
    // client reads (SO_PEERCRED), not from the socket file.
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .map_err(|error| format!("cannot open {} to clients: {error}", socket.display()))?;
    let memfd = page
        .memfd
        .try_clone()
        .map_err(|error| format!("cannot share the page: {error}"))?;
    std::thread::Builder::new()
        .name("perfclock-serve-fds".into())
        .spawn(move || {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        // A client that does not read its descriptor holds this thread no
                        // longer.
                        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                        let _ = sealed_page::send_fd(&stream, memfd.as_fd());
                    }
                    // Out of descriptors or memory: retry later rather than spin.
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })
        .map_err(|error| format!("cannot start the socket's thread: {error}"))?;
    Ok(())
}

/// The file at `path` if an earlier server of this user left it (a regular file owned by us,
/// writable by us alone, with one link, holding a page in this format), mapped to be written in
/// place. A symlink, a FIFO, an empty file or a damaged page (or one of another version) is
/// replaced by a new file; any other file is an error: it is not ours to overwrite.
fn reuse_existing(path: &Path, euid: u32) -> Result<Option<(File, Vec<u8>)>, String> {
    let file = match File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        // A symlink (ELOOP), a FIFO, ...: replaced by a new file below.
        Err(_) => return Ok(None),
    };
    let meta = file.metadata().map_err(|error| error.to_string())?;
    let ours = meta.file_type().is_file()
        && meta.uid() == euid
        && meta.mode() & 0o022 == 0
        && meta.nlink() == 1;
    if !ours {
        return Ok(None);
    }
    let mut bytes = vec![0u8; FILE_BYTES + 1];
    let len = read_up_to(&file, &mut bytes)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    if len == 0 {
        // Emptied (`truncate -s 0`, `> file`): nothing in it to lose or to continue.
        return Ok(None);
    }
    if !has_page_magic(&bytes) {
        return Err(format!(
            "{} is not a perfclock page (no page magic): serve neither overwrites nor replaces \
             a file it did not write; remove it or choose another --path",
            path.display()
        ));
    }
    match parse(&bytes[..len]) {
        // A page of ours, complete, in this format (perhaps stale or from another boot): written
        // in place so that clients which mapped it keep reading it.
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

/// Whether `bytes` start a page header's magic at its place.
fn has_page_magic(bytes: &[u8]) -> bool {
    bytes
        .get(HEADER_OFFSET..HEADER_OFFSET + 8)
        .is_some_and(|magic| magic == MAGIC.to_ne_bytes())
}

/// Reads from the start of `file` until `buffer` is full or the file ends; the bytes read.
fn read_up_to(file: &File, buffer: &mut [u8]) -> io::Result<usize> {
    use std::os::unix::fs::FileExt as _;
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

/// Writes `bytes` under a temporary name in `dir` (`write`, then `fsync`: a full file system is
/// an error here, never a fault later) and renames it to `path`; the temporary file is removed on
/// every error. The file, open for the page's later updates.
fn create_new(dir: &Path, path: &Path, bytes: &[u8]) -> Result<File, String> {
    let (file, temp) = create_temp(dir, path)?;
    let result = (|| {
        use std::io::Write as _;
        (&file).write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    result.map_err(|error| publish_error(path, &temp, &error))?;
    Ok(file)
}

/// Creates `.NAME.PID.tmp` beside `path` in `dir` (new, mode 0644, never through a link).
fn create_temp(dir: &Path, path: &Path) -> Result<(File, PathBuf), String> {
    let name = path
        .file_name()
        .ok_or_else(|| format!("{} names no file", path.display()))?;
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
    .map_err(|error| format!("cannot create {}: {error}", temp.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(|error| publish_error(path, &temp, &error))?;
    Ok((file, temp))
}

/// Removes `temp` and says why `path` could not be published.
fn publish_error(path: &Path, temp: &Path, error: &io::Error) -> String {
    let _ = std::fs::remove_file(temp);
    let hint = if error.raw_os_error() == Some(libc::ENOSPC) {
        " (the file system is full: free space there or choose another --path)"
    } else {
        ""
    };
    format!("cannot publish {}: {error}{hint}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::TimeConversion;

    #[test]
    fn a_step_back_is_continued_not_taken() {
        let old = TimeConversion::new(1 << 31, 31, 1_000_000).unwrap();
        let target = Solution {
            conversion: TimeConversion::new(1 << 31, 31, 0).unwrap(),
            bound: perfclock_calib::published::BoundModel {
                base_ns: 10,
                growth_q48: 0,
                counter_ref: 5_000_000_000,
            },
        };
        let now = 5_000_000_000;
        let horizon = (SLEW_HORIZON_NS / 1.0) as u64;
        let (next, before) = continue_within(&old, &target, now, horizon).expect("a continuation");
        assert!(before > now);
        // Never below the old line from `now` to the end of the margin.
        for c in (now..before).step_by(1_000_000).chain([before]) {
            assert!(
                next.conversion.cycles_to_ns(c) >= old.cycles_to_ns(c),
                "{c}"
            );
        }
        assert!(next.bound.at(now) >= 1_000_000, "{:?}", next.bound);
    }
}
