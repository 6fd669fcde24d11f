//! Finding KVM's pvclock page in this process: the page of `struct pvclock_vcpu_time_info`
//! entries (one 64-byte slot per vCPU) that the vDSO maps read-only into every process.
//!
//! Where it is (`arch/x86/entry/vdso/vma.c`, `vdso-layout.lds.S`; see docs/design.md for the
//! versions read):
//! - [`VvarLayout::VvarVclock`]: the first page of the `[vvar_vclock]` mapping (kernels whose
//!   vDSO has the generic data pages and a mapping of its own for the vclock pages: 6.18 here);
//! - [`VvarLayout::VvarPage`]: a page of the `[vvar]` mapping: the second on kernels 4.x to
//!   6.12 (vvar page, pvclock page, hvclock page, time namespace page), the third in the layout
//!   between those and `[vvar_vclock]` (vvar page, time namespace page, pvclock page, hvclock
//!   page). Each candidate is probed and validated; the first that passes is used. The page two
//!   below the vDSO ([`VvarLayout::BelowVdso`], `[vvar_vclock]`'s first where it exists) is
//!   tried before reading `/proc/self/maps` at all.
//!
//! The kernel populates that page only if kvm-clock's vDSO mode was ever in use; otherwise its
//! fault handler raises SIGBUS. So the page is never touched before a probe that cannot fault:
//! a system call that reads it in the kernel, where a missing page is `EFAULT` instead of the
//! signal (`rt_sigprocmask`, see `kernel_reads`; `process_vm_readv` cannot be used: it refuses
//! the `VM_PFNMAP` mapping whatever its contents). Then the page is read in place and
//! validated: each online vCPU's entry (those below [`ENTRIES_PER_PAGE`]) must be a plausible
//! clock with `PVCLOCK_TSC_STABLE_BIT`, describing the same clock as vCPU 0's
//! ([`PvclockParams`]: `version`, padding and notification flags such as a paused guest's
//! `PVCLOCK_GUEST_STOPPED` may differ).
//!
//! # Safety
//! The probe passes the page's address to `rt_sigprocmask(2)`, which reads it in the kernel
//! (where a missing page is an `EFAULT`, not a signal) and changes nothing; entries are read
//! only from a page the probe found readable. `getauxval` reads the saved auxiliary vector.
#![allow(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::ptr::{self, NonNull};

use perfclock_core::pvclock::{
    PvclockParams, PvclockVcpuTimeInfo, ENTRIES_PER_PAGE, ENTRY_STRIDE, GUEST_STOPPED_BIT,
};
use perfclock_core::PvclockError;

/// The page size of the vDSO's data pages on x86_64.
const VVAR_PAGE_BYTES: usize = 4096;

/// Reads of the page's entries before they are given up on as different (the host updates
/// vCPUs' entries one after the other, so a read can catch them mid-update).
const PROBE_ATTEMPTS: u32 = 8;

/// Which mapping the page was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VvarLayout {
    /// The first page of `[vvar_vclock]` (recent kernels: 6.18 here).
    VvarVclock,
    /// Two pages below the vDSO, found without `/proc/self/maps`: `[vvar_vclock]`'s first
    /// page on the kernels that have that mapping.
    BelowVdso,
    /// Page `index` of `[vvar]` (1 on kernels 4.x to 6.12, 2 in the layout after them).
    VvarPage {
        /// The page's index in the mapping.
        index: usize,
    },
}

impl fmt::Display for VvarLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VvarLayout::VvarVclock => f.write_str("first page of [vvar_vclock]"),
            VvarLayout::BelowVdso => {
                f.write_str("page two below the vDSO (first page of [vvar_vclock])")
            }
            VvarLayout::VvarPage { index } => write!(f, "page {index} of [vvar]"),
        }
    }
}

