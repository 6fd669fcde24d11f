//! What one read of each clock costs, on one thread and on two threads reading at once.
//!
//! ```text
//! cargo bench --bench read 2>&1 | tee bench.log && python3 benches/summary.py target bench.log
//! ```
//!
//! It prints the CPU's vendor and model first (`cpu: vendor ... model ...`): read costs differ
//! by vendor (Intel's `rdtsc` is cheaper than AMD's, so the work around it shows more), and
//! `summary.py` picks the vendor's targets from that line.
//!
//! Every read loop is the same shape ([`run_calls`]): `iters` calls, each result passed through
//! `black_box`, so the comparison is like for like (no call can be elided or hoisted, and each
//! loop carries the same sink). Calls in a loop are independent, so what is measured is
//! throughput, as in a program that stamps events. `lfence; rdtsc` against
//! `lfence; perfclock::now_ns` compares latency instead: each read starts only when everything
//! before it (the previous read included) has finished.
//!
//! The paired ratios (`cargo bench --bench read -- paired`) time every read once per round and
//! divide within the round; they include two parts of a read ([`floor`]) that locate the floor
//! on the machine at hand: the seqlock around the counter read, and that plus the conversion
//! without any check. That second part is the floor a read is measured against (`floor: the
//! page's arithmetic inline`, and the paired `perfclock::now_ns / floor`): a regression of the
//! read's form shows as a ratio to it on any machine. The clock is the process's: run the bench
//! once per mode the machine offers (as it is; `PERFCLOCK_PARAVIRT=off` for calibrated mode, or
//! shared mode with a `perfclock serve` running); the mode is printed first.
//!
//! Per thread (group `read per thread`): one or two threads run the same loop at the same time,
//! spawned for each sample, pinned to CPUs 0 and 1, released together by a spinning barrier.
//! The time reported is the mean of the threads' own CPU times (`CLOCK_THREAD_CPUTIME_ID`), so
//! a thread that another process's build pushes off its CPU is not charged for the wait; one
//! and two threads go through the same code, so their ratio compares like with like. The bench
//! prints for how many two-thread samples the loops ran side by side for less than 90% of the
//! time (on a loaded machine they can take turns instead of running together).

use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use perfclock::{Clock, CounterStamp, Options};
use perfclock_core::page::PerfEventMmapPage;
use perfclock_core::pvclock::PvclockReader;
use perfclock_core::{counter, PageReader, PageWriter, TimeConversion};
use perfclock_testutil::time::monotonic_ns;
use perfclock_testutil::{skip, Need};

/// Non-short parameters (`cap_user_time_zero` set, `cap_user_time_short` clear, shift 31), the
/// form an x86 kernel with a native TSC sched_clock publishes; the values are one calibrated run's.
const EXACT_MULT: u32 = 827_180_110;
const EXACT_SHIFT: u16 = 31;
const EXACT_ZERO: u64 = 18_446_744_073_616_931_993;

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
        .configure_from_args()
}

/// `iters` calls of `read`, each result through `black_box`; returns the elapsed time.
#[inline(always)]
fn run_calls<T>(iters: u64, read: &impl Fn() -> T) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        black_box(read());
    }
    start.elapsed()
}

