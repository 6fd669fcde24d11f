//! Kernel-stamped ground truth: counter brackets around actions that make the kernel write a
//! record stamped with the perf clock.
//!
//! Each bracket is `before = counter; action; after = counter`, and the action makes the kernel
//! write exactly one record whose `PERF_SAMPLE_TIME` (the event clock, `local_clock()`) was taken
//! inside it. Three kinds:
//!
//! | kind | action | stamp taken | seen by a profiler recording this process |
//! | --- | --- | --- | --- |
//! | [`RecordKind::Comm`] | `prctl(PR_SET_NAME)` (name restored after) | in `__set_task_comm` | yes: it records COMM |
//! | [`RecordKind::PageFault`] | read of a page dropped with `MADV_DONTNEED` | at fault entry, before the fault is handled | only if it samples page faults |
//! | [`RecordKind::Mmap2`] | `mmap(PROT_READ \| PROT_EXEC)` of one anonymous page (unmapped after) | at the end of `mmap_region` | yes: an `//anon` executable mapping |
//!
//! # Matching
//! One action is outstanding at a time. Before it the ring is drained; after it, the ring must
//! hold exactly one record that matches the action by type, pid, tid and a per-action key (the
//! unique name set, the faulting address, the mapped address). Any other outcome (no match,
//! two matches, a `PERF_RECORD_LOST`) discards the bracket: a bracket is never paired with the
//! wrong record.
//!
//! # Threads
//! The events are per thread (`pid = 0, cpu = -1`): a [`GroundTruth`] measures the thread that
//! opened it, on whichever CPU it runs, and is therefore neither `Send` nor `Sync`. Pin the
//! thread first (e.g. `core_affinity::set_for_current`) to collect on a chosen CPU.

//!
//! # Safety
//! The actions are system calls on this thread's own state: `prctl` on its name (restored
//! after each bracket and on drop), `mmap`/`madvise`/`munmap` on mappings this module owns, and
//! reads of pages of the fault arena, which stays mapped while it lives.
#![allow(unsafe_code)]

use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::error::CalibError;
use perfclock_core::counter;
use perfclock_event::{
    page_size, sample, EventAttr, Parsed, PerfEvent, RingError, RingReader, SysError,
};

/// Which kernel record a bracket is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    /// `PERF_RECORD_COMM` from `prctl(PR_SET_NAME)`.
    Comm,
    /// `PERF_RECORD_SAMPLE` of a `PERF_COUNT_SW_PAGE_FAULTS` event (period 1).
    PageFault,
    /// `PERF_RECORD_MMAP2` of an anonymous `PROT_EXEC` mapping.
    Mmap2,
}

impl RecordKind {
    /// All kinds.
    pub const ALL: [RecordKind; 3] = [RecordKind::Comm, RecordKind::PageFault, RecordKind::Mmap2];

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Comm => "comm",
            RecordKind::PageFault => "page-fault",
            RecordKind::Mmap2 => "mmap2",
        }
    }

    fn index(self) -> usize {
        match self {
            RecordKind::Comm => 0,
            RecordKind::PageFault => 1,
            RecordKind::Mmap2 => 2,
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`RecordKind`]s (which kinds calibrate, which failed). Small and `Copy`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct KindSet(u8);

impl fmt::Debug for KindSet {
    /// The kinds, not the bits: `{Comm, Mmap2}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl KindSet {
    /// No kind.
    pub const EMPTY: KindSet = KindSet(0);

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: RecordKind) -> bool {
        self.0 & (1 << kind.index()) != 0
    }

    /// The set with `kind` added.
    #[must_use]
    pub fn with(self, kind: RecordKind) -> KindSet {
        KindSet(self.0 | 1 << kind.index())
    }

    /// Whether the set holds no kind.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The kinds in the set, in [`RecordKind::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = RecordKind> {
        RecordKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }

    /// The set as bits (bit `i` for `RecordKind::ALL[i]`), for an atomic cell.
    pub(crate) fn bits(self) -> u8 {
        self.0
    }

    /// The set whose [`KindSet::bits`] are `bits`.
    pub(crate) fn from_bits(bits: u8) -> KindSet {
        KindSet(bits & ((1 << RecordKind::ALL.len()) - 1))
    }
}

impl FromIterator<RecordKind> for KindSet {
    fn from_iter<I: IntoIterator<Item = RecordKind>>(kinds: I) -> Self {
        kinds.into_iter().fold(KindSet::EMPTY, KindSet::with)
    }
}

