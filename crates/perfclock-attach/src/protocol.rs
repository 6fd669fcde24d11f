//! HotSpot's attach protocol, version 1, for the `load` command: the request bytes and a pure
//! parser of the JVM's answer (bytes perfclock did not write: fuzzed by `fuzz/attach_parsers`).
//!
//! Request: `1\0load\0<agent>\0<absolute>\0<options>\0`, five NUL-terminated strings (the
//! protocol version, the command and HotSpot's fixed three arguments).
//!
//! Answer: the operation's completion code on the first line, then what the operation printed.
//! For `load` that text depends on the JDK:
//! - JDK 9 to 20: `return code: N` when `Agent_OnAttach` ran (the completion code is then 0);
//!   a completion code of -1 with the reason (`Agent_OnAttach is not available in ...`,
//!   `... was not loaded.` and dlerror's text) when it did not.
//! - JDK 21 and later: completion code 0 always; `return code: N` when `Agent_OnAttach` ran,
//!   otherwise only the reason.
//! - JDK 8: a bare `N` line in place of `return code: N`.

use std::fmt;

use perfclock_core::untrusted::Untrusted;

/// HotSpot's limit on each argument of an attach operation (`AttachOperation::arg_length_max`).
pub const MAX_ARGUMENT_BYTES: usize = 1024;

/// The answer is read up to this size; what the JVM prints for `load` is a few lines.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// The `load` request for an agent given by absolute path.
///
/// # Errors
/// [`RequestError`] if the path or the options hold a NUL byte or exceed
/// [`MAX_ARGUMENT_BYTES`] (HotSpot would refuse the request without saying why).
pub fn load_request(agent: &[u8], options: &[u8]) -> Result<Vec<u8>, RequestError> {
    for (argument, bytes) in [("agent path", agent), ("agent option string", options)] {
        if bytes.contains(&0) {
            return Err(RequestError::Nul { argument });
        }
        if bytes.len() > MAX_ARGUMENT_BYTES {
            return Err(RequestError::TooLong {
                argument,
                len: bytes.len(),
            });
        }
    }
    let mut request = Vec::with_capacity(agent.len() + options.len() + 16);
    for part in [&b"1"[..], b"load", agent, b"true", options] {
        request.extend_from_slice(part);
        request.push(0);
    }
    Ok(request)
}

/// What the JVM answered to `load`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadResponse {
    /// `Agent_OnAttach` ran and returned 0 (JNI_OK); `message` is any other text the JVM printed.
    Loaded {
        /// The JVM's text besides the return code line, trimmed (usually empty).
        message: String,
    },
    /// `Agent_OnAttach` ran and returned `return_code`; the JVM did not keep the agent.
    AgentFailed {
        /// `Agent_OnAttach`'s return value.
        return_code: i32,
        /// The JVM's text besides the return code line, trimmed.
        message: String,
    },
    /// The operation completed (code 0) but `Agent_OnAttach` never ran (JDK 21+): the library
    /// did not load, has no `Agent_OnAttach`, or dynamic loading is disabled.
    NotLoaded {
        /// The JVM's reason, trimmed.
        message: String,
    },
    /// The operation failed with a non-zero completion code (JDK 17 reports an agent that did
    /// not load or has no `Agent_OnAttach` so).
    Refused {
        /// The completion code (first line).
        code: i32,
        /// The JVM's text after it, trimmed.
        message: String,
    },
}

/// Parses the JVM's complete answer to `load` (everything up to EOF).
///
/// # Errors
/// [`MalformedResponse`] if the first line is not an integer.
pub fn parse_load_response(bytes: &[u8]) -> Result<LoadResponse, MalformedResponse> {
    let text = String::from_utf8_lossy(bytes);
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let Ok(code) = first.trim().parse::<i32>() else {
        return Err(MalformedResponse {
            excerpt: text.chars().take(200).collect(),
        });
    };
    if code != 0 {
        return Ok(LoadResponse::Refused {
            code,
            message: rest.trim().to_owned(),
        });
    }
    let mut return_code = None;
    let mut others = Vec::new();
    for (index, line) in rest.lines().enumerate() {
        let trimmed = line.trim();
        let number = trimmed
            .strip_prefix("return code:")
            .map(str::trim)
            // JDK 8 prints the bare return code as the first line after the completion code.
            .or((index == 0).then_some(trimmed));
        match number.and_then(|n| n.parse::<i32>().ok()) {
            Some(n) if return_code.is_none() => return_code = Some(n),
            _ if trimmed.is_empty() => {}
            _ => others.push(trimmed),
        }
    }
    let message = others.join("\n");
    Ok(match return_code {
        Some(0) => LoadResponse::Loaded { message },
        Some(return_code) => LoadResponse::AgentFailed {
            return_code,
            message,
        },
        None => LoadResponse::NotLoaded { message },
    })
}

