//! C ABI of the jitdump writer (`perfclock_jitdump_*` in `perfclock.h`).
