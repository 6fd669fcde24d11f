//! The Linux implementation of [`Clock`]: the kernel's page, the kernel's pvclock entry, a
//! `perfclock serve` page, or the calibrator's.
//!
//! # Safety
//! A [`Clock`] keeps the page its [`PageReader`] reads (the kernel's mapping, a server's page or
//! the calibrator's memory) alive next to the reader, so the reader it stores is `'static` and
//! is handed out only borrowed from the clock ([`Clock::reader`]). The unsafe calls make those
//! readers; moving the owner into the clock moves no page (each is a mapping of its own).
#![allow(unsafe_code)]

use std::sync::OnceLock;

#[cfg(feature = "calibrated")]
use perfclock_calib::{CalibratedClock, CalibrationOptions};
use perfclock_core::{counter, PageReader, ReadError};

use super::{Clock, ClockReader, Mode, Options};
use crate::diagnosis::Withheld;
use crate::error::Error;
use crate::kernel::{KernelPage, MapError};
use crate::paravirt::ParavirtClock;
use crate::shared_page::{SharedMapping, SharedPageInfo};

/// [`Options::open`] on Linux.
pub(super) fn open(options: Options) -> Result<Clock, Error> {
    if !counter::SUPPORTED {
        return Err(Error::Unsupported);
    }
    crate::diagnosis::counter_readable()?;
    crate::paravirt::environment_switch().map_err(Error::Environment)?;
    if !options.kernel_only && options.paravirt_wanted() {
        // A published offset says kernel mode does not apply in this boot (see
        // `ParavirtClock::open_published`); the kernel page's capabilities are read if asked.
        if let Some(paravirt) = ParavirtClock::open_published() {
            return Ok(paravirt_clock(paravirt, None));
        }
    }
    // So does a live server's page for this boot (`perfclock serve` exits in kernel mode, and
    // which sched_clock the kernel uses is fixed at boot): where paravirt mode does not come
    // first, the page is looked for before the kernel page's `perf_event_open`.
    let shared_first =
        !options.kernel_only && !options.no_shared_page && !options.paravirt_wanted();
    if shared_first {
        if let (Some(shared), _) = crate::shared_page::open_first() {
            return Ok(shared_clock(shared, None));
        }
    }
    let page = KernelPage::map().map_err(|error| match error {
        MapError::Open(open) => Error::PerfEvent(open),
        MapError::TooManyClocks => Error::TooManyClocks,
    })?;
    // SAFETY: `page` is a live read-only mapping written only by the kernel; the reader is
    // stored next to it in the returned clock (or dropped with it here) and never outlives it.
    let reader: PageReader<'static> = unsafe { PageReader::new(page.page()) };
    match reader.conversion() {
        Ok(_) => Ok(Clock {
            reader: ClockReader::Page(reader),
            source: Source::Kernel(page),
        }),
        Err(ReadError::TimeZeroUnavailable { capabilities }) => {
            if options.kernel_only {
                return Err(Error::KernelWithholdsTime(Withheld::observe(capabilities)));
            }
            // The kernel page is of no further use: the shared and calibrated modes read
            // pages of their own.
            drop(page);
            if options.paravirt_wanted() {
                if let Ok(paravirt) = ParavirtClock::open() {
                    return Ok(paravirt_clock(paravirt, Some(capabilities)));
                }
            }
            if !options.no_shared_page && !shared_first {
                if let (Some(shared), _) = crate::shared_page::open_first() {
                    return Ok(shared_clock(shared, Some(capabilities)));
                }
            }
            options.open_calibrated(Withheld::observe(capabilities))
        }
        Err(other) => Err(Error::Page(other)),
    }
}

