//! The return codes of perfclock's JVMTI agent: what `Agent_OnLoad` and `Agent_OnAttach` return
//! for each kind of failure (0 is success), what the code means and what fixes it.
//!
//! The agent returns them; `perfclock attach` and `perfclock record -p/-a` read HotSpot's
//! `return code: N` line and turn it back into [`AgentFailure`], so that they can say what failed
//! without parsing the JVM's stderr. Both compile this one table; the agent's README prints it,
//! and a test of the agent compares every row of that README with [`AgentFailure::ALL`].
//!
//! The codes are positive and above 100, apart from JNI's own negative `JNI_ERR`..`JNI_EINVAL`,
//! which a JVM may report for an agent that never ran. A code never changes meaning.
//!
//! [`options`] holds the words of the agent's option string that the command writes and the
//! agent parses.
#![no_std]
#![deny(unsafe_code)]

/// The words of the agent's option string (comma-separated `key=value` pairs, or a request)
/// that `perfclock attach`, `perfclock record` and the agent share.
pub mod options {
    /// The key of the jitdump's directory: `jitdump=DIR` (or `jitdump=off`).
    pub const JITDUMP: &str = "jitdump";
    /// The request that ends the running session: the agent finishes and closes its jitdump.
    pub const STOP: &str = "stop";
}

/// Why the agent refused a start (load, attach, new session) or a stop request. The
/// discriminant is the value returned to the JVM. Non-exhaustive as every public error of the
/// workspace: a newer agent may return a code this build does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AgentFailure {
    /// The option string: unknown, repeated or valueless key, bad value.
    Options = 101,
    /// `GetEnv` gave no JVMTI 1.2 environment (a JVM still starting, before its live phase).
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

impl AgentFailure {
    /// Every failure, in the order of their codes.
    pub const ALL: [AgentFailure; 10] = [
        Self::Options,
        Self::NoJvmti,
        Self::Capabilities,
        Self::NoClock,
        Self::ClockVariable,
        Self::Jitdump,
        Self::PerfMap,
        Self::Markers,
        Self::Events,
        Self::Internal,
    ];

    /// The value returned to the JVM.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The failure behind the agent's return value, if it is one of its codes.
    pub fn from_return_code(return_code: i32) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|failure| failure.code() == return_code)
    }

    /// The variant's name, as the README's table shows it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Options => "Options",
            Self::NoJvmti => "NoJvmti",
            Self::Capabilities => "Capabilities",
            Self::NoClock => "NoClock",
            Self::ClockVariable => "ClockVariable",
            Self::Jitdump => "Jitdump",
            Self::PerfMap => "PerfMap",
            Self::Markers => "Markers",
            Self::Events => "Events",
            Self::Internal => "Internal",
        }
    }

    /// When the agent returns the code, as a clause: "the agent returns N when ...". Plain text
    /// (no markup), since a terminal prints it as is.
    pub const fn meaning(self) -> &'static str {
        match self {
            Self::Options => {
                "the option string has an unknown, repeated or valueless option, or a bad value"
            }
            Self::NoJvmti => {
                "the JVM gave no JVMTI 1.2 environment (a JVM that is still starting gives none \
                 before its live phase: perfclock attach and perfclock record -p/-a try such a \
                 JVM again every 200 ms until their timeout)"
            }
            Self::Capabilities => {
                "the JVM refused a capability the options need (compiled-method or GC events)"
            }
            Self::NoClock => "the perf clock cannot be opened",
            Self::ClockVariable => {
                "PERFCLOCK_JITDUMP_CLOCK or PERFCLOCK_MARKERS_CLOCK (in the JVM's environment) \
                 names no clock"
            }
            Self::Jitdump => {
                "the jitdump cannot be written in jitdump=DIR (on attach, or with strict=1)"
            }
            Self::PerfMap => {
                "the perf map /tmp/perf-PID.map cannot be written (perfmap=1; on attach, or with \
                 strict=1)"
            }
            Self::Markers => {
                "the marker file cannot be written in markers=DIR (on attach, or with strict=1)"
            }
            Self::Events => "SetEventCallbacks or SetEventNotificationMode failed",
            Self::Internal => "it failed internally (a panic)",
        }
    }

    /// What fixes it, as an instruction. Plain text, like [`AgentFailure::meaning`].
    pub const fn fix(self) -> &'static str {
        match self {
            Self::Options => "fix the option its message names",
            Self::NoJvmti => {
                "use a JVM with JVMTI (not a minimal VM), or a longer timeout for a JVM that is \
                 still starting"
            }
            Self::Capabilities => {
                "another agent may hold them exclusively; drop markers= for the GC ones"
            }
            Self::NoClock => "lower perf_event_paranoid, or pass allow_no_clock=1",
            Self::ClockVariable => "unset it, or pass jitdump_clock= / markers_clock=",
            Self::Jitdump => "pass a directory the JVM's user can write, or jitdump=off",
            Self::PerfMap => "remove what occupies the name, or pass perfmap=0",
            Self::Markers => "pass a directory the JVM's user can write, or drop markers=",
            Self::Events => "none: a JVM bug, whose message names the call",
            Self::Internal => "report it, with the JVM's stderr",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ALL`'s place of each variant; the match is exhaustive, so a new variant stops the build
    /// here until it has a place.
    fn position(failure: AgentFailure) -> usize {
        match failure {
            AgentFailure::Options => 0,
            AgentFailure::NoJvmti => 1,
            AgentFailure::Capabilities => 2,
            AgentFailure::NoClock => 3,
            AgentFailure::ClockVariable => 4,
            AgentFailure::Jitdump => 5,
            AgentFailure::PerfMap => 6,
            AgentFailure::Markers => 7,
            AgentFailure::Events => 8,
            AgentFailure::Internal => 9,
        }
    }

    #[test]
    fn all_holds_every_variant_once_in_code_order() {
        for (index, failure) in AgentFailure::ALL.into_iter().enumerate() {
            assert_eq!(position(failure), index, "{failure:?}");
        }
        assert!(AgentFailure::ALL
            .windows(2)
            .all(|w| w[0].code() < w[1].code()));
    }

    #[test]
    fn every_code_maps_back_and_no_other() {
        let mut known = 0;
        for code in -10..300 {
            if let Some(failure) = AgentFailure::from_return_code(code) {
                assert_eq!(failure.code(), code);
                assert!((101..=110).contains(&code), "{code}");
                known += 1;
            }
        }
        assert_eq!(known, AgentFailure::ALL.len());
    }

    #[test]
    fn names_are_the_variants_debug_names() {
        extern crate std;
        for failure in AgentFailure::ALL {
            assert_eq!(std::format!("{failure:?}"), failure.name());
        }
    }
}