/// Why a `load` request cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The argument holds a NUL byte, which ends it on the JVM's side.
    Nul {
        /// Which argument: "agent path" or "agent option string".
        argument: &'static str,
    },
    /// The argument is longer than HotSpot accepts.
    TooLong {
        /// Which argument: "agent path" or "agent option string".
        argument: &'static str,
        /// Its length in bytes.
        len: usize,
    },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Nul { argument } => {
                write!(
                    f,
                    "the {argument} holds a NUL byte, which HotSpot cannot receive"
                )
            }
            Self::TooLong { argument, len } => write!(
                f,
                "the {argument} is {len} bytes; HotSpot accepts at most {MAX_ARGUMENT_BYTES} \
                 per argument: shorten them"
            ),
        }
    }
}

impl std::error::Error for RequestError {}

/// The answer was not HotSpot's format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedResponse {
    /// The start of the answer, lossily decoded, for the error message.
    pub excerpt: String,
}

impl fmt::Display for MalformedResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the JVM's answer is not HotSpot's attach protocol: \"{}\"",
            Untrusted::str(&self.excerpt)
        )
    }
}

impl std::error::Error for MalformedResponse {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_is_five_nul_terminated_strings() {
        let request = load_request(b"/opt/a.so", b"jitdump=/d,log=/l").unwrap();
        assert_eq!(request, b"1\0load\0/opt/a.so\0true\0jitdump=/d,log=/l\0");
        assert_eq!(
            load_request(b"/a.so", b"").unwrap(),
            b"1\0load\0/a.so\0true\0\0"
        );
    }

    #[test]
    fn request_refuses_what_hotspot_would_drop() {
        assert_eq!(
            load_request(b"/a.so", b"x\0y"),
            Err(RequestError::Nul {
                argument: "agent option string"
            })
        );
        let long = vec![b'a'; MAX_ARGUMENT_BYTES + 1];
        assert_eq!(
            load_request(&long, b""),
            Err(RequestError::TooLong {
                argument: "agent path",
                len: MAX_ARGUMENT_BYTES + 1
            })
        );
        assert!(load_request(&long[1..], &long[1..]).is_ok());
    }

    #[test]
    fn answers_of_each_jdk_generation() {
        // JDK 9+: Agent_OnAttach ran.
        assert_eq!(
            parse_load_response(b"0\nreturn code: 0\n"),
            Ok(LoadResponse::Loaded {
                message: String::new()
            })
        );
        assert_eq!(
            parse_load_response(b"0\nreturn code: 7\n"),
            Ok(LoadResponse::AgentFailed {
                return_code: 7,
                message: String::new()
            })
        );
        // JDK 8.
        assert_eq!(
            parse_load_response(b"0\n-1\n"),
            Ok(LoadResponse::AgentFailed {
                return_code: -1,
                message: String::new()
            })
        );
        // JDK 17: the library has no Agent_OnAttach.
        assert_eq!(
            parse_load_response(b"-1\nAgent_OnAttach is not available in /a.so\n"),
            Ok(LoadResponse::Refused {
                code: -1,
                message: "Agent_OnAttach is not available in /a.so".into()
            })
        );
        // JDK 21+: the same, with completion code 0.
        assert_eq!(
            parse_load_response(b"0\n/a.so was not loaded.\n/a.so: cannot open shared object\n"),
            Ok(LoadResponse::NotLoaded {
                message: "/a.so was not loaded.\n/a.so: cannot open shared object".into()
            })
        );
        // A reason that starts with a number is not a JDK 8 return code only on line one.
        assert_eq!(
            parse_load_response(b"0\nwarning\n12\n"),
            Ok(LoadResponse::NotLoaded {
                message: "warning\n12".into()
            })
        );
    }

    #[test]
    fn malformed_answers_are_errors() {
        for bytes in [
            &b""[..],
            b"\n",
            b"load\n",
            b"0x1\nreturn code: 0\n",
            b"\xff\xfe",
        ] {
            assert!(parse_load_response(bytes).is_err(), "{bytes:?}");
        }
    }
}
