//! The server side of `perfclock serve`: one calibration per machine, published in a shared
//! page every client maps read-only instead of calibrating on its own (the client is the
//! `perfclock` facade's `shared_page`; the layout is `perfclock_core::shared_page`).
//!
//! - [`publisher`]: the page's directory, the live page (a sealed memfd) and the thread that
//!   hands it to clients, the file beside it, the published paravirt offset's file;
//! - [`line`](mod@line): what is published and when (the in-process refiner's line, continued across
//!   refits);
//! - [`server`]: the server's run around them: its mode (kernel, paravirt, calibrated), the
//!   page's claim and inheritance, the in-process calibration, the poll loop, the paravirt
//!   offset measured and published; what it has to say handed to the caller as events;
//! - the command around it (flags, signals, printing) is the CLI's.
//!
//! # Safety
//! Unsafe code is confined to [`publisher`], which says why it is sound.
#![deny(unsafe_code)]

mod error;
pub mod line;
pub mod publisher;
pub mod server;

pub use error::{PublishError, ServeError};
