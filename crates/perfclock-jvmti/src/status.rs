//! What `Agent_OnLoad` and `Agent_OnAttach` return: 0 for success, else one code per kind of
//! failure, so that the attaching side (`perfclock attach`, which reads HotSpot's `return
//! code: N` line) can say what failed without parsing the JVM's stderr. The table in the crate's
//! README is the contract; the values never change meaning.
//!
//! The codes are positive and above 100, apart from JNI's own negative `JNI_ERR`..`JNI_EINVAL`,
//! which a JVM may report for an agent that never ran.

/// Why a start (load, attach, new session) or a stop request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The option string: unknown, repeated or valueless key, bad value.
    Options = 101,
    /// `GetEnv` gave no JVMTI 1.2 environment.
    NoJvmti = 102,
    /// The JVM refused a capability the options need (compiled-method events, GC events).
    Capabilities = 103,
    /// The perf clock cannot be opened (and `allow_no_clock=1` was not given).
    NoClock = 104,
    /// `PERFCLOCK_JITDUMP_CLOCK` or `PERFCLOCK_MARKERS_CLOCK` names no clock.
    ClockVariable = 105,
    /// The jitdump cannot be written in `jitdump=DIR` (attach, or `strict=1`).
    Jitdump = 106,
    /// `/tmp/perf-<pid>.map` cannot be written (`perfmap=1`; attach, or `strict=1`).
    PerfMap = 107,
    /// The marker file cannot be written in `markers=DIR` (attach, or `strict=1`).
    Markers = 108,
    /// `SetEventCallbacks` or `SetEventNotificationMode` failed.
    Events = 109,
    /// A panic inside the agent (a bug; the panic message is on the JVM's stderr).
    Internal = 110,
}

impl Failure {
    /// The value returned to the JVM.
    pub(crate) fn code(self) -> i32 {
        self as i32
    }
}

/// A failure and the message printed on the JVM's stderr for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StartError {
    pub failure: Failure,
    pub message: String,
}

impl StartError {
    pub(crate) fn new(failure: Failure, message: impl Into<String>) -> StartError {
        StartError {
            failure,
            message: message.into(),
        }
    }
}

/// An error and its causes on one line: the facade's [`perfclock::error_chain`].
pub(crate) use perfclock::error_chain as chain;

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's table, read back: each code is documented with its variant's meaning.
    #[test]
    fn readme_table_lists_every_code() {
        let readme = include_str!("../README.md");
        for (failure, word) in [
            (Failure::Options, "option"),
            (Failure::NoJvmti, "JVMTI"),
            (Failure::Capabilities, "capabilit"),
            (Failure::NoClock, "perf clock"),
            (Failure::ClockVariable, "PERFCLOCK_JITDUMP_CLOCK"),
            (Failure::Jitdump, "jitdump"),
            (Failure::PerfMap, "perf map"),
            (Failure::Markers, "marker"),
            (Failure::Events, "SetEvent"),
            (Failure::Internal, "internal"),
        ] {
            let row = format!("| {} |", failure.code());
            let line = readme
                .lines()
                .find(|line| line.starts_with(&row))
                .unwrap_or_else(|| panic!("README has no row {row}"));
            assert!(line.contains(word), "{row}: {line}");
        }
    }
}
