//! Marker files (`marker-<pid>.txt`) in perf-clock nanoseconds, the format samply reads.
