//! The client side of `perfclock serve`: finding, judging and mapping the shared clock page
//! (layout: `perfclock_core::shared_page`), and reading the published paravirt offset
//! (`perfclock_core::published_offset`), so that a process reads the machine's one calibrated
//! conversion with no thread, no perf event and no ring of its own.
//!
//! # Where
//! `PERFCLOCK_SHARED_PAGE=PATH` names the page, `PERFCLOCK_SHARED_PAGE=off` disables it;
//! otherwise [`SYSTEM_PATH`] (a server run as root), then
//! `$XDG_RUNTIME_DIR/perfclock/clock` (a server run by this user).
//!
//! # Trust
//! Whoever can write the page can shift every client's clock. A page is used only if its file is
//! a regular file owned by root or by this process's real or effective uid (root only in a
//! setuid, setgid or file-capability process, which reads no `PERFCLOCK_*` or `XDG_RUNTIME_DIR`
//! either), not writable by group or others, and the server listening beside it (`PATH.sock`,
//! [`socket_path`]) runs as the file's owner (`SO_PEERCRED`) and hands out a sealed page in this
//! format's version, written in this boot, with a fresh heartbeat and a sane conversion;
//! [`probe`] says which test a page failed (for a file without a server, what is wrong with the
//! file's own bytes, read with `read()`).
//!
//! # Nothing done to the file can fault a client
//! A client never maps the file: it maps the memfd the server hands it over the socket, sealed
//! against shrinking (`perfclock_os::memfd`), which no one can truncate. Emptying,
//! overwriting or replacing the file or the socket changes nothing for clients that have their
//! page; new clients then find no valid page and calibrate on their own.
//!
//! # A server that stops
//! A client keeps reading the page it mapped (its conversion does not change under it), but once
//! the heartbeat is older than `STALE_AFTER_NS` (5 s) its bound is unknown (`u64::MAX`). A
//! server started again on the same path continues the conversion from the file (which the
//! server keeps up to date with `pwrite`); a client's next `perfclock::init()` (or
//! `Clock::reattach_shared_page`, both ordinary code) then maps the new server's page over the
//! old one at the same address, and the bound comes back. Reading the bound never reattaches: it
//! is async-signal-safe. A process that opens the clock while the page is stale refuses it and
//! calibrates on its own.
//!
//! # Safety
//! Unsafe code here builds the core's `SharedPageReader` over the page, which is a
//! [`Mapping`] (read-only, `MAP_SHARED`) of a sealed memfd at least as long as the mapping,
//! replaced whole (`MAP_FIXED`) only by another such page whose lock words are all past the old
//! one's; the reader is dropped before the mapping and reads it only through atomics.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use perfclock_core::counter;
use perfclock_core::shared_page::{
    parse, SharedPageReader, SharedSnapshot, FILE_BYTES, HEADER_OFFSET, HEARTBEAT_INTERVAL_NS,
    MIRROR_OFFSET, PRIMARY_OFFSET, STALE_AFTER_NS,
};
use perfclock_core::{BootId, PageDefect, PageReader};

use perfclock_core::published_offset::{self, PublishedOffset};
use perfclock_os::{env, memfd, peer, time, Access, Mapping, Sharing};

use crate::Refusal;

/// The environment variable naming the page (switched off, `off`, `0`, `false` or `no` in any
/// case, it disables the shared page; `on`, `1`, `true`, `yes` mean the default places).
pub const ENV: &str = "PERFCLOCK_SHARED_PAGE";
/// Where a server run as root publishes.
pub const SYSTEM_PATH: &str = "/run/perfclock/clock";
/// The file name under `$XDG_RUNTIME_DIR` of a server run by a user.
pub const USER_RELATIVE_PATH: &str = "perfclock/clock";

/// The pages a client tries, in order: `None` when `PERFCLOCK_SHARED_PAGE=off`.
pub fn candidates() -> Option<Vec<PathBuf>> {
    candidates_from(env::env_var_os(ENV), env::env_var_os("XDG_RUNTIME_DIR"))
}