/// A validated pvclock page of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PvclockPage {
    /// vCPU 0's entry (the page's start): mapped for the life of the process.
    entry0: NonNull<PvclockVcpuTimeInfo>,
    layout: VvarLayout,
    /// The online vCPUs whose entries were compared.
    vcpus_checked: usize,
    /// Bit `n` set: vCPU `n`'s entry carried `PVCLOCK_GUEST_STOPPED` when validated.
    guest_stopped: u64,
    /// vCPU 0's parameters when validated.
    params: PvclockParams,
}

// SAFETY: the pointer is only an address here; reading through it is `PvclockReader`'s business
// under its own contract.
unsafe impl Send for PvclockPage {}
// SAFETY: as for `Send`.
unsafe impl Sync for PvclockPage {}

impl PvclockPage {
    /// vCPU 0's entry: the start of a vDSO data page that stays mapped, read-only and populated
    /// (the probe faulted it in; the kernel's fault handler maps it again after any zap) for the
    /// life of the process, written only by the host. A fork child has it at the same address.
    pub fn entry0(&self) -> NonNull<PvclockVcpuTimeInfo> {
        self.entry0
    }

    /// Where the page was found.
    pub fn layout(&self) -> VvarLayout {
        self.layout
    }

    /// How many online vCPUs' entries were compared with vCPU 0's.
    pub fn vcpus_checked(&self) -> usize {
        self.vcpus_checked
    }

    /// The vCPUs whose entries carried `PVCLOCK_GUEST_STOPPED` when the page was validated:
    /// the host paused this VM since their watchdogs last ran. It changes no reading.
    pub fn guest_stopped_vcpus(&self) -> impl Iterator<Item = usize> + '_ {
        (0..ENTRIES_PER_PAGE).filter(|vcpu| self.guest_stopped >> vcpu & 1 != 0)
    }

    /// vCPU 0's parameters when the page was validated.
    pub fn params(&self) -> PvclockParams {
        self.params
    }
}

/// What a valid copy of the page showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validated {
    /// The clock every compared entry describes.
    pub params: PvclockParams,
    /// How many online vCPUs' entries were compared.
    pub vcpus_checked: usize,
    /// Bit `n` set: vCPU `n`'s entry carries `PVCLOCK_GUEST_STOPPED`.
    pub guest_stopped: u64,
}

const _: () = assert!(ENTRIES_PER_PAGE <= u64::BITS as usize);

/// A candidate page: the mapping's start address and which page of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The page's address.
    pub address: usize,
    /// Where it is.
    pub layout: VvarLayout,
}

/// The pages where a pvclock page may be, best first, from `/proc/self/maps`' text: the first
/// page of `[vvar_vclock]` if there is one, else the second and third pages of `[vvar]` (those
/// it has).
pub fn candidates(maps: &str) -> Vec<Candidate> {
    let mut vclock = Vec::new();
    let mut vvar = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(range) = fields.next() else { continue };
        let Some(name) = fields.nth(4) else { continue };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let pages = end.saturating_sub(start) / VVAR_PAGE_BYTES;
        match name {
            "[vvar_vclock]" if pages >= 1 => vclock.push(Candidate {
                address: start,
                layout: VvarLayout::VvarVclock,
            }),
            // Page 1 (kernels 4.x to 6.12), then page 2 (the layout between the generic
            // data pages and `[vvar_vclock]`); `index < pages` keeps the sum within the mapping.
            "[vvar]" => {
                vvar.extend(
                    (1..=2)
                        .filter(|&index| index < pages)
                        .map(|index| Candidate {
                            address: start + index * VVAR_PAGE_BYTES,
                            layout: VvarLayout::VvarPage { index },
                        }),
                )
            }
            _ => {}
        }
    }
    if vclock.is_empty() {
        vvar
    } else {
        vclock
    }
}

/// The CPUs of a `cpulist` (`0-3,6`), or `None` if it is not one.
pub fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let cpu = part.parse::<usize>().ok()?;
                (cpu, cpu)
            }
        };
        // Linux's CPU numbers stay below 2^16 (NR_CPUS): larger lists are not cpulists.
        if last < first || last >= 1 << 16 || cpus.len() > 1 << 16 {
            return None;
        }
        cpus.extend(first..=last);
    }
    Some(cpus)
}