impl fmt::Display for KindSet {
    /// The kinds' names separated by ", ", or "none".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, kind) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(kind.name())?;
        }
        Ok(())
    }
}

/// A kernel timestamp and what was read just before and just after the action that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamped<T> {
    /// The record the stamp came from.
    pub kind: RecordKind,
    /// Read before the action.
    pub before: T,
    /// Read after the action.
    pub after: T,
    /// The record's `PERF_SAMPLE_TIME` (perf clock, ns).
    pub kernel_ns: u64,
    /// The CPU the kernel wrote the record on.
    pub cpu: u32,
}

/// A bracket in raw counter values (`perfclock_core::counter::read_counter_ordered`).
pub type Bracket = Stamped<u64>;

impl Stamped<u64> {
    /// `after - before`, in counter cycles.
    pub fn width(&self) -> u64 {
        self.after.wrapping_sub(self.before)
    }
}

/// Why a bracket could not be produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BracketError {
    /// The [`GroundTruth`] was not opened with this kind.
    KindNotOpened(RecordKind),
    /// No matching record after the action (transient: retry).
    Missing(RecordKind),
    /// More than one matching record (transient: retry).
    Ambiguous {
        /// The kind.
        kind: RecordKind,
        /// How many matched.
        matches: u32,
    },
    /// The kernel reported lost records around the action (transient: retry).
    Lost {
        /// The kind.
        kind: RecordKind,
        /// The `lost` count.
        lost: u64,
    },
    /// A malformed ring.
    Ring(RingError),
    /// A system call of the action failed.
    Syscall {
        /// Which call.
        op: &'static str,
        /// errno.
        errno: i32,
    },
    /// No cycle counter on this architecture.
    CounterUnsupported,
    /// [`GroundTruth::collect`] gave up after this many discarded brackets in a row.
    TooManyDiscards {
        /// The kind.
        kind: RecordKind,
        /// Consecutive discards.
        discards: u32,
        /// The last transient error.
        last: DiscardReason,
    },
}

/// Why the last bracket in a [`BracketError::TooManyDiscards`] was discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardReason {
    /// No matching record.
    Missing,
    /// Several matching records.
    Ambiguous,
    /// Lost records.
    Lost,
}

impl BracketError {
    /// Whether retrying the bracket may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BracketError::Missing(_) | BracketError::Ambiguous { .. } | BracketError::Lost { .. }
        )
    }

    fn discard_reason(&self) -> Option<DiscardReason> {
        match self {
            BracketError::Missing(_) => Some(DiscardReason::Missing),
            BracketError::Ambiguous { .. } => Some(DiscardReason::Ambiguous),
            BracketError::Lost { .. } => Some(DiscardReason::Lost),
            _ => None,
        }
    }
}

impl fmt::Display for BracketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BracketError::KindNotOpened(kind) => {
                write!(f, "ground truth was not opened for {kind} records")
            }
            BracketError::Missing(kind) => {
                write!(f, "no {kind} record followed the action")
            }
            BracketError::Ambiguous { kind, matches } => {
                write!(f, "{matches} {kind} records matched one action")
            }
            BracketError::Lost { kind, lost } => {
                write!(f, "the kernel lost {lost} records around a {kind} action")
            }
            BracketError::Ring(e) => write!(f, "{e}"),
            BracketError::Syscall { op, errno } => {
                write!(
                    f,
                    "{op} failed: {}",
                    std::io::Error::from_raw_os_error(errno)
                )?;
                if errno == libc::EPERM || errno == libc::EACCES {
                    f.write_str(
                        " (a seccomp filter or an LSM policy such as SELinux refuses it: allow \
                         it, or one of the other record kinds' calls: prctl(PR_SET_NAME), \
                         madvise(MADV_DONTNEED), mmap(PROT_EXEC) of an anonymous page)",
                    )?;
                }
                Ok(())
            }
            BracketError::CounterUnsupported => {
                f.write_str("no cycle counter on this architecture")
            }
            BracketError::TooManyDiscards {
                kind,
                discards,
                last,
            } => write!(
                f,
                "gave up on {kind} brackets after {discards} discards in a row (last: {last:?})"
            ),
        }
    }
}

