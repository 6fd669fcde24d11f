//! The CPUs a thread may run on.
