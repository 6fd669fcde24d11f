//! Text another process wrote (the JVM's answer, its command name, paths inside its file
//! system), made safe to print on a terminal: no control or format character reaches it raw
//! (escape sequences, a carriage return that overwrites a line, a newline that forges one), and
//! no more than a bound.

use std::fmt::Write as _;

/// At most this many characters of one piece of untrusted text are printed.
pub const UNTRUSTED_MAX_CHARS: usize = 512;

/// `text` with every character that is not printable escaped (`\n`, `\x1b`, `\u{202e}`,
/// and `\\` for a backslash), cut after [`UNTRUSTED_MAX_CHARS`] characters with a note of how
/// much was left out.
pub fn escape_untrusted(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len().min(UNTRUSTED_MAX_CHARS) + 16);
    for (count, (index, c)) in text.char_indices().enumerate() {
        if count == UNTRUSTED_MAX_CHARS {
            let _ = write!(escaped, "... ({} more bytes)", text.len() - index);
            break;
        }
        match c {
            '\\' => escaped.push_str("\\\\"),
            ' '..='~' => escaped.push(c),
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            '\0'..='\x7f' => {
                let _ = write!(escaped, "\\x{:02x}", u32::from(c));
            }
            // Rust's Debug escaping keeps a character as it is only if it is printable.
            _ if c.escape_debug().eq(std::iter::once(c)) => escaped.push(c),
            _ => {
                let _ = write!(escaped, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    escaped
}

/// [`escape_untrusted`] of bytes, decoded as UTF-8 where they are (invalid bytes become
/// U+FFFD).
pub fn escape_untrusted_bytes(bytes: &[u8]) -> String {
    escape_untrusted(&String::from_utf8_lossy(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_text_kept() {
        assert_eq!(
            escape_untrusted("plain text: 42 / ok"),
            "plain text: 42 / ok"
        );
        assert_eq!(
            escape_untrusted("\x1b[2J\x1b]52;c;eA==\x07\r\nforged\\"),
            "\\x1b[2J\\x1b]52;c;eA==\\x07\\r\\nforged\\\\"
        );
        assert_eq!(
            escape_untrusted("caf\u{e9} \u{202e}x\u{9b}"),
            "caf\u{e9} \\u{202e}x\\u{9b}"
        );
        assert_eq!(escape_untrusted_bytes(b"a\xffb\x7f"), "a\u{fffd}b\\x7f");
    }

    #[test]
    fn long_text_is_cut() {
        let long = "A".repeat(64 * 1024);
        let escaped = escape_untrusted(&long);
        assert_eq!(
            escaped,
            format!(
                "{}... ({} more bytes)",
                "A".repeat(UNTRUSTED_MAX_CHARS),
                64 * 1024 - 512
            )
        );
    }
}