impl std::error::Error for BracketError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BracketError::Ring(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RingError> for BracketError {
    fn from(e: RingError) -> Self {
        BracketError::Ring(e)
    }
}

/// Counts per kind since open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindStats {
    /// Brackets attempted.
    pub attempts: u64,
    /// Brackets returned.
    pub accepted: u64,
    /// Discarded: no matching record.
    pub missing: u64,
    /// Discarded: several matching records.
    pub ambiguous: u64,
    /// Discarded: lost records.
    pub lost: u64,
}

/// Consecutive discards after which [`GroundTruth::collect`] gives up.
pub const MAX_CONSECUTIVE_DISCARDS: u32 = 64;

/// Ring size for each event: 2^3 data pages. Drained around every action, so it never fills.
const RING_PAGES_LOG2: u32 = 3;
/// Pages of the fault arena; dropped with one `madvise` per pass.
const FAULT_ARENA_PAGES: usize = 64;

const ID_SAMPLE_TYPE: u64 = sample::TID | sample::TIME | sample::CPU;
const FAULT_SAMPLE_TYPE: u64 = sample::TID | sample::TIME | sample::ADDR | sample::CPU;

struct Source {
    event: PerfEvent,
    ring: RingReader,
}

impl Source {
    fn open(attr: EventAttr) -> Result<Self, SysError> {
        let event = PerfEvent::open(&attr)?;
        let ring = RingReader::new(event.map_ring(RING_PAGES_LOG2)?);
        Ok(Self { event, ring })
    }
}

/// Anonymous pages that are read to fault, and dropped again with `MADV_DONTNEED`.
struct FaultArena {
    base: NonNull<u8>,
    pages: usize,
    page: usize,
    next: usize,
}

impl FaultArena {
    fn new() -> Result<Self, BracketError> {
        let page = page_size();
        let len = page * FAULT_ARENA_PAGES;
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(syscall_error("mmap"));
        }
        // SAFETY: advice on our own mapping. Keeps THP from backing it with one huge zero page
        // (which would fault once for 2 MiB); failure only costs that, so it is ignored.
        unsafe { libc::madvise(ptr, len, libc::MADV_NOHUGEPAGE) };
        let base = NonNull::new(ptr.cast()).ok_or(BracketError::Syscall {
            op: "mmap",
            errno: libc::EINVAL,
        })?;
        Ok(Self {
            base,
            pages: FAULT_ARENA_PAGES,
            page,
            // Start with a drop so that every page faults on first use.
            next: FAULT_ARENA_PAGES,
        })
    }

    /// The next page that will fault when read, dropping the whole arena when all were used.
    fn next_page(&mut self) -> Result<*const u8, BracketError> {
        if self.next == self.pages {
            // SAFETY: our own mapping; MADV_DONTNEED on private anonymous memory only zaps
            // the page tables (the next read maps the zero page again).
            let rc = unsafe {
                libc::madvise(
                    self.base.as_ptr().cast(),
                    self.pages * self.page,
                    libc::MADV_DONTNEED,
                )
            };
            if rc != 0 {
                return Err(syscall_error("madvise(MADV_DONTNEED)"));
            }
            self.next = 0;
        }
        // SAFETY: `next < pages`, so the offset is inside the mapping.
        let p = unsafe { self.base.as_ptr().add(self.next * self.page) };
        self.next += 1;
        Ok(p)
    }
}

impl Drop for FaultArena {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly our own mapping; no references into it exist.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.pages * self.page) };
    }
}

