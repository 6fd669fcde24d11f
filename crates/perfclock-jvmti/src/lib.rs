//! The perfclock JVMTI agent, `libperfclock_agent.so`: writes the JVM's compiled code to a
//! jitdump stamped with the perf clock (`jit-<pid>.dump`, through `perfclock-jitdump`), so that
//! `perf inject --jit` names JIT-compiled Java methods, their source lines and the methods
//! inlined into them in a default-clock `perf record`; optionally a perf map and GC pauses as
//! samply markers. Built by cargo alone: the JVMTI declarations are written here from the
//! specification (`jvmti` module), no JDK header is needed.
//!
//! ```text
//! java -agentpath:/path/libperfclock_agent.so[=OPTIONS] ...        # at JVM start
//! jcmd PID JVMTI.agent_load /path/libperfclock_agent.so [OPTIONS]  # into a running JVM
//! ```
//! `perfclock agent-path` prints the path of the agent built with the `perfclock` command.
//! OPTIONS (comma-separated `key=value`; an unknown, repeated or valueless key makes the load
//! fail with a message naming the fix):
//! - `jitdump=DIR|off`: write `DIR/jit-<pid>.dump` and its `.timeconv` record (default `.`,
//!   the JVM's working directory; `off` disables it, `./off` names a directory off).
//! - `perfmap=0|1`: also write `/tmp/perf-<pid>.map` (default 0), whole methods and stubs only.
//! - `markers=DIR`: each GC pause as a span `GC pause` in `DIR/marker-<pid>.txt`, which samply
//!   shows on the samples' timeline (default: none).
//! - `lines=0|1`: a `JIT_CODE_DEBUG_INFO` record before each load, so perf shows `File.java:LINE`
//!   (default 1).
//! - `inline=0|1`: an extra load record, named `callee <- caller <- ... <- compiled method`, for
//!   each stretch of code HotSpot inlined (default 1).
//! - `names=java|jvm`: `com.x.Foo.bar(int, java.lang.String)` (default) or the JVM's
//!   `Lcom/x/Foo;bar(ILjava/lang/String;)J`.
//! - `dottedclass=0|1`: with `names=jvm`, `com.x.Foo.bar(I)J` rather than `Lcom/x/Foo;bar(I)J`
//!   (default 0).
//! - `sig=0|1`: the parameters after the name (default 1).
//! - `strict=0|1`: at JVM start, a file that cannot be written fails the load (default 0: one
//!   line on stderr, and the JVM runs without it).
//! - `allow_no_clock=0|1`: start even without the perf clock, with no jitdump and no markers
//!   (default 0: the load fails).
//!
//! Each load or attach starts a session with its own options, finishing the one before; the
//! request `stop` ends the running session. Failures return the codes of
//! `perfclock_agent_codes::AgentFailure` (the README's table). See docs/jit.md for what perf and
//! samply show.
//!
//! # Safety
//! Unsafe code is denied here and allowed only in the modules that meet the JVM, each with its
//! own `# Safety` section: `entry` (the exported `Agent_On*` functions), `jvmti` (the JNI and
//! JVMTI declarations and the calls through the JVM's function tables) and `agent` (the
//! callbacks the JVM calls with its pointers).
#![deny(unsafe_code)]

mod agent;
mod code;
mod entry;
mod error;
mod jvmti;
mod names;
mod options;
mod perfmap;
mod session;

/// The agent's lines on the JVM's stderr start with this.
const PREFIX: &str = "perfclock_agent";

/// The agent's parsers of bytes it did not write, for the fuzz targets (`fuzz/fuzz_targets/
/// agent_names.rs`); not an API. Class and method signatures and source file names come from
/// class files anyone may write; the option string from whoever loads or attaches the agent.
#[doc(hidden)]
pub mod fuzzing {
    use crate::names::{method_symbol, source_path};
    use crate::options::{NameForm, Request};

    /// Every symbol the agent can write for this method, and its source path: each must come
    /// back without a panic.
    pub fn method_names(class_signature: &[u8], name: &[u8], signature: &[u8]) -> Vec<Vec<u8>> {
        let mut names = Vec::new();
        for form in [NameForm::Java, NameForm::Jvm] {
            for dotted in [false, true] {
                for with_signature in [false, true] {
                    names.push(method_symbol(
                        class_signature,
                        name,
                        signature,
                        form,
                        dotted,
                        with_signature,
                    ));
                }
            }
        }
        names.push(source_path(class_signature, name));
        names
    }

    /// Parses an option string as a load or an attach does; `Err` is the message the agent
    /// prints.
    pub fn parse_options(text: &str) -> Result<(), String> {
        Request::parse(text).map(drop)
    }
}
