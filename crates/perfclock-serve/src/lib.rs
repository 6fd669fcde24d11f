//! The server side of `perfclock serve`: one calibration per machine, published in a shared
//! page every client maps read-only instead of calibrating on its own (the client is the
//! `perfclock` facade's `shared_page`; the layout is `perfclock_core::shared_page`).
//!
//! - [`publisher`]: the page's directory, the live page (a sealed memfd) and the thread that
//!   hands it to clients, the file beside it, the published paravirt offset's file;
//! - [`line`](mod@line): what is published and when (the in-process refiner's line, continued across
//!   refits);
//! - the command around them (flags, modes, signals, the poll loop, logging) is the CLI's.
//!
//! # Safety
//! Unsafe code is confined to [`publisher`], which says why it is sound.
#![deny(unsafe_code)]

mod error;
pub mod line;
pub mod publisher;

pub use error::PublishError;