/// Checks a copy of the page: every vCPU's entry in `vcpus` (those below
/// [`ENTRIES_PER_PAGE`]) a stable, plausible clock, the same [`PvclockParams`] as vCPU 0's.
/// `Ok(None)` when an entry was mid-update (odd `version`) in the copy: take another.
///
/// # Errors
/// [`PvclockPageError::Entry`], [`PvclockPageError::EntriesDiffer`].
pub fn validate_copy(
    page: &[u8; VVAR_PAGE_BYTES],
    vcpus: &[usize],
    layout: VvarLayout,
) -> Result<Option<Validated>, PvclockPageError> {
    let entry_at = |vcpu: usize| -> PvclockVcpuTimeInfo {
        let slot = &page[vcpu * ENTRY_STRIDE..vcpu * ENTRY_STRIDE + 32];
        let u32_at = |o: usize| u32::from_ne_bytes(slot[o..o + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |o: usize| u64::from_ne_bytes(slot[o..o + 8].try_into().unwrap_or([0; 8]));
        PvclockVcpuTimeInfo {
            version: u32_at(0),
            pad0: u32_at(4),
            tsc_timestamp: u64_at(8),
            system_time: u64_at(16),
            tsc_to_system_mul: u32_at(24),
            tsc_shift: slot[28] as i8,
            flags: slot[29],
            pad: [slot[30], slot[31]],
        }
    };
    validate_entries(entry_at, vcpus, layout)
}

/// [`validate_copy`] of the page whose vCPU `v`'s entry `entry_at(v)` reads.
fn validate_entries(
    entry_at: impl Fn(usize) -> PvclockVcpuTimeInfo,
    vcpus: &[usize],
    layout: VvarLayout,
) -> Result<Option<Validated>, PvclockPageError> {
    let checked = || vcpus.iter().copied().filter(|&v| v < ENTRIES_PER_PAGE);
    if checked()
        .chain([0])
        .any(|vcpu| entry_at(vcpu).version & 1 != 0)
    {
        return Ok(None);
    }
    let params_of = |vcpu: usize| {
        PvclockParams::of_stable(&entry_at(vcpu)).map_err(|error| PvclockPageError::Entry {
            layout,
            vcpu,
            error,
        })
    };
    let first = params_of(0)?;
    let mut validated = Validated {
        params: first,
        vcpus_checked: 0,
        guest_stopped: 0,
    };
    for vcpu in checked() {
        if params_of(vcpu)? != first {
            return Err(PvclockPageError::EntriesDiffer { vcpu });
        }
        if entry_at(vcpu).flags & GUEST_STOPPED_BIT != 0 {
            validated.guest_stopped |= 1 << vcpu;
        }
        validated.vcpus_checked += 1;
    }
    Ok(Some(validated))
}

/// Finds, probes and validates this process's pvclock page.
///
/// # Errors
/// [`PvclockPageError`]: the first candidate's reason when none passes.
pub fn find() -> Result<PvclockPage, PvclockPageError> {
    // The layouts and the entry are x86's (KVM's kvm-clock; Xen's vDSO pvclock is the same).
    if !cfg!(target_arch = "x86_64") {
        return Err(PvclockPageError::NoVvar);
    }
    let mut online = [0; VVAR_PAGE_BYTES];
    let online = read_sysfs("/sys/devices/system/cpu/online", &mut online)?;
    let vcpus = parse_cpu_list(online).unwrap_or_else(|| vec![0]);
    // Address 1 is never mapped (it is below `mmap_min_addr`): a probe that does not see that
    // cannot tell a missing page either.
    if kernel_reads(1)? {
        return Err(PvclockPageError::Probe {
            errno: libc::EINVAL,
        });
    }
    // Where recent kernels put it, found without reading /proc/self/maps (which costs more than
    // the rest of opening together); the maps' names otherwise.
    if let Some(candidate) = below_vdso() {
        if let Ok(page) = probe_candidate(candidate, &vcpus) {
            return Ok(page);
        }
    }
    let maps = read_text("/proc/self/maps")?;
    let mut first_error = None;
    for candidate in candidates(&maps) {
        match probe_candidate(candidate, &vcpus) {
            Ok(page) => return Ok(page),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    Err(first_error.unwrap_or(PvclockPageError::NoVvar))
}

/// The page two pages below the vDSO's start (`getauxval(AT_SYSINFO_EHDR)`, no system call):
/// the first of `[vvar_vclock]`, whose two pages (pvclock, hvclock) sit right below the vDSO on
/// the kernels that have it. On older kernels that address is another vvar page (the vvar data,
/// the Hyper-V page, the pvclock page itself), which the probe and the validation refuse unless
/// it is a pvclock page.
fn below_vdso() -> Option<Candidate> {
    // SAFETY: getauxval reads the auxiliary vector the C library saved; no pointer is passed.
    let vdso = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    let address = vdso
        .checked_sub(2 * VVAR_PAGE_BYTES)
        .filter(|_| vdso != 0)?;
    Some(Candidate {
        address,
        layout: VvarLayout::BelowVdso,
    })
}

fn probe_candidate(candidate: Candidate, vcpus: &[usize]) -> Result<PvclockPage, PvclockPageError> {
    if !kernel_reads(candidate.address)? {
        return Err(PvclockPageError::NotPopulated {
            layout: candidate.layout,
        });
    }
    let entry_at = |vcpu: usize| {
        let entry = (candidate.address + vcpu * ENTRY_STRIDE) as *const PvclockVcpuTimeInfo;
        // SAFETY: `validate_entries` asks only for vCPUs below ENTRIES_PER_PAGE, whose entries
        // lie inside the page, 8-aligned (the page is page-aligned, entries 64 bytes apart).
        // The kernel just read the page: mapped read-only for the life of the process (its
        // fault handler maps it again after any zap). The entry is plain integers, so any bytes
        // are a value; volatile, as the host writes it.
        unsafe { ptr::read_volatile(entry) }
    };
    // Every copy caught an entry mid-update: the host never settled.
    let mut last = PvclockPageError::Entry {
        layout: candidate.layout,
        vcpu: 0,
        error: PvclockError::VersionNeverSettled,
    };
    for _ in 0..PROBE_ATTEMPTS {
        match validate_entries(entry_at, vcpus, candidate.layout) {
            Ok(Some(validated)) => {
                let entry0 = NonNull::new(candidate.address as *mut PvclockVcpuTimeInfo)
                    .ok_or(PvclockPageError::NoVvar)?;
                return Ok(PvclockPage {
                    entry0,
                    layout: candidate.layout,
                    vcpus_checked: validated.vcpus_checked,
                    guest_stopped: validated.guest_stopped,
                    params: validated.params,
                });
            }
            Ok(None) => continue,
            Err(error @ PvclockPageError::EntriesDiffer { .. }) => last = error,
            Err(other) => return Err(other),
        }
    }
    Err(last)
}

/// The text of a sysfs attribute, read into `buffer` (one page holds any: sysfs shows at most
/// a page), without the allocation of [`read_text`].
fn read_sysfs<'a>(
    path: &'static str,
    buffer: &'a mut [u8; VVAR_PAGE_BYTES],
) -> Result<&'a str, PvclockPageError> {
    let unreadable = |error: io::Error| PvclockPageError::Unreadable {
        path,
        errno: error.raw_os_error().unwrap_or(0),
    };
    let mut file = File::open(path).map_err(unreadable)?;
    let mut len = 0;
    loop {
        match file.read(&mut buffer[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(unreadable(error)),
        }
        if len == buffer.len() {
            return Err(unreadable(io::Error::from_raw_os_error(libc::EFBIG)));
        }
    }
    std::str::from_utf8(&buffer[..len])
        .map_err(|_| unreadable(io::Error::from_raw_os_error(libc::EILSEQ)))
}

/// The text of a procfs or sysfs file. Read in large chunks from the start: procfs files report
/// size 0, so `read_to_string` would begin with 32-byte reads, and `/proc/self/maps` walks the
/// mappings again for every read.
fn read_text(path: &'static str) -> Result<String, PvclockPageError> {
    let unreadable = |error: io::Error| PvclockPageError::Unreadable {
        path,
        errno: error.raw_os_error().unwrap_or(0),
    };
    let mut file = File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::with_capacity(16 * 1024);
    loop {
        if bytes.len() == bytes.capacity() {
            bytes.reserve(bytes.capacity());
        }
        let start = bytes.len();
        bytes.resize(bytes.capacity(), 0);
        match file.read(&mut bytes[start..]) {
            Ok(0) => {
                bytes.truncate(start);
                break;
            }
            Ok(n) => bytes.truncate(start + n),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => bytes.truncate(start),
            Err(error) => return Err(unreadable(error)),
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether the kernel can read the 8 bytes at `address`, asked without touching them here.
/// `rt_sigprocmask` copies its new set from the caller before it looks at `how`, so with an
/// invalid `how` it fails with `EFAULT` where the address cannot be read (a page that is not
/// there, or whose fault handler refuses it) and with `EINVAL` where it can, and changes
/// nothing: one system call, where a copy through a pipe takes five. [`find`] checks first that
/// it says `EFAULT` for an address never mapped.
fn kernel_reads(address: usize) -> Result<bool, PvclockPageError> {
    /// The kernel's `sigset_t` on x86_64 (64 signals).
    const KERNEL_SIGSET_BYTES: usize = 8;
    const INVALID_HOW: libc::c_int = -1;
    // A null set is no read: the call would succeed without looking at `how`.
    if address == 0 {
        return Ok(false);
    }
    // SAFETY: the kernel only reads KERNEL_SIGSET_BYTES at `address`, with its own fault
    // handling (an unreadable address is EFAULT, never a signal here); no old set is asked for,
    // and an invalid `how` leaves the signal mask as it is.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            INVALID_HOW,
            address as *const libc::c_void,
            ptr::null_mut::<libc::c_void>(),
            KERNEL_SIGSET_BYTES,
        )
    };
    match (rc, last_errno()) {
        (-1, libc::EINVAL) => Ok(true),
        (-1, libc::EFAULT) => Ok(false),
        (-1, errno) => Err(PvclockPageError::Probe { errno }),
        // A kernel that accepted -1 as `how` has changed the mask: refuse rather than guess.
        _ => Err(PvclockPageError::Probe { errno: 0 }),
    }
}

fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Why no pvclock page was found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PvclockPageError {
    /// `/proc/self/maps` or `/sys/devices/system/cpu/online` could not be read.
    Unreadable {
        /// The file.
        path: &'static str,
        /// The errno.
        errno: i32,
    },
    /// No `[vvar_vclock]` or `[vvar]` mapping: not x86_64 Linux, or a vDSO disabled (`vdso=0`).
    NoVvar,
    /// The candidate page is not populated (`EFAULT` from the probe): kvm-clock's vDSO mode was
    /// never used in this boot, or this is no KVM guest.
    NotPopulated {
        /// Where it was looked for.
        layout: VvarLayout,
    },
    /// The probe's system call failed for another reason than the page, or cannot tell a
    /// missing page here (it did not say `EFAULT` for an address never mapped).
    Probe {
        /// The errno.
        errno: i32,
    },
    /// An entry is not a usable pvclock entry.
    Entry {
        /// Where it was looked for.
        layout: VvarLayout,
        /// The vCPU whose entry it is.
        vcpu: usize,
        /// What is wrong with it.
        error: PvclockError,
    },
    /// vCPU `vcpu`'s entry describes another clock than vCPU 0's (`tsc_timestamp`,
    /// `system_time`, `tsc_to_system_mul`, `tsc_shift`), in every copy.
    EntriesDiffer {
        /// The vCPU.
        vcpu: usize,
    },
}

impl fmt::Display for PvclockPageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PvclockPageError::Unreadable { path, errno } => write!(
                f,
                "{path} is unreadable ({})",
                io::Error::from_raw_os_error(*errno)
            ),
            PvclockPageError::NoVvar => {
                f.write_str("no [vvar_vclock] or [vvar] mapping in /proc/self/maps (no vDSO?)")
            }
            PvclockPageError::NotPopulated { layout } => write!(
                f,
                "the {layout} is not populated (kvm-clock's vDSO mode never used: not a KVM \
                 guest, or booted with another clocksource)"
            ),
            PvclockPageError::Probe { errno } => write!(
                f,
                "the probe (rt_sigprocmask reading the page) failed or cannot tell a missing \
                 page here ({})",
                io::Error::from_raw_os_error(*errno)
            ),
            PvclockPageError::Entry {
                layout,
                vcpu,
                error,
            } => write!(f, "vCPU {vcpu}'s entry in the {layout}: {error}"),
            PvclockPageError::EntriesDiffer { vcpu } => write!(
                f,
                "vCPU {vcpu}'s pvclock entry differs from vCPU 0's (no KVM master clock)"
            ),
        }
    }
}

impl std::error::Error for PvclockPageError {}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::pvclock::TSC_STABLE_BIT;

    const MAPS_6_18: &str = "\
7f43c21ec000-7f43c21f0000 r--p 00000000 00:00 0                          [vvar]
7f43c21f0000-7f43c21f2000 r--p 00000000 00:00 0                          [vvar_vclock]
7f43c21f2000-7f43c21f4000 r-xp 00000000 00:00 0                          [vdso]
";
    const MAPS_5_10: &str = "\
7ffd1b5f0000-7ffd1b5f4000 r--p 00000000 00:00 0                          [vvar]
7ffd1b5f4000-7ffd1b5f6000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn finds_vvar_vclock_first_and_the_older_layout_otherwise() {
        assert_eq!(
            candidates(MAPS_6_18),
            vec![Candidate {
                address: 0x7f43_c21f_0000,
                layout: VvarLayout::VvarVclock
            }]
        );
        assert_eq!(
            candidates(MAPS_5_10),
            vec![
                Candidate {
                    address: 0x7ffd_1b5f_1000,
                    layout: VvarLayout::VvarPage { index: 1 }
                },
                Candidate {
                    address: 0x7ffd_1b5f_2000,
                    layout: VvarLayout::VvarPage { index: 2 }
                }
            ]
        );
        assert!(candidates("garbage\n\n1-2 x\n").is_empty());
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    fn page_with(entries: &[PvclockVcpuTimeInfo]) -> [u8; VVAR_PAGE_BYTES] {
        let mut page = [0u8; VVAR_PAGE_BYTES];
        for (vcpu, e) in entries.iter().enumerate() {
            let slot = &mut page[vcpu * ENTRY_STRIDE..];
            slot[0..4].copy_from_slice(&e.version.to_ne_bytes());
            slot[8..16].copy_from_slice(&e.tsc_timestamp.to_ne_bytes());
            slot[16..24].copy_from_slice(&e.system_time.to_ne_bytes());
            slot[24..28].copy_from_slice(&e.tsc_to_system_mul.to_ne_bytes());
            slot[28] = e.tsc_shift as u8;
            slot[29] = e.flags;
        }
        page
    }

    const GOOD: PvclockVcpuTimeInfo = PvclockVcpuTimeInfo {
        version: 4,
        pad0: 0,
        tsc_timestamp: 1_059_213_316,
        system_time: 408_184_226,
        tsc_to_system_mul: 3_310_237_869,
        tsc_shift: -1,
        flags: 1,
        pad: [0; 2],
    };

    #[test]
    fn a_copy_is_validated_entry_by_entry() {
        let layout = VvarLayout::VvarVclock;
        let other_version = PvclockVcpuTimeInfo { version: 6, ..GOOD };
        let validated = validate_copy(&page_with(&[GOOD, other_version]), &[0, 1], layout)
            .unwrap()
            .unwrap();
        assert_eq!(validated.params, PvclockParams::of(&GOOD).unwrap());
        assert_eq!(validated.vcpus_checked, 2);
        assert_eq!(validated.guest_stopped, 0);
        let moved = PvclockVcpuTimeInfo {
            system_time: 1,
            ..GOOD
        };
        assert_eq!(
            validate_copy(&page_with(&[GOOD, moved]), &[0, 1], layout),
            Err(PvclockPageError::EntriesDiffer { vcpu: 1 })
        );
        let unstable = PvclockVcpuTimeInfo { flags: 0, ..GOOD };
        assert!(matches!(
            validate_copy(&page_with(&[unstable]), &[0], layout),
            Err(PvclockPageError::Entry {
                vcpu: 0,
                error: PvclockError::NotStable { flags: 0 },
                ..
            })
        ));
        assert!(matches!(
            validate_copy(&page_with(&[]), &[0], layout),
            Err(PvclockPageError::Entry {
                error: PvclockError::ZeroMultiplier,
                ..
            })
        ));
        // A guest that was paused: vCPU 1 still carries PVCLOCK_GUEST_STOPPED (flags 0x3, as
        // measured on an Intel guest), vCPU 0 had it cleared by a watchdog.
        let stopped = PvclockVcpuTimeInfo {
            flags: TSC_STABLE_BIT | GUEST_STOPPED_BIT,
            version: 8,
            ..GOOD
        };
        for (page, stopped_vcpu) in [([GOOD, stopped], 1), ([stopped, GOOD], 0)] {
            assert_eq!(
                validate_copy(&page_with(&page), &[0, 1], layout),
                Ok(Some(Validated {
                    params: PvclockParams::of(&GOOD).unwrap(),
                    vcpus_checked: 2,
                    guest_stopped: 1 << stopped_vcpu,
                }))
            );
        }
        // The stable bit is the clock's: one vCPU without it fails the page.
        let stopped_unstable = PvclockVcpuTimeInfo {
            flags: GUEST_STOPPED_BIT,
            ..GOOD
        };
        assert!(matches!(
            validate_copy(&page_with(&[GOOD, stopped_unstable]), &[0, 1], layout),
            Err(PvclockPageError::Entry {
                vcpu: 1,
                error: PvclockError::NotStable { flags: 2 },
                ..
            })
        ));
        let busy = PvclockVcpuTimeInfo { version: 5, ..GOOD };
        assert_eq!(
            validate_copy(&page_with(&[GOOD, busy]), &[0, 1], layout),
            Ok(None)
        );
    }

    /// This thread's signal mask.
    fn signal_mask() -> libc::sigset_t {
        // SAFETY: an all-zero sigset_t is a valid value to be overwritten.
        let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: no new set; the old one is written into `mask`.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, ptr::null(), &mut mask) };
        assert_eq!(rc, 0);
        mask
    }

    fn mask_bytes(mask: &libc::sigset_t) -> Vec<u8> {
        // SAFETY: reads the plain bytes of a value that lives for the borrow.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (mask as *const libc::sigset_t).cast::<u8>(),
                std::mem::size_of::<libc::sigset_t>(),
            )
        };
        bytes.to_vec()
    }

    #[test]
    fn the_probe_tells_unmapped_from_readable_and_changes_no_signal_mask() {
        static ALL_SIGNALS: [u8; 8] = [0xff; 8];
        let before = mask_bytes(&signal_mask());
        // The first pages of a Linux process are never mapped (mmap_min_addr); 0 is no page.
        for unmapped in [0, 1, 4096] {
            assert_eq!(kernel_reads(unmapped), Ok(false), "{unmapped:#x}");
        }
        // Readable bytes that, taken as a set, would block every signal.
        assert_eq!(kernel_reads(ALL_SIGNALS.as_ptr() as usize), Ok(true));
        assert_eq!(mask_bytes(&signal_mask()), before);
        let candidate = Candidate {
            address: 4096,
            layout: VvarLayout::VvarVclock,
        };
        assert_eq!(
            probe_candidate(candidate, &[0]),
            Err(PvclockPageError::NotPopulated {
                layout: VvarLayout::VvarVclock
            })
        );
    }
}
