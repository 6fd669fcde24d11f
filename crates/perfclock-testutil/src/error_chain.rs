//! The check that the front ends' printer of an error chain (`perfclock_core::error_chain`,
//! re-exported as `perfclock::error_chain`) prints each cause once: `Display` says what failed,
//! `source()` gives the cause, and no message repeats a cause that follows it in the chain.

use std::error::Error;

/// The `Display` of the error and of each cause reached through `source()`, in order.
pub fn messages(error: &dyn Error) -> Vec<String> {
    let mut messages = vec![error.to_string()];
    let mut cause = error.source();
    while let Some(next) = cause {
        messages.push(next.to_string());
        cause = next.source();
    }
    messages
}

/// Panics unless the error has a cause and no message of its chain contains the text of a cause
/// after it (which a printer of the chain would then print twice). Returns the chain as the front
/// ends print it.
pub fn assert_each_cause_once(error: &dyn Error) -> String {
    let messages = messages(error);
    assert!(
        messages.len() > 1,
        "{:?} has no cause through source(): nothing to check",
        messages[0]
    );
    for (at, message) in messages.iter().enumerate() {
        for cause in messages[at + 1..].iter().filter(|cause| !cause.is_empty()) {
            assert!(
                !message.contains(cause.as_str()),
                "the cause {cause:?} is printed twice: {message:?} embeds it, and source() \
                 gives it again (chain: {:?})",
                messages.join(": ")
            );
        }
    }
    perfclock_core::error_chain(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    #[derive(Debug)]
    struct Wrapper {
        embeds: bool,
        source: std::io::Error,
    }

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cannot open the thing")?;
            if self.embeds {
                write!(f, ": {}", self.source)?;
            }
            Ok(())
        }
    }

    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.source)
        }
    }

    fn wrapper(embeds: bool) -> Wrapper {
        Wrapper {
            embeds,
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        }
    }

    #[test]
    fn a_cause_given_once_passes() {
        let printed = assert_each_cause_once(&wrapper(false));
        assert!(
            printed.starts_with("cannot open the thing: Permission denied"),
            "{printed}"
        );
    }

    #[test]
    #[should_panic(expected = "is printed twice")]
    fn a_cause_embedded_and_given_again_fails() {
        assert_each_cause_once(&wrapper(true));
    }
}