fn candidates_from(setting: Option<OsString>, runtime: Option<OsString>) -> Option<Vec<PathBuf>> {
    // A switch's spelling is a switch (the one parser of the project's variables); anything
    // else is a path.
    let switch = setting
        .as_deref()
        .and_then(|value| env::parse_switch(ENV, value).ok());
    match (setting, switch) {
        (_, Some(Some(false))) => None,
        (Some(value), None) => Some(vec![PathBuf::from(value)]),
        _ => {
            let mut paths = vec![PathBuf::from(SYSTEM_PATH)];
            if let Some(runtime) = runtime.filter(|dir| !dir.is_empty()) {
                let user = Path::new(&runtime).join(USER_RELATIVE_PATH);
                if !paths.contains(&user) {
                    paths.push(user);
                }
            }
            Some(paths)
        }
    }
}

/// Where a server run by this user publishes by default: [`SYSTEM_PATH`] for root, else
/// `$XDG_RUNTIME_DIR/perfclock/clock` (`None` without `XDG_RUNTIME_DIR`).
pub fn default_server_path() -> Option<PathBuf> {
    if peer::effective_uid() == 0 {
        return Some(PathBuf::from(SYSTEM_PATH));
    }
    let runtime = env::env_var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty())?;
    Some(Path::new(&runtime).join(USER_RELATIVE_PATH))
}

/// The environment variable naming the published paravirt offset (switched off, `off`, `0`,
/// `false` or `no` in any case, it disables it; `on`, `1`, `true`, `yes` mean the default
/// place).
pub const OFFSET_ENV: &str = "PERFCLOCK_PUBLISHED_OFFSET";
/// The published paravirt offset's file name: a server writes it beside its page.
pub const OFFSET_FILE_NAME: &str = "pvclock-offset";

/// Where root publishes the paravirt offset (`perfclock serve`, `perfclock serve --once`):
/// [`OFFSET_FILE_NAME`] beside [`SYSTEM_PATH`], `/run/perfclock/pvclock-offset`.
pub fn offset_system_path() -> PathBuf {
    Path::new(SYSTEM_PATH).with_file_name(OFFSET_FILE_NAME)
}

/// The published offsets a client tries: the path `PERFCLOCK_PUBLISHED_OFFSET` names (none when
/// it is switched off), else [`offset_system_path`]. In an AT_SECURE process the variable is not
/// read.
fn offset_candidates() -> Vec<PathBuf> {
    offset_candidates_from(env::env_var_os(OFFSET_ENV))
}

fn offset_candidates_from(setting: Option<OsString>) -> Vec<PathBuf> {
    // As for the page: a switch's spelling is a switch, anything else is a path.
    let switch = setting
        .as_deref()
        .and_then(|value| env::parse_switch(OFFSET_ENV, value).ok());
    match (setting, switch) {
        (_, Some(Some(false))) => Vec::new(),
        (Some(value), None) => vec![PathBuf::from(value)],
        _ => vec![offset_system_path()],
    }
}

/// Reads and judges the published paravirt offset at `path`: the trust checks of a shared page
/// (see the module docs), the format (`perfclock_core::published_offset`) and this boot's id.
/// Read once with `read()`, never mapped: nothing done to the file afterwards reaches the
/// caller.
///
/// # Errors
/// The [`Refusal`].
pub fn probe_published_offset(path: &Path) -> Result<PublishedOffset, Refusal> {
    probe_published_offset_of(path).map(|owned| owned.offset)
}

/// [`probe_published_offset`], with the uid of the file's owner: root's file is its
/// publisher's word, another's (this user's own) only a claim to check.
///
/// # Errors
/// The [`Refusal`].
pub fn probe_published_offset_of(path: &Path) -> Result<OwnedOffset, Refusal> {
    use std::io::Read as _;
    let (file, meta) = open_trusted(path)?;
    let mut bytes = Vec::with_capacity(published_offset::MAX_BYTES + 1);
    file.take(published_offset::MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| Refusal::Open {
            kind: error.kind(),
            errno: error.raw_os_error(),
        })?;
    let offset = published_offset::parse(&bytes).map_err(Refusal::Defect)?;
    if offset.boot_id != boot_id().ok_or(Refusal::NoBootId)? {
        return Err(Refusal::Defect(PageDefect::OtherBoot));
    }
    Ok(OwnedOffset {
        offset,
        owner: meta.uid(),
    })
}

