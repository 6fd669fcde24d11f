//! jitdump files (perf's `jit-<pid>.dump`) stamped with the counter perf converts.

pub mod timeconv;
