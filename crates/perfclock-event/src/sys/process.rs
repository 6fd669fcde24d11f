//! Process-wide hooks and modes: handlers run around `fork` and at exit, and whether the
//! time stamp counter may be read from user space.