/// Kernel-stamped brackets for the calling thread. See the [module docs](self).
pub struct GroundTruth {
    side_band: Option<Source>,
    kinds: [bool; 3],
    faults: Option<(Source, FaultArena)>,
    pid: u32,
    tid: u32,
    original_name: [u8; 16],
    seq: u32,
    stats: [KindStats; 3],
    /// Kinds [`GroundTruth::open_available`] could not open.
    unavailable: KindSet,
    /// Per-thread events: the value must stay on the thread that opened it.
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for GroundTruth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroundTruth")
            .field("kinds", &self.kinds())
            .field("tid", &self.tid)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn syscall_error(op: &'static str) -> BracketError {
    BracketError::Syscall {
        op,
        errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
    }
}

impl GroundTruth {
    /// Opens the events for `kinds` on the calling thread.
    ///
    /// # Errors
    /// [`CalibError::Open`] with the classified errno when perf refuses.
    ///
    /// # Example
    /// ```no_run
    /// use perfclock_calib::{GroundTruth, RecordKind};
    ///
    /// let mut truth = GroundTruth::open(&[RecordKind::Comm])?;
    /// let mut brackets = Vec::new();
    /// truth.collect(RecordKind::Comm, 10, &mut brackets)?;
    /// for b in &brackets {
    ///     assert!(b.before <= b.after);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(kinds: &[RecordKind]) -> Result<Self, CalibError> {
        let mut enabled = [false; 3];
        for k in kinds {
            enabled[k.index()] = true;
        }
        let comm = enabled[RecordKind::Comm.index()];
        let mmap2 = enabled[RecordKind::Mmap2.index()];
        let side_band = if comm || mmap2 {
            Some(Source::open(
                EventAttr::dummy()
                    .sample_type(ID_SAMPLE_TYPE)
                    .sample_id_all(true)
                    .comm(comm)
                    .mmap2(mmap2),
            )?)
        } else {
            None
        };
        let faults = if enabled[RecordKind::PageFault.index()] {
            let source = Source::open(EventAttr::page_faults().sample_type(FAULT_SAMPLE_TYPE))?;
            let arena = FaultArena::new().map_err(CalibError::Bracket)?;
            Some((source, arena))
        } else {
            None
        };
        let mut original_name = [0u8; 16];
        if comm {
            // SAFETY: PR_GET_NAME writes at most 16 bytes (TASK_COMM_LEN) into the buffer.
            let rc = unsafe { libc::prctl(libc::PR_GET_NAME, original_name.as_mut_ptr()) };
            if rc != 0 {
                return Err(CalibError::Bracket(syscall_error("prctl(PR_GET_NAME)")));
            }
            original_name[15] = 0;
        }
        // SAFETY: getpid and gettid have no preconditions.
        let (pid, tid) = unsafe { (libc::getpid(), libc::syscall(libc::SYS_gettid)) };
        Ok(Self {
            side_band,
            kinds: enabled,
            faults,
            pid: pid as u32,
            tid: tid as u32,
            original_name,
            seq: 0,
            stats: [KindStats::default(); 3],
            unavailable: KindSet::EMPTY,
            _not_send: PhantomData,
        })
    }

    /// Opens every kind this process can open: all of them, or those that succeed one by one
    /// (the others are [`GroundTruth::unavailable`]).
    ///
    /// # Errors
    /// The error of the first kind when none can be opened.
    pub fn open_available() -> Result<Self, CalibError> {
        match Self::open(&RecordKind::ALL) {
            Ok(gt) => Ok(gt),
            Err(first) => {
                let ok: Vec<RecordKind> = RecordKind::ALL
                    .into_iter()
                    .filter(|k| Self::open(&[*k]).is_ok())
                    .collect();
                if ok.is_empty() {
                    return Err(first);
                }
                let mut gt = Self::open(&ok)?;
                gt.unavailable = RecordKind::ALL
                    .into_iter()
                    .filter(|k| !ok.contains(k))
                    .collect();
                Ok(gt)
            }
        }
    }

    /// The kinds [`GroundTruth::open_available`] tried and could not open (a refused
    /// `perf_event_open`, or a refused call the kind needs at open).
    pub fn unavailable(&self) -> KindSet {
        self.unavailable
    }

    /// The kinds this value can bracket.
    pub fn kinds(&self) -> Vec<RecordKind> {
        RecordKind::ALL
            .into_iter()
            .filter(|k| self.kinds[k.index()])
            .collect()
    }

    /// Whether `kind` was opened.
    pub fn has(&self, kind: RecordKind) -> bool {
        self.kinds[kind.index()]
    }

    /// Counts for `kind` since open.
    pub fn stats(&self, kind: RecordKind) -> KindStats {
        self.stats[kind.index()]
    }

    /// One bracket in counter cycles (`read_counter_ordered` before and after).
    ///
    /// # Errors
    /// A transient [`BracketError`] (retry) or a fatal one; see [`BracketError::is_transient`].
    pub fn bracket(&mut self, kind: RecordKind) -> Result<Bracket, BracketError> {
        let mut read = counter::read_counter_ordered;
        if read().is_none() {
            return Err(BracketError::CounterUnsupported);
        }
        let s = self.bracket_with(kind, &mut read)?;
        match (s.before, s.after) {
            (Some(before), Some(after)) => Ok(Bracket {
                kind,
                before,
                after,
                kernel_ns: s.kernel_ns,
                cpu: s.cpu,
            }),
            _ => Err(BracketError::CounterUnsupported),
        }
    }