/// A published offset and who published it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnedOffset {
    /// The offset, of this boot.
    pub offset: PublishedOffset,
    /// The uid of its file's owner: root's file is its publisher's word, another's (this
    /// user's own) only a claim to check.
    pub owner: u32,
}

/// The published paravirt offset that passes first, with its file owner's uid,
/// with the refusals of the files before it (an absent file is no refusal).
pub fn open_published_offset() -> (Option<OwnedOffset>, Vec<(PathBuf, Refusal)>) {
    let mut refused = Vec::new();
    for path in offset_candidates() {
        match probe_published_offset_of(&path) {
            Ok(accepted) => return (Some(accepted), refused),
            Err(refusal) if refusal.is_absent() => {}
            Err(refusal) => refused.push((path, refusal)),
        }
    }
    (None, refused)
}

/// What a client knows of the page it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedPageInfo {
    /// The file.
    pub path: PathBuf,
    /// The server process that last wrote it.
    pub server_pid: u32,
    /// Time since its last heartbeat, ns.
    pub heartbeat_age_ns: u64,
    /// The error bound now, ns (`u64::MAX` once stale).
    pub error_bound_ns: u64,
}

/// A validated page, mapped read-only for the life of the value.
#[derive(Debug)]
pub(crate) struct SharedMapping {
    /// Reads `page`, which outlives it (declared first: dropped first); `'static` only within
    /// this mapping, and handed out only borrowed from it.
    reader: SharedPageReader<'static>,
    /// The sealed memfd's page, replaced in place by [`SharedMapping::reattach`].
    page: Mapping,
    path: PathBuf,
    /// When [`SharedMapping::reattach`] last tried.
    last_reattach: Mutex<Option<Instant>>,
}

/// This boot's id.
pub(crate) fn boot_id() -> Option<BootId> {
    time::boot_id().ok()
}

/// Opens `path` without following a symlink and checks that whoever can write it may set this
/// process's clock: a regular file, owned by root or (outside AT_SECURE) by this process's real
/// or effective uid, not writable by group or others.
fn open_trusted(path: &Path) -> Result<(File, std::fs::Metadata), Refusal> {
    let open_error = |error: io::Error| Refusal::Open {
        kind: error.kind(),
        errno: error.raw_os_error(),
    };
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(open_error)?;
    let meta = file.metadata().map_err(open_error)?;
    if !meta.file_type().is_file() {
        return Err(Refusal::NotRegular);
    }
    if !trusted_owner(meta.uid()) {
        return Err(Refusal::OtherOwner { uid: meta.uid() });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Refusal::Writable { mode: meta.mode() });
    }
    Ok((file, meta))
}

/// Whether a file owned by `owner` may set this process's clock: root's always; this user's
/// (real or effective uid) unless the process runs setuid, setgid or with file capabilities
/// (AT_SECURE), where the real user is whoever started it and must not set a privileged
/// program's clock.
fn trusted_owner(owner: u32) -> bool {
    if owner == 0 {
        return true;
    }
    let (real, effective) = (peer::real_uid(), peer::effective_uid());
    !env::is_secure_execution() && (owner == real || owner == effective)
}

fn counter_now() -> u64 {
    counter::read_counter_or_zero()
}