/// `reader`, for a [`Clock`] that keeps the owner of its pages in its `source`.
fn kept_by_the_clock(reader: PageReader<'_>) -> PageReader<'static> {
    // SAFETY: every caller moves the reader's owner (a shared mapping, a calibrated clock) into
    // the `source` of the clock that stores this reader; the pages are mappings of their own,
    // which that move does not move, and the clock hands the reader out only borrowed.
    unsafe { PageReader::new_mirrored(reader.page(), reader.mirror()) }
}

/// A shared-mode clock; `capabilities` is the kernel page's word where it was read.
fn shared_clock(shared: SharedMapping, capabilities: Option<u64>) -> Clock {
    Clock {
        reader: ClockReader::Page(kept_by_the_clock(shared.page_reader())),
        // What the kernel withholds is read when asked: reading /proc/cpuinfo would cost more
        // than mapping the page.
        source: Source::Shared {
            shared,
            capabilities,
            withheld: OnceLock::new(),
        },
    }
}

/// A paravirt-mode clock; `capabilities` is the kernel page's word where it was read.
fn paravirt_clock(paravirt: ParavirtClock, capabilities: Option<u64>) -> Clock {
    Clock {
        reader: ClockReader::Pvclock {
            entry: paravirt.reader(),
            offset_ns: paravirt.offset().offset_ns,
        },
        source: Source::Paravirt {
            paravirt,
            capabilities,
            withheld: OnceLock::new(),
        },
    }
}

/// The kernel page's capability word, read now (for what the kernel withholds, when the clock
/// opened without it); 0 (nothing published) if the page cannot be had.
fn kernel_capabilities() -> u64 {
    let Ok(page) = KernelPage::map() else {
        return 0;
    };
    // SAFETY: `page` is a live read-only mapping written only by the kernel; the reader does
    // not outlive this function, where `page` stays mapped.
    let reader = unsafe { PageReader::new(page.page()) };
    reader.raw().map_or(0, |raw| raw.capabilities)
}

impl Options {
    /// Paravirt mode is tried: x86_64, not refused by [`Options::paravirt`] nor by the
    /// environment ([`crate::paravirt::disabled_by_environment`]).
    fn paravirt_wanted(&self) -> bool {
        cfg!(target_arch = "x86_64")
            && !self.no_paravirt
            && !crate::paravirt::disabled_by_environment()
    }

    #[cfg(feature = "calibrated")]
    fn open_calibrated(&self, withheld: Withheld) -> Result<Clock, Error> {
        match CalibratedClock::start(self.calibration_options()) {
            Ok(calibrated) => Ok(Clock {
                reader: ClockReader::Page(kept_by_the_clock(calibrated.reader())),
                source: Source::Calibrated {
                    calibrated,
                    withheld,
                },
            }),
            Err(reason) => Err(Error::Calibration {
                withheld: Box::new(withheld),
                reason,
            }),
        }
    }

    /// Built without calibration: kernel mode is the only mode.
    #[cfg(not(feature = "calibrated"))]
    fn open_calibrated(&self, withheld: Withheld) -> Result<Clock, Error> {
        Err(Error::KernelWithholdsTime(withheld))
    }

    /// The calibration settings with [`Options::refine`]'s choice applied.
    #[cfg(feature = "calibrated")]
    fn calibration_options(&self) -> CalibrationOptions {
        match self.refine {
            Some(refine) => self.calibration.clone().refine(refine),
            None => self.calibration.clone(),
        }
    }
}

/// What keeps a clock's page alive, and where its parameters come from.
#[derive(Debug)]
pub(super) enum Source {
    /// Keeps the kernel's page mapped.
    Kernel(#[allow(dead_code)] KernelPage),
    /// The pvclock page (mapped by the vDSO for the life of the process) and `C`.
    Paravirt {
        paravirt: ParavirtClock,
        /// The kernel page's capability word, for `withheld`: `None` when a published offset
        /// opened the clock without the kernel page (read when `withheld` is first asked).
        capabilities: Option<u64>,
        withheld: OnceLock<Withheld>,
    },
    /// Keeps the server's page mapped.
    Shared {
        shared: SharedMapping,
        /// The kernel page's capability word, for `withheld`: `None` when the clock opened
        /// without the kernel page (read when `withheld` is first asked).
        capabilities: Option<u64>,
        withheld: OnceLock<Withheld>,
    },
    #[cfg(feature = "calibrated")]
    Calibrated {
        calibrated: CalibratedClock,
        withheld: Withheld,
    },
}

impl Source {
    pub(super) fn mode(&self) -> Mode {
        match self {
            Source::Kernel(_) => Mode::Kernel,
            Source::Paravirt { .. } => Mode::Paravirt,
            Source::Shared { .. } => Mode::Shared,
            #[cfg(feature = "calibrated")]
            Source::Calibrated { .. } => Mode::Calibrated,
        }
    }

    pub(super) fn error_bound_ns(&self) -> u64 {
        match self {
            Source::Kernel(_) => 0,
            Source::Paravirt { paravirt, .. } => paravirt.error_bound_ns(),
            Source::Shared { shared, .. } => match counter::read_counter() {
                Some(now) => shared.error_bound_at(now),
                None => u64::MAX,
            },
            #[cfg(feature = "calibrated")]
            Source::Calibrated { calibrated, .. } => calibrated.error_bound_ns(),
        }
    }

    pub(super) fn reattach_shared_page(&self) -> bool {
        match self {
            Source::Shared { shared, .. } => shared.reattach_if_stale(),
            _ => false,
        }
    }

    pub(super) fn resume_after_fork(&self) -> Result<bool, Error> {
        match self {
            // The file mapping is inherited, and the server keeps it up to date; the vDSO's
            // pvclock page is mapped in the child at the same address.
            Source::Kernel(_) | Source::Paravirt { .. } | Source::Shared { .. } => Ok(false),
            #[cfg(feature = "calibrated")]
            Source::Calibrated {
                calibrated,
                withheld,
            } => calibrated
                .resume_after_fork()
                .map_err(|reason| Error::Calibration {
                    withheld: Box::new(withheld.clone()),
                    reason,
                }),
        }
    }

    #[cfg(feature = "calibrated")]
    pub(super) fn calibrated(&self) -> Option<&CalibratedClock> {
        match self {
            Source::Kernel(_) | Source::Paravirt { .. } | Source::Shared { .. } => None,
            Source::Calibrated { calibrated, .. } => Some(calibrated),
        }
    }

    pub(super) fn withheld(&self) -> Option<&Withheld> {
        match self {
            Source::Kernel(_) => None,
            Source::Shared {
                capabilities,
                withheld,
                ..
            }
            | Source::Paravirt {
                capabilities,
                withheld,
                ..
            } => Some(withheld.get_or_init(|| {
                Withheld::observe(capabilities.unwrap_or_else(kernel_capabilities))
            })),
            #[cfg(feature = "calibrated")]
            Source::Calibrated { withheld, .. } => Some(withheld),
        }
    }

    pub(super) fn paravirt(&self) -> Option<&ParavirtClock> {
        match self {
            Source::Paravirt { paravirt, .. } => Some(paravirt),
            _ => None,
        }
    }

    pub(super) fn shared_page(&self) -> Option<SharedPageInfo> {
        match self {
            Source::Shared { shared, .. } => Some(shared.info()),
            _ => None,
        }
    }
}

#[cfg(all(test, feature = "calibrated"))]
mod tests {
    use super::*;

    #[test]
    fn refine_stands_whatever_the_order() {
        let off = CalibrationOptions::default().refine(false);
        let cases = [
            (Options::default(), true),
            (Options::default().refine(false), false),
            (
                Options::default()
                    .refine(false)
                    .calibration(CalibrationOptions::default()),
                false,
            ),
            (
                Options::default()
                    .calibration(CalibrationOptions::default())
                    .refine(false),
                false,
            ),
            (Options::default().calibration(off.clone()), false),
            (Options::default().calibration(off).refine(true), true),
        ];
        for (options, refines) in cases {
            assert_eq!(
                options.calibration_options().refines(),
                refines,
                "{options:?}"
            );
        }
    }
}