    /// Appends `n` brackets of `kind` to `out`, retrying discarded ones.
    ///
    /// # Errors
    /// A fatal error, or [`BracketError::TooManyDiscards`] after
    /// [`MAX_CONSECUTIVE_DISCARDS`] discards in a row. Brackets collected so far stay in `out`.
    pub fn collect(
        &mut self,
        kind: RecordKind,
        n: usize,
        out: &mut Vec<Bracket>,
    ) -> Result<(), BracketError> {
        out.reserve(n);
        let mut added = 0;
        let mut discards = 0;
        while added < n {
            match self.bracket(kind) {
                Ok(b) => {
                    out.push(b);
                    added += 1;
                    discards = 0;
                }
                Err(e) => match e.discard_reason() {
                    Some(last) => {
                        discards += 1;
                        if discards >= MAX_CONSECUTIVE_DISCARDS {
                            return Err(BracketError::TooManyDiscards {
                                kind,
                                discards,
                                last,
                            });
                        }
                    }
                    None => return Err(e),
                },
            }
        }
        Ok(())
    }

    /// One bracket with a caller-chosen reading before and after the action (e.g. a clock's
    /// `now_ns` together with a counter read). `read` runs immediately before and after the
    /// action, and nothing else runs inside the bracket.
    ///
    /// # Errors
    /// As [`GroundTruth::bracket`].
    pub fn bracket_with<T>(
        &mut self,
        kind: RecordKind,
        read: &mut impl FnMut() -> T,
    ) -> Result<Stamped<T>, BracketError> {
        if !self.has(kind) {
            return Err(BracketError::KindNotOpened(kind));
        }
        self.stats[kind.index()].attempts += 1;
        let result = match kind {
            RecordKind::Comm => self.comm_bracket(read),
            RecordKind::PageFault => self.fault_bracket(read),
            RecordKind::Mmap2 => self.mmap2_bracket(read),
        };
        let stats = &mut self.stats[kind.index()];
        match &result {
            Ok(_) => stats.accepted += 1,
            Err(BracketError::Missing(_)) => stats.missing += 1,
            Err(BracketError::Ambiguous { .. }) => stats.ambiguous += 1,
            Err(BracketError::Lost { .. }) => stats.lost += 1,
            Err(_) => {}
        }
        result
    }

    fn comm_bracket<T>(
        &mut self,
        read: &mut impl FnMut() -> T,
    ) -> Result<Stamped<T>, BracketError> {
        self.seq = self.seq.wrapping_add(1);
        // A name no earlier action used (recently): "pcgt" + 8 hex digits, NUL-terminated.
        let mut name = [0u8; 16];
        name[..4].copy_from_slice(b"pcgt");
        for i in 0..8 {
            let nibble = (self.seq >> (28 - 4 * i)) & 0xf;
            name[4 + i] = b"0123456789abcdef"[nibble as usize];
        }
        let (pid, tid) = (self.pid, self.tid);
        let source = self
            .side_band
            .as_mut()
            .ok_or(BracketError::KindNotOpened(RecordKind::Comm))?;
        source.ring.drain(|_| {})?;
        let before = read();
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from `name`.
        let rc = unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
        let after = read();
        if rc != 0 {
            return Err(syscall_error("prctl(PR_SET_NAME)"));
        }
        // SAFETY: as above, with the name saved at open (NUL-terminated within 16 bytes).
        let rc = unsafe { libc::prctl(libc::PR_SET_NAME, self.original_name.as_ptr()) };
        if rc != 0 {
            return Err(syscall_error("prctl(PR_SET_NAME) restoring the name"));
        }
        let (st, all) = (source.event.sample_type(), source.event.sample_id_all());
        let ours = &name[..12];
        let m = match_one(&mut source.ring, RecordKind::Comm, |rec| {
            match rec.parse(st, all) {
                Ok(Parsed::Comm {
                    pid: p,
                    tid: t,
                    comm,
                    exec: false,
                    id,
                }) if p == pid && t == tid && comm == ours && id.tid == Some(tid) => {
                    Some(id.time.zip(id.cpu))
                }
                _ => None,
            }
        })?;
        Ok(Stamped {
            kind: RecordKind::Comm,
            before,
            after,
            kernel_ns: m.0,
            cpu: m.1,
        })
    }