impl SharedMapping {
    /// Opens `path` and maps it if it passes every check (see the module docs).
    pub(crate) fn open(path: &Path) -> Result<SharedMapping, Refusal> {
        // The file first: its server writes it every poll, so a page the file shows stale (a
        // server stopped or dead for the stale time) is refused without a connection, which a
        // stopped server's socket would queue and never answer. Any other defect of the file
        // is the server's to overrule (it rewrites the file every poll).
        let (file, meta) = open_trusted(path)?;
        let boot = boot_id().ok_or(Refusal::NoBootId)?;
        let judged = judge_file(file, boot);
        if let Err(stale @ Refusal::Defect(PageDefect::Stale { .. })) = judged {
            return Err(stale);
        }
        let connected = memfd::connect(&socket_path(path));
        let memfd = match receive_page(connected, meta.uid(), SERVER_TIMEOUT) {
            Ok(memfd) => memfd,
            // No server: the file's own bytes say what is wrong with it, if anything.
            Err(no_server @ Refusal::NoServer { .. }) => {
                return Err(judged.err().unwrap_or(no_server))
            }
            Err(refusal) => return Err(refusal),
        };
        let page = map_read_only(&memfd)?;
        let mapping = SharedMapping {
            // SAFETY: a page-aligned FILE_BYTES mapping of a sealed memfd at least that long
            // (it cannot shrink: the mapping cannot fault), that lives as long as `mapping`,
            // which owns the reader; the server writes it only through the core's atomic
            // writer.
            reader: unsafe { SharedPageReader::new(page.as_ptr()) },
            page,
            path: path.to_owned(),
            last_reattach: Mutex::new(None),
        };
        let snapshot = mapping.snapshot()?;
        snapshot
            .check_fresh(boot, counter_now())
            .map_err(Refusal::Defect)?;
        Ok(mapping)
    }

    /// After its server stopped: the page of a server started since on the same path, mapped
    /// over this one at the same address (`MAP_FIXED`), if it is fresh and every lock word in it
    /// is past this page's (a reader that started on this page then retries rather than pairing
    /// the two). At most once every [`REATTACH_INTERVAL`]; what fails leaves this page as it is.
    fn reattach(&self) {
        let Ok(mut last) = self.last_reattach.try_lock() else {
            return;
        };
        if last.is_some_and(|at| at.elapsed() < REATTACH_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        let Some(boot) = boot_id() else { return };
        let Ok((_, meta)) = open_trusted(&self.path) else {
            return;
        };
        let connected = memfd::connect(&socket_path(&self.path));
        let Ok(memfd) = receive_page(connected, meta.uid(), REATTACH_TIMEOUT) else {
            return;
        };
        let Ok(candidate) = map_read_only(&memfd) else {
            return;
        };
        // SAFETY: a page-aligned FILE_BYTES mapping of a sealed memfd, which outlives the
        // reader (both are dropped at the end of this function, the reader unused after this
        // statement).
        let new = unsafe { SharedPageReader::new(candidate.as_ptr()) }.snapshot();
        let usable = match (new, self.reader.snapshot()) {
            (Ok(new), Ok(old)) => {
                parse(&new).is_ok_and(|page| page.check_fresh(boot, counter_now()).is_ok())
                    && LOCK_WORDS
                        .iter()
                        .all(|&at| lock_word(&new, at) > lock_word(&old, at))
            }
            _ => false,
        };
        if usable {
            let _ = self.page.replace_with_file(memfd.as_fd(), Access::Read);
        }
    }

    fn snapshot(&self) -> Result<SharedSnapshot, Refusal> {
        let bytes = self.reader.snapshot().map_err(Refusal::Defect)?;
        parse(&bytes).map_err(Refusal::Defect)
    }

    /// The conversion's reader (the fast path's page and its mirror).
    pub(crate) fn page_reader(&self) -> PageReader<'_> {
        self.reader.page_reader()
    }

    /// The bound at counter value `now`: the server's, or `u64::MAX` once the heartbeat is
    /// older than `STALE_AFTER_NS` (or ahead of `now` by more than an interval). Loads only,
    /// async-signal-safe: it never reattaches ([`SharedMapping::reattach_if_stale`] does).
    pub(crate) fn error_bound_at(&self, now: u64) -> u64 {
        self.fresh_bound_at(now).unwrap_or(u64::MAX)
    }

