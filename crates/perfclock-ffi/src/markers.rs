//! C ABI of the marker writer (`perfclock_marker*` in `perfclock.h`).
