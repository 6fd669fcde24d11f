//! The common base of perfclock's per-process files, `jit-<pid>.dump` (`perfclock-jitdump`) and
//! `marker-<pid>.txt` (`perfclock-markers`).
//!
//! Both writers keep one file per process and directory, whatever name reached the directory:
//! perf and samply find the file through its mapping, and a second file for the same directory
//! would replace the first (the exclusive create removes a stale file of this pid). The
//! [`Registry`] therefore knows a directory by its device and inode ([`FileKey`]), which a
//! symlink, a bind mount and `.` all share.
//!
//! Both files are in one clock, chosen by name ([`ClockName`]) by the program or, through a
//! front end (the C ABI, the JVM agent), by an environment variable. A handle used in a fork
//! child ([`ForkChild`]), a second open in another clock ([`ClockMismatch`]), a name someone
//! else holds ([`TakenName`]) and a file a live writer of the same pid number holds
//! ([`LiveName`]) are the same failures for both.
//!
//! # Safety
//! No unsafe code.
#![deny(unsafe_code)]

mod clock_name;
mod error;
mod registry;

pub use clock_name::{ClockName, UnknownClock};
pub use error::{ClockMismatch, ForkChild};
pub use perfclock_os::shared_file::{LiveName, TakenName};
pub use registry::{FileKey, Registered, Registry, Retention};