    /// Maps the page of a server started since on the same path if this one's heartbeat is
    /// stale ([`SharedMapping::reattach`]); whether the bound is fresh afterwards. System
    /// calls and allocations: ordinary code only.
    pub(crate) fn reattach_if_stale(&self) -> bool {
        let now = counter_now();
        if self.fresh_bound_at(now).is_none() {
            self.reattach();
        }
        self.fresh_bound_at(counter_now()).is_some()
    }

    /// The server's bound at `now`, `None` once the heartbeat is stale.
    fn fresh_bound_at(&self, now: u64) -> Option<u64> {
        let (bound, beat) = self.reader.bound_and_heartbeat()?;
        let conversion = self.page_reader().conversion().ok()?;
        let (now_ns, beat_ns) = (conversion.cycles_to_ns(now), conversion.cycles_to_ns(beat));
        let fresh = beat_ns <= now_ns.saturating_add(HEARTBEAT_INTERVAL_NS)
            && now_ns.saturating_sub(beat_ns) <= STALE_AFTER_NS;
        fresh.then(|| bound.at(now))
    }

    /// What the page says now (after [`SharedMapping::reattach_if_stale`]).
    pub(crate) fn info(&self) -> SharedPageInfo {
        self.reattach_if_stale();
        let now = counter_now();
        let (server_pid, heartbeat_age_ns) = match self.snapshot() {
            Ok(snapshot) => (snapshot.server_pid, snapshot.heartbeat_age_ns(now)),
            Err(_) => (self.reader.server_pid() as u32, u64::MAX),
        };
        SharedPageInfo {
            path: self.path.clone(),
            server_pid,
            heartbeat_age_ns,
            error_bound_ns: self.error_bound_at(now),
        }
    }
}

/// The socket beside the page at `path` on which its server hands out the live page:
/// `PATH.sock`.
pub fn socket_path(path: &Path) -> PathBuf {
    let mut socket = path.as_os_str().to_owned();
    socket.push(".sock");
    PathBuf::from(socket)
}

/// How long a client waits for the server's descriptor: its thread answers at once, so a
/// server that does not (stopped less than the stale time ago) costs a client no more than this
/// before it calibrates on its own.
const SERVER_TIMEOUT: Duration = Duration::from_millis(10);
/// How often a client whose server stopped looks for a new one.
const REATTACH_INTERVAL: Duration = Duration::from_secs(1);
/// How long `error_bound_ns()` waits for a new server's answer (a server that stopped without
/// exiting never answers: the call must not wait long for it).
const REATTACH_TIMEOUT: Duration = Duration::from_millis(20);
/// Offsets of the page's lock words (the two perf pages' seqlocks and the header's).
const LOCK_WORDS: [usize; 3] = [
    PRIMARY_OFFSET + PAGE_LOCK_OFFSET,
    MIRROR_OFFSET + PAGE_LOCK_OFFSET,
    HEADER_OFFSET + 12,
];
/// `perf_event_mmap_page::lock`.
const PAGE_LOCK_OFFSET: usize = 8;

fn lock_word(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(word)
}

/// The live page from the server listening beside the page, which must run as `owner` (the
/// file's owner) and be trusted: a sealed memfd (`perfclock_os::memfd`).
/// `connected` is the connection to [`socket_path`]; waits for the server's answer at most
/// `timeout`.
fn receive_page(
    connected: io::Result<UnixStream>,
    owner: u32,
    timeout: Duration,
) -> Result<File, Refusal> {
    let no_server = |error: io::Error| Refusal::NoServer {
        errno: error.raw_os_error(),
    };
    let stream = connected.map_err(no_server)?;
    stream.set_read_timeout(Some(timeout)).map_err(no_server)?;
    let uid = memfd::peer_uid(&stream).map_err(no_server)?;
    if uid != owner || !trusted_owner(uid) {
        return Err(Refusal::OtherOwner { uid });
    }
    let memfd = File::from(memfd::recv_fd(&stream).map_err(no_server)?);
    match memfd::is_sealed_page(&memfd, FILE_BYTES as u64) {
        Ok(true) => Ok(memfd),
        Ok(false) | Err(_) => Err(Refusal::NoServer { errno: None }),
    }
}

