//! [`Clock`] off Linux: the same API, and [`Clock::open`] returns [`Error::Unsupported`]
//! (perf events are Linux's), so that programs can depend on perfclock on every platform.

use perfclock_core::{PageReader, ReadError, TimeConversion};

use crate::diagnosis::Withheld;
use crate::error::Error;

/// Where a clock's parameters come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The kernel publishes them.
    Kernel,
    /// Fitted by perfclock against timestamps the kernel stamped.
    Calibrated,
    /// Read from a `perfclock serve` page.
    Shared,
}

/// How to open a [`Clock`]: off Linux, every option fails with [`Error::Unsupported`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    kernel_only: bool,
}

impl Options {
    /// Read a `perfclock serve` page (see the Linux build's documentation).
    pub fn shared_page(self, _shared_page: bool) -> Self {
        self
    }

    /// Refuse the calibrated fallback (see the Linux build's documentation).
    pub fn kernel_only(mut self, kernel_only: bool) -> Self {
        self.kernel_only = kernel_only;
        self
    }

    /// Opens a clock with these options.
    ///
    /// # Errors
    /// [`Error::Unsupported`]: perf events exist on Linux only.
    pub fn open(self) -> Result<Clock, Error> {
        Err(Error::Unsupported)
    }
}

/// A perf-domain clock; none can be opened off Linux.
#[derive(Debug)]
pub struct Clock {
    /// No value exists: every method below is unreachable.
    never: core::convert::Infallible,
}

impl Clock {
    /// Opens a clock.
    ///
    /// # Errors
    /// [`Error::Unsupported`].
    pub fn open() -> Result<Clock, Error> {
        Options::default().open()
    }

    /// Opens a clock in kernel mode only.
    ///
    /// # Errors
    /// [`Error::Unsupported`].
    pub fn open_kernel_only() -> Result<Clock, Error> {
        Options::default().kernel_only(true).open()
    }

    /// Perf-domain nanoseconds now.
    ///
    /// # Errors
    /// None can occur: no clock exists.
    pub fn now_ns(&self) -> Result<u64, ReadError> {
        match self.never {}
    }

    /// The conversion published now.
    ///
    /// # Errors
    /// None can occur: no clock exists.
    pub fn conversion(&self) -> Result<TimeConversion, ReadError> {
        match self.never {}
    }

    /// Converts a counter value.
    ///
    /// # Errors
    /// None can occur: no clock exists.
    pub fn cycles_to_ns(&self, _cycles: u64) -> Result<u64, ReadError> {
        match self.never {}
    }

    /// The counter value at perf time `ns`.
    ///
    /// # Errors
    /// None can occur: no clock exists.
    pub fn ns_to_cycles(&self, _ns: u64) -> Result<u64, ReadError> {
        match self.never {}
    }

    /// A raw counter read.
    pub fn read_counter(&self) -> Option<u64> {
        match self.never {}
    }

    /// Where the parameters come from.
    pub fn mode(&self) -> Mode {
        match self.never {}
    }

    /// The error bound in nanoseconds.
    pub fn error_bound_ns(&self) -> u64 {
        match self.never {}
    }

    /// What the kernel's page showed.
    pub fn withheld(&self) -> Option<&Withheld> {
        match self.never {}
    }

    /// The page this clock reads.
    pub fn reader(&self) -> PageReader {
        match self.never {}
    }
}