    fn fault_bracket<T>(
        &mut self,
        read: &mut impl FnMut() -> T,
    ) -> Result<Stamped<T>, BracketError> {
        let (pid, tid) = (self.pid, self.tid);
        let (source, arena) = self
            .faults
            .as_mut()
            .ok_or(BracketError::KindNotOpened(RecordKind::PageFault))?;
        let page = arena.next_page()?;
        let page_mask = !(arena.page as u64 - 1);
        source.ring.drain(|_| {})?;
        let before = read();
        // SAFETY: `page` is inside our readable anonymous mapping; the volatile read cannot be
        // elided, so it faults (the page was dropped with MADV_DONTNEED).
        unsafe { page.read_volatile() };
        let after = read();
        let (st, all) = (source.event.sample_type(), source.event.sample_id_all());
        let target = page as u64;
        let m = match_one(&mut source.ring, RecordKind::PageFault, |rec| {
            match rec.parse(st, all) {
                Ok(Parsed::Sample(id))
                    if id.pid == Some(pid)
                        && id.tid == Some(tid)
                        && id.addr.map(|a| a & page_mask) == Some(target) =>
                {
                    Some(id.time.zip(id.cpu))
                }
                _ => None,
            }
        })?;
        Ok(Stamped {
            kind: RecordKind::PageFault,
            before,
            after,
            kernel_ns: m.0,
            cpu: m.1,
        })
    }

    fn mmap2_bracket<T>(
        &mut self,
        read: &mut impl FnMut() -> T,
    ) -> Result<Stamped<T>, BracketError> {
        let (pid, tid) = (self.pid, self.tid);
        let source = self
            .side_band
            .as_mut()
            .ok_or(BracketError::KindNotOpened(RecordKind::Mmap2))?;
        let len = page_size();
        source.ring.drain(|_| {})?;
        let before = read();
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let after = read();
        if ptr == libc::MAP_FAILED {
            return Err(syscall_error("mmap(PROT_EXEC)"));
        }
        // SAFETY: unmapping the mapping we just made; nothing refers to it.
        unsafe { libc::munmap(ptr, len) };
        let (st, all) = (source.event.sample_type(), source.event.sample_id_all());
        let start = ptr as u64;
        let end = start + len as u64;
        let m = match_one(&mut source.ring, RecordKind::Mmap2, |rec| {
            match rec.parse(st, all) {
                // The kernel reports the vma, which may have merged with a neighbour: it must
                // contain our range.
                Ok(Parsed::Mmap2 {
                    pid: p,
                    tid: t,
                    addr,
                    len: l,
                    prot,
                    id,
                    ..
                }) if p == pid
                    && t == tid
                    && addr <= start
                    && addr.saturating_add(l) >= end
                    && prot & libc::PROT_EXEC as u32 != 0
                    && id.tid == Some(tid) =>
                {
                    Some(id.time.zip(id.cpu))
                }
                _ => None,
            }
        })?;
        Ok(Stamped {
            kind: RecordKind::Mmap2,
            before,
            after,
            kernel_ns: m.0,
            cpu: m.1,
        })
    }
}

/// Drains the ring and returns the `(time, cpu)` of the single record `matcher` accepts.
/// `matcher` returns `Some(None)` for a matching record that lacks time or cpu (counted as a
/// match, so that it makes the bracket ambiguous or missing rather than being skipped).
fn match_one(
    ring: &mut RingReader,
    kind: RecordKind,
    mut matcher: impl FnMut(&perfclock_event::Record<'_>) -> Option<Option<(u64, u32)>>,
) -> Result<(u64, u32), BracketError> {
    let mut matches = 0u32;
    let mut found = None;
    let stats = ring.drain(|rec| {
        if let Some(m) = matcher(&rec) {
            matches += 1;
            found = m;
        }
    })?;
    if stats.lost_records > 0 {
        return Err(BracketError::Lost {
            kind,
            lost: stats.lost,
        });
    }
    match (matches, found) {
        (1, Some(m)) => Ok(m),
        (0, _) | (1, None) => Err(BracketError::Missing(kind)),
        (matches, _) => Err(BracketError::Ambiguous { kind, matches }),
    }
}

impl Drop for GroundTruth {
    fn drop(&mut self) {
        if self.kinds[RecordKind::Comm.index()] {
            // SAFETY: restores the NUL-terminated name saved at open. Each bracket already
            // restored it; this covers a panic between the two prctl calls.
            unsafe { libc::prctl(libc::PR_SET_NAME, self.original_name.as_ptr()) };
        }
    }
}
