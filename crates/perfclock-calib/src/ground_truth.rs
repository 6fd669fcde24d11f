//! [`GroundTruth`]: counter brackets around actions that make the kernel stamp a record.
//!
//! The actions are system calls on this thread's own state, through `perfclock_os`'s safe
//! wrappers: its name (restored after each bracket and on drop), a page mapped and unmapped at
//! once, and the fault arena's pages ([`crate::fault_arena`]).

use core::fmt;
use core::marker::PhantomData;

use crate::bracket::{os_error, Bracket, KindStats, Stamped};
use crate::error::{BracketError, CalibError};
use crate::fault_arena::FaultArena;
use crate::kind::{KindSet, RecordKind};
use perfclock_core::counter;
use perfclock_os::mapping::page_size;
use perfclock_os::perf_event::record::Parsed;
use perfclock_os::thread::{self, ThreadName};
use perfclock_os::{sample, Access, EventAttr, Mapping, PerfEvent, RingReader, SysError};

/// Consecutive discards after which [`GroundTruth::collect`] gives up.
pub const MAX_CONSECUTIVE_DISCARDS: u32 = 64;

/// Ring size for each event: 2^3 data pages. Drained around every action, so it never fills.
const RING_PAGES_LOG2: u32 = 3;

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

/// Kernel-stamped brackets for the calling thread.
///
/// Kernel-stamped ground truth: counter brackets around actions that make the kernel write a
/// record stamped with the perf clock.
///
/// Each bracket is `before = counter; action; after = counter`, and the action makes the kernel
/// write exactly one record whose `PERF_SAMPLE_TIME` (the event clock, `local_clock()`) was taken
/// inside it. Three kinds:
///
/// | kind | action | stamp taken | seen by a profiler recording this process |
/// | --- | --- | --- | --- |
/// | [`RecordKind::Comm`] | `prctl(PR_SET_NAME)` (name restored after) | in `__set_task_comm` | yes: it records COMM |
/// | [`RecordKind::PageFault`] | read of a page dropped with `MADV_DONTNEED` | at fault entry, before the fault is handled | only if it samples page faults |
/// | [`RecordKind::Mmap2`] | `mmap(PROT_READ \| PROT_EXEC)` of one anonymous page (unmapped after) | at the end of `mmap_region` | yes: an `//anon` executable mapping |
///
/// # Matching
/// One action is outstanding at a time. Before it the ring is drained; after it, the ring must
/// hold exactly one record that matches the action by type, pid, tid and a per-action key (the
/// unique name set, the faulting address, the mapped address). Any other outcome (no match,
/// two matches, a `PERF_RECORD_LOST`) discards the bracket: a bracket is never paired with the
/// wrong record.
///
/// # Threads
/// The events are per thread (`pid = 0, cpu = -1`): a [`GroundTruth`] measures the thread that
/// opened it, on whichever CPU it runs, and is therefore neither `Send` nor `Sync`. Pin the
/// thread first (e.g. `core_affinity::set_for_current`) to collect on a chosen CPU.
pub struct GroundTruth {
    side_band: Option<Source>,
    kinds: [bool; 3],
    faults: Option<(Source, FaultArena)>,
    pid: u32,
    tid: u32,
    original_name: ThreadName,
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
            let arena = FaultArena::new()?;
            Some((source, arena))
        } else {
            None
        };
        let original_name = if comm {
            ThreadName::current().map_err(os_error("prctl(PR_GET_NAME)"))?
        } else {
            ThreadName::default()
        };
        let (pid, tid) = (std::process::id(), thread::gettid());
        Ok(Self {
            side_band,
            kinds: enabled,
            faults,
            pid,
            tid,
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
    /// [`CalibError::Bracket`]: a transient one (retry) or a fatal one; see
    /// [`CalibError::is_transient`].
    pub fn bracket(&mut self, kind: RecordKind) -> Result<Bracket, CalibError> {
        Ok(self.try_bracket(kind)?)
    }

    fn try_bracket(&mut self, kind: RecordKind) -> Result<Bracket, BracketError> {
        let mut read = counter::read_counter_ordered;
        if read().is_none() {
            return Err(BracketError::CounterUnsupported);
        }
        let s = self.try_bracket_with(kind, &mut read)?;
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
    /// [`CalibError::Bracket`]: a fatal error, or giving up after [`MAX_CONSECUTIVE_DISCARDS`]
    /// discards in a row. Brackets collected so far stay in `out`.
    pub fn collect(
        &mut self,
        kind: RecordKind,
        n: usize,
        out: &mut Vec<Bracket>,
    ) -> Result<(), CalibError> {
        out.reserve(n);
        let mut added = 0;
        let mut discards = 0;
        while added < n {
            match self.try_bracket(kind) {
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
                            }
                            .into());
                        }
                    }
                    None => return Err(e.into()),
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
    ) -> Result<Stamped<T>, CalibError> {
        Ok(self.try_bracket_with(kind, read)?)
    }

    fn try_bracket_with<T>(
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
        // A name no earlier action used (recently): "pcgt" + 8 hex digits.
        let mut name = [0u8; 12];
        name[..4].copy_from_slice(b"pcgt");
        for i in 0..8 {
            let nibble = (self.seq >> (28 - 4 * i)) & 0xf;
            name[4 + i] = b"0123456789abcdef"[nibble as usize];
        }
        let thread_name = ThreadName::new(&name).ok_or(BracketError::Syscall {
            op: "prctl(PR_SET_NAME)",
            errno: libc::EINVAL,
        })?;
        let (pid, tid) = (self.pid, self.tid);
        let source = self
            .side_band
            .as_mut()
            .ok_or(BracketError::KindNotOpened(RecordKind::Comm))?;
        source.ring.drain(|_| {})?;
        let before = read();
        let set = thread_name.set_current();
        let after = read();
        set.map_err(os_error("prctl(PR_SET_NAME)"))?;
        self.original_name
            .set_current()
            .map_err(os_error("prctl(PR_SET_NAME) restoring the name"))?;
        let (st, all) = (source.event.sample_type(), source.event.sample_id_all());
        let ours = &name[..];
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
        let page_mask = !(arena.page_size() as u64 - 1);
        let page = arena.next_page()?;
        source.ring.drain(|_| {})?;
        let before = read();
        page.fault();
        let after = read();
        let (st, all) = (source.event.sample_type(), source.event.sample_id_all());
        let target = page.addr();
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
        let mapped = Mapping::anonymous(len, Access::ReadExec);
        let after = read();
        let mapped = mapped.map_err(os_error("mmap(PROT_EXEC)"))?;
        let start = mapped.as_ptr().as_ptr() as u64;
        drop(mapped);
        let (st, all) = (source.event.sample_type(), source.event.sample_id_all());
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
    mut matcher: impl FnMut(&perfclock_os::perf_event::record::Record<'_>) -> Option<Option<(u64, u32)>>,
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
            // Each bracket already restored the name; this covers a panic between the two
            // calls. Nothing to report from a drop.
            let _ = self.original_name.set_current();
        }
    }
}