/// Pins the calling thread to `cpu` (best effort: a failure leaves it unpinned).
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (the callers pass 0 or 1).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the set is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// Whether the command line's filter (the first free argument, as criterion reads it) lets a
/// benchmark named `name` run; `cargo bench -- paired` runs only the paired ratios.
fn criterion_filter_allows(name: &str) -> bool {
    let filter = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    filter.is_none_or(|filter| name.contains(filter.as_str()))
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Threaded samples taken, and those whose threads ran side by side for less than 90% of the
/// longest loop (wall time).
static THREADED_SAMPLES: AtomicU64 = AtomicU64::new(0);
static THREADED_POOR_OVERLAP: AtomicU64 = AtomicU64::new(0);

/// `threads` pinned threads (to CPUs 0, 1, ... when there are that many) each run `iters` calls
/// at once, started together by a spinning barrier (a sleeping one wakes them tens of
/// microseconds apart). Returns the mean of the threads' CPU times: the per-thread cost, without
/// the time other processes on a shared machine take the CPU away.
fn run_calls_threaded<T>(threads: usize, iters: u64, read: &(impl Fn() -> T + Sync)) -> Duration {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let arrived = AtomicUsize::new(0);
    let runs: Vec<(Instant, Instant, Duration)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let arrived = &arrived;
                scope.spawn(move || {
                    if cpus >= threads {
                        pin_to(index);
                    }
                    arrived.fetch_add(1, Ordering::AcqRel);
                    while arrived.load(Ordering::Acquire) < threads {
                        std::hint::spin_loop();
                    }
                    let (start, cpu_start) = (Instant::now(), thread_cpu_time());
                    black_box(run_calls(iters, read));
                    let cpu = thread_cpu_time().saturating_sub(cpu_start);
                    (start, Instant::now(), cpu)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let last_start = runs.iter().map(|run| run.0).max().unwrap();
    let first_end = runs.iter().map(|run| run.1).min().unwrap();
    let longest = runs.iter().map(|run| run.1 - run.0).max().unwrap();
    let overlap = first_end.saturating_duration_since(last_start);
    THREADED_SAMPLES.fetch_add(1, Ordering::Relaxed);
    if threads > 1 && overlap.as_secs_f64() < 0.9 * longest.as_secs_f64() {
        THREADED_POOR_OVERLAP.fetch_add(1, Ordering::Relaxed);
    }
    runs.iter().map(|run| run.2).sum::<Duration>() / threads as u32
}

fn report_overlap(name: &str) {
    let samples = THREADED_SAMPLES.swap(0, Ordering::Relaxed);
    let poor = THREADED_POOR_OVERLAP.swap(0, Ordering::Relaxed);
    println!("{name}: {poor} of {samples} two-thread samples ran side by side for less than 90%");
}

/// Waits for every earlier instruction to finish, as `counter::read_counter_ordered` does before
/// its read (x86_64 `lfence`, aarch64 `isb`).
#[inline(always)]
fn serialise() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence is part of SSE2, which every x86_64 CPU has; it has no memory effects.
    unsafe {
        core::arch::x86_64::_mm_lfence()
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: isb only flushes the pipeline; it touches no memory, stack or flags.
    unsafe {
        core::arch::asm!("isb", options(nomem, nostack, preserves_flags))
    };
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtscp() -> u64 {
    let mut aux = 0u32;
    // SAFETY: only called when /proc/cpuinfo lists rdtscp (`has_rdtscp`); it writes only `aux`.
    unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtscp() -> u64 {
    0
}

fn has_rdtscp() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
            info.lines()
                .filter(|line| line.starts_with("flags"))
                .any(|line| line.split_whitespace().any(|flag| flag == "rdtscp"))
        })
}

/// A page of ordinary memory with exact-mode parameters published, and its reader.
/// The core reader of whatever the clock reads (its perf-format page, or in paravirt mode its
/// pvclock entry and offset): the facade's fast path minus its plumbing.
#[derive(Clone, Copy)]
enum CoreReader<'a> {
    Page(PageReader<'a>),
    Pvclock(PvclockReader<'a>, i64),
}

impl<'a> CoreReader<'a> {
    fn of(clock: &'a Clock) -> Self {
        match (clock.reader(), clock.paravirt()) {
            (Some(page), _) => CoreReader::Page(page),
            (None, Some(paravirt)) => {
                CoreReader::Pvclock(paravirt.reader(), paravirt.offset().offset_ns)
            }
            (None, None) => unreachable!("a clock reads a page or a pvclock entry"),
        }
    }

    #[inline(always)]
    fn now_ns(&self) -> u64 {
        match self {
            CoreReader::Page(page) => page.now_ns().unwrap_or(0),
            CoreReader::Pvclock(entry, offset_ns) => entry
                .perf_ns_with(counter::read_counter_or_zero, *offset_ns)
                .unwrap_or(0),
        }
    }
}

fn exact_page() -> PageReader<'static> {
    let page = NonNull::from(Box::leak(Box::new(PerfEventMmapPage::zeroed())));
    let conversion = TimeConversion::new(EXACT_MULT, EXACT_SHIFT, EXACT_ZERO).unwrap();
    // SAFETY: the page is leaked (lives for the process), 8-aligned (a Box of an 8-aligned
    // type), and this is its only writer.
    unsafe { PageWriter::new(page) }.publish(&conversion);
    // SAFETY: as above; it is written only through the PageWriter.
    unsafe { PageReader::new(page) }
}

/// Parts of a read, to show where the floor is (`paired_ratios` times them against `rdtsc`): the
/// seqlock around the counter read alone, and that plus `time_zero` and the shift-31 conversion
/// from the word holding `time_shift` and `time_mult`, with none of the checks a reader owes a
/// page it does not control (capabilities, parameter validity). Each is one attempt inlined into
/// the loop, as `PageReader::now_ns` is, with an out-of-line fallback. Not readers: they trust
/// `page`, which must be [`exact_page`]'s (shift 31).
mod floor {
    use std::ptr::addr_of_mut;
    use std::sync::atomic::{AtomicU64, Ordering};

    use perfclock_core::page::PerfEventMmapPage;
    use perfclock_core::{counter, SeqLock};

    #[cold]
    #[inline(never)]
    fn busy() -> u64 {
        0
    }

    /// The sequence (core's `SeqLock`, as the reader uses it): its odd test, the counter, the
    /// sequence again.
    #[inline(always)]
    pub(crate) fn seqlock_and_counter(page: *mut PerfEventMmapPage) -> u64 {
        // SAFETY: `page` is `exact_page`'s: leaked, 8-aligned, written only atomically.
        let lock = unsafe { SeqLock::from_ptr(addr_of_mut!((*page).lock)) };
        let Some(stamp) = lock.optimistic_read() else {
            return busy();
        };
        let cycles = counter::read_counter_or_zero();
        if !lock.validate_read(stamp) {
            return busy();
        }
        cycles
    }

    /// [`seqlock_and_counter`] plus `time_zero` and the conversion of the word at offset 48.
    #[inline(always)]
    pub(crate) fn seqlock_and_conversion(page: *mut PerfEventMmapPage) -> u64 {
        // SAFETY: as in `seqlock_and_counter`; the 8-byte word at `pmc_width` (offset 48) is
        // 8-aligned and holds `time_shift` and `time_mult`, as the core reader loads it.
        let (lock, scale, time_zero) = unsafe {
            (
                SeqLock::from_ptr(addr_of_mut!((*page).lock)),
                AtomicU64::from_ptr(addr_of_mut!((*page).pmc_width).cast::<u64>()),
                AtomicU64::from_ptr(addr_of_mut!((*page).time_zero)),
            )
        };
        let Some(stamp) = lock.optimistic_read() else {
            return busy();
        };
        let (scale, time_zero) = (
            scale.load(Ordering::Relaxed),
            time_zero.load(Ordering::Relaxed),
        );
        let cycles = counter::read_counter_or_zero();
        if !lock.validate_read(stamp) {
            return busy();
        }
        // The core reader's shift-31 arithmetic (private there), written out.
        let mult = scale >> 32;
        let (high, low) = (cycles >> 32, cycles & 0xffff_ffff);
        time_zero
            .wrapping_add((high * mult) << 1)
            .wrapping_add((low * mult) >> 31)
    }
}

/// The CPU's vendor and model from /proc/cpuinfo (x86's `vendor_id`/`model name`, arm64's
/// `CPU implementer`/`CPU part`), "unknown" where absent.
fn cpu_vendor_and_model() -> (String, String) {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |names: &[&str]| {
        info.lines()
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                names
                    .contains(&key.trim())
                    .then(|| value.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string())
    };
    (
        field(&["vendor_id", "CPU implementer"]),
        field(&["model name", "CPU part"]),
    )
}

fn reads(c: &mut Criterion) {
    let (vendor, model) = cpu_vendor_and_model();
    println!("cpu: vendor {vendor} model {model}");
    // The process-wide clock, without background refinement so that no calibration thread
    // competes for the two CPUs while reads are timed (the read path is the same either way).
    let clock: &'static Clock = match perfclock::init_with(Options::default().refine(false)) {
        Ok(clock) => clock,
        Err(error) => {
            skip("perfclock reads", Need::Perf, error);
            return;
        }
    };
    println!(
        "perfclock mode: {:?}, error bound {} ns",
        clock.mode(),
        clock.error_bound_ns()
    );
    let exact = exact_page();
    // The core reader over the clock's own page: the facade's fast path minus its plumbing.
    let same_page = CoreReader::of(clock);
    let quanta_clock = quanta::Clock::new();

    let perfclock_now = perfclock::now_ns;
    let perfclock_try = || perfclock::try_now_ns().unwrap_or(0);
    let clock_now = || clock.now_ns().unwrap_or(0);
    let core_exact = || exact.now_ns().unwrap_or(0);
    let core_same = || same_page.now_ns();
    let ordered_now = perfclock::now_ns_ordered;
    let stamp_now = CounterStamp::now;
    let lfence_now = || {
        serialise();
        perfclock::now_ns()
    };
    let rdtsc = || counter::read_counter().unwrap_or(0);
    let floor_page = exact.page().as_ptr();
    let floor_now = || floor::seqlock_and_conversion(floor_page);
    let lfence_rdtsc = || counter::read_counter_ordered().unwrap_or(0);
    let std_instant = Instant::now;
    let quanta_now = || quanta_clock.now();
    let minstant_now = minstant::Instant::now;
    // Each read is a closure monomorphised into the same inlined loop: no indirect call.
    macro_rules! bench_one {
        ($group:expr, $name:expr, $read:expr, $runner:ident) => {{
            let read = $read;
            $group.bench_function($name, |b| b.iter_custom(|iters| $runner(iters, &read)));
        }};
    }

    let mut one = c.benchmark_group("read 1 thread");
    bench_one!(one, "perfclock::now_ns", perfclock_now, run_calls);
    bench_one!(one, "perfclock::try_now_ns", perfclock_try, run_calls);
    bench_one!(one, "Clock::now_ns", clock_now, run_calls);
    bench_one!(one, "PageReader::now_ns exact page", core_exact, run_calls);
    bench_one!(one, "PageReader::now_ns clock page", core_same, run_calls);
    bench_one!(one, "perfclock::now_ns_ordered", ordered_now, run_calls);
    bench_one!(one, "CounterStamp::now", stamp_now, run_calls);
    bench_one!(one, "lfence; perfclock::now_ns", lfence_now, run_calls);
    bench_one!(one, "rdtsc", rdtsc, run_calls);
    bench_one!(
        one,
        "floor: the page's arithmetic inline",
        floor_now,
        run_calls
    );
    bench_one!(one, "lfence;rdtsc", lfence_rdtsc, run_calls);
    if has_rdtscp() {
        bench_one!(one, "rdtscp", rdtscp, run_calls);
    } else {
        skip(
            "rdtscp",
            Need::CpuFeature("rdtscp"),
            "the CPU does not report it",
        );
    }
    bench_one!(one, "clock_gettime MONOTONIC", monotonic_ns, run_calls);
    bench_one!(one, "std Instant::now", std_instant, run_calls);
    bench_one!(one, "quanta Clock::now", quanta_now, run_calls);
    bench_one!(one, "minstant Instant::now", minstant_now, run_calls);
    one.finish();

    // One and two threads through the same machinery, so that their ratio compares like
    // with like.
    let mut threaded = c.benchmark_group("read per thread");
    macro_rules! bench_threads {
        ($name:expr, $read:expr) => {{
            let read = $read;
            for threads in [1, 2] {
                let id = BenchmarkId::new($name, format!("{threads} threads"));
                threaded.bench_function(id, |b| {
                    b.iter_custom(|iters| run_calls_threaded(threads, iters, &read))
                });
            }
            report_overlap($name);
        }};
    }
    bench_threads!("perfclock::now_ns", perfclock_now);
    bench_threads!("perfclock::now_ns_ordered", ordered_now);
    bench_threads!("Clock::now_ns", clock_now);
    bench_threads!("PageReader::now_ns exact page", core_exact);
    bench_threads!("rdtsc", rdtsc);
    bench_threads!("clock_gettime MONOTONIC", monotonic_ns);
    bench_threads!("quanta Clock::now", quanta_now);
    threaded.finish();

    if criterion_filter_allows("paired") {
        paired_ratios(clock, &quanta_clock, &exact);
    }
}

/// ns per call over `calls` calls (the loop of [`run_calls`]).
fn ns_per_call<T>(calls: u64, read: &impl Fn() -> T) -> f64 {
    run_calls(calls, read).as_secs_f64() * 1e9 / calls as f64
}

/// The issue's ratio targets measured paired: each round times every read once, back to back,
/// and the ratios are taken within the round, so load that changes between criterion's
/// benchmarks (seconds apart) does not skew them. Prints the median and the 10th-90th
/// percentile range of each ratio over the rounds.
fn paired_ratios(clock: &'static Clock, quanta_clock: &quanta::Clock, exact: &PageReader<'_>) {
    const ROUNDS: usize = 41;
    const CALLS: u64 = 100_000;
    let mut rounds = Vec::with_capacity(ROUNDS);
    let same_page = CoreReader::of(clock);
    let page = exact.page().as_ptr();
    // The floor's pieces compute what the reader computes (within the reads' own reordering).
    let (before, piece, after) = (
        exact.now_ns_ordered().unwrap(),
        floor::seqlock_and_conversion(page),
        exact.now_ns_ordered().unwrap(),
    );
    assert!(
        before.saturating_sub(1_000) <= piece && piece <= after + 1_000,
        "floor conversion {piece} outside [{before}, {after}]"
    );
    for _ in 0..ROUNDS {
        let now = ns_per_call(CALLS, &perfclock::now_ns);
        let clock_now = ns_per_call(CALLS, &|| clock.now_ns().unwrap_or(0));
        let core_now = ns_per_call(CALLS, &|| same_page.now_ns());
        let rdtsc = ns_per_call(CALLS, &|| counter::read_counter().unwrap_or(0));
        let gettime = ns_per_call(CALLS, &monotonic_ns);
        let quanta_now = ns_per_call(CALLS, &|| quanta_clock.now());
        let ordered = ns_per_call(CALLS, &perfclock::now_ns_ordered);
        let lfence_rdtsc = ns_per_call(CALLS, &|| counter::read_counter_ordered().unwrap_or(0));
        let stamp = ns_per_call(CALLS, &CounterStamp::now);
        let exact_now = ns_per_call(CALLS, &|| exact.now_ns().unwrap_or(0));
        let seqlock = ns_per_call(CALLS, &|| floor::seqlock_and_counter(page));
        let conversion = ns_per_call(CALLS, &|| floor::seqlock_and_conversion(page));
        rounds.push([
            now / rdtsc,
            clock_now / rdtsc,
            now / core_now,
            now / gettime,
            now / quanta_now,
            ordered / lfence_rdtsc,
            stamp / rdtsc,
            seqlock / rdtsc,
            conversion / rdtsc,
            exact_now / rdtsc,
            now / conversion,
            clock_now / conversion,
        ]);
    }
    let labels = [
        "perfclock::now_ns / rdtsc",
        "Clock::now_ns / rdtsc",
        "perfclock::now_ns / PageReader::now_ns clock page",
        "perfclock::now_ns / clock_gettime MONOTONIC",
        "perfclock::now_ns / quanta Clock::now",
        "perfclock::now_ns_ordered / lfence;rdtsc",
        "CounterStamp::now / rdtsc",
        "floor: seqlock around rdtsc / rdtsc",
        "floor: seqlock, time_zero, conversion, no checks / rdtsc",
        "PageReader::now_ns exact page / rdtsc",
        "perfclock::now_ns / floor",
        "Clock::now_ns / floor",
    ];
    for (index, label) in labels.iter().enumerate() {
        let mut ratios: Vec<f64> = rounds.iter().map(|round| round[index]).collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "paired ratio {label}: median {:.3} (p10 {:.3}, p90 {:.3}) over {ROUNDS} rounds",
            ratios[ROUNDS / 2],
            ratios[ROUNDS / 10],
            ratios[ROUNDS * 9 / 10]
        );
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = reads
}
criterion_main!(benches);
