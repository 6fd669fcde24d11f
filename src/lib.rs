//! perfclock