/// Maps FILE_BYTES of `memfd` (a sealed memfd at least that long, checked by
/// `receive_page`) read-only and shared.
fn map_read_only(memfd: &File) -> Result<Mapping, Refusal> {
    Mapping::file(memfd.as_fd(), FILE_BYTES, Access::Read, Sharing::Shared).map_err(|error| {
        Refusal::Open {
            kind: error.kind(),
            errno: error.raw_os_error(),
        }
    })
}

/// What is wrong with the page file `file` itself (read with `read()`, never mapped), if
/// anything: for a page without a server, so that its refusal names the defect.
fn judge_file(file: File, boot: BootId) -> Result<(), Refusal> {
    use std::io::Read as _;
    let mut bytes = Vec::with_capacity(FILE_BYTES);
    file.take(FILE_BYTES as u64)
        .read_to_end(&mut bytes)
        .map_err(|error| Refusal::Open {
            kind: error.kind(),
            errno: error.raw_os_error(),
        })?;
    if bytes.len() < FILE_BYTES {
        return Err(Refusal::Defect(PageDefect::Truncated {
            len: bytes.len(),
            needed: FILE_BYTES,
        }));
    }
    parse(&bytes)
        .and_then(|page| page.check_fresh(boot, counter_now()))
        .map_err(Refusal::Defect)
}

/// Judges the page at `path` as `init()` would: what it says, or why it would be refused.
///
/// # Errors
/// The [`Refusal`].
pub fn probe(path: &Path) -> Result<SharedPageInfo, Refusal> {
    SharedMapping::open(path).map(|mapping| mapping.info())
}

/// The first page of [`candidates`] that passes, with the refusals of those before it (absent
/// files left out).
pub(crate) fn open_first() -> (Option<SharedMapping>, Vec<(PathBuf, Refusal)>) {
    let mut refused = Vec::new();
    for path in candidates().unwrap_or_default() {
        match SharedMapping::open(&path) {
            Ok(mapping) => return (Some(mapping), refused),
            Err(refusal) if refusal.is_absent() => {}
            Err(refusal) => refused.push((path, refusal)),
        }
    }
    (None, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_the_environment() {
        assert_eq!(candidates_from(Some("off".into()), None), None);
        assert_eq!(candidates_from(Some("OFF".into()), None), None);
        assert_eq!(candidates_from(Some("no".into()), None), None);
        assert_eq!(
            candidates_from(Some("on".into()), None),
            Some(vec![PathBuf::from(SYSTEM_PATH)])
        );
        assert_eq!(
            candidates_from(Some("/x/y".into()), Some("/run/user/7".into())),
            Some(vec![PathBuf::from("/x/y")])
        );
        assert_eq!(
            candidates_from(None, Some("/run/user/7".into())),
            Some(vec![
                PathBuf::from(SYSTEM_PATH),
                PathBuf::from("/run/user/7/perfclock/clock")
            ])
        );
        assert_eq!(
            candidates_from(Some("".into()), None),
            Some(vec![PathBuf::from(SYSTEM_PATH)])
        );
    }

    #[test]
    fn offset_candidates_follow_the_environment() {
        let system = || vec![PathBuf::from("/run/perfclock/pvclock-offset")];
        for off in [
            "off", "OFF", "Off", " off ", "0", "false", "FALSE", "no", "No",
        ] {
            assert!(
                offset_candidates_from(Some(off.into())).is_empty(),
                "{off:?}"
            );
        }
        for on in ["on", "ON", "1", "true", "yes"] {
            assert_eq!(offset_candidates_from(Some(on.into())), system(), "{on:?}");
        }
        for path in ["/x/y", "offset", "./off", "off2", "none"] {
            assert_eq!(
                offset_candidates_from(Some(path.into())),
                [PathBuf::from(path)],
                "{path:?}"
            );
        }
        assert_eq!(offset_candidates_from(None), system());
        assert_eq!(offset_candidates_from(Some("".into())), system());
    }

    #[test]
    fn this_boots_id_reads() {
        assert!(boot_id().is_some(), "this kernel's boot id");
    }
}
