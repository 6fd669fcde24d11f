//! Text another process or user wrote (a path in their directory, a thread name, a JVM's
//! answer), made safe to print on a terminal: no control or format character reaches it raw (an
//! escape sequence, a carriage return that overwrites a line, a newline that forges one), and no
//! more than a bound of it. A [`core::fmt::Display`] adapter: nothing is allocated.

use core::fmt::{self, Write as _};

/// At most this many characters of one piece of untrusted text are printed.
pub const UNTRUSTED_MAX_CHARS: usize = 512;

/// Displays its bytes escaped: printable ASCII and printable non-ASCII characters as they are;
/// `\\` for a backslash; `\n`, `\r`, `\t`; `\xNN` for any other ASCII control and for bytes
/// that are not UTF-8; `\u{N}` for a non-printable character (a bidirectional override, a C1
/// control); cut after [`UNTRUSTED_MAX_CHARS`] characters with a note of how many bytes were
/// left out.
///
/// ```
/// use perfclock_core::untrusted::Untrusted;
/// let path = b"/home/u/\x1b]52;c;eA==\x07/jit-1.dump";
/// assert_eq!(
///     format!("{}", Untrusted(path)),
///     "/home/u/\\x1b]52;c;eA==\\x07/jit-1.dump"
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Untrusted<'a>(pub &'a [u8]);

impl<'a> Untrusted<'a> {
    /// Untrusted text given as a string.
    pub fn str(text: &'a str) -> Self {
        Untrusted(text.as_bytes())
    }
}

impl fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut count = 0;
        let mut consumed = 0;
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                if count == UNTRUSTED_MAX_CHARS {
                    return write!(f, "... ({} more bytes)", self.0.len() - consumed);
                }
                escape_char(f, c)?;
                count += 1;
                consumed += c.len_utf8();
            }
            for &byte in chunk.invalid() {
                if count == UNTRUSTED_MAX_CHARS {
                    return write!(f, "... ({} more bytes)", self.0.len() - consumed);
                }
                write!(f, "\\x{byte:02x}")?;
                count += 1;
                consumed += 1;
            }
        }
        Ok(())
    }
}

fn escape_char(f: &mut fmt::Formatter<'_>, c: char) -> fmt::Result {
    match c {
        '\\' => f.write_str("\\\\"),
        ' '..='~' => f.write_char(c),
        '\n' => f.write_str("\\n"),
        '\r' => f.write_str("\\r"),
        '\t' => f.write_str("\\t"),
        '\0'..='\x7f' => write!(f, "\\x{:02x}", u32::from(c)),
        // Rust's Debug escaping keeps a character as it is only if it is printable.
        _ if c.escape_debug().eq(core::iter::once(c)) => f.write_char(c),
        _ => write!(f, "\\u{{{:x}}}", u32::from(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::string::ToString;

    #[test]
    fn controls_are_escaped_and_text_kept() {
        assert_eq!(
            Untrusted::str("plain text: 42 / ok").to_string(),
            "plain text: 42 / ok"
        );
        assert_eq!(
            Untrusted::str("\x1b[2J\x1b]52;c;eA==\x07\r\nforged\\").to_string(),
            "\\x1b[2J\\x1b]52;c;eA==\\x07\\r\\nforged\\\\"
        );
        assert_eq!(
            Untrusted::str("caf\u{e9} \u{202e}x\u{9b}").to_string(),
            "caf\u{e9} \\u{202e}x\\u{9b}"
        );
        assert_eq!(Untrusted(b"a\xffb\x7f").to_string(), "a\\xffb\\x7f");
    }

    #[test]
    fn long_text_is_cut() {
        let long = "A".repeat(64 * 1024);
        assert_eq!(
            Untrusted::str(&long).to_string(),
            format!(
                "{}... ({} more bytes)",
                "A".repeat(UNTRUSTED_MAX_CHARS),
                64 * 1024 - UNTRUSTED_MAX_CHARS
            )
        );
        let bad = [0xffu8; 600];
        assert_eq!(
            Untrusted(&bad).to_string(),
            format!("{}... (88 more bytes)", "\\xff".repeat(UNTRUSTED_MAX_CHARS))
        );
    }
}
