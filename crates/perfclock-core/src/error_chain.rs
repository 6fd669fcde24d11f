//! How an error of this workspace is printed on one line. Every `Display` says what failed and
//! leaves the cause to `source()`, so a front end prints the whole chain; this is the one
//! printer, shared by the facade (which re-exports it) and the test helpers (which check that no
//! message repeats a cause). Here because it is the one crate all of them depend on.

use std::error::Error;
use std::string::{String, ToString};

/// `error` and each cause below it (`source()`), once each, joined by `": "`: how to print an
/// error of this workspace on one line, since its `Display` says what failed and leaves the
/// cause to `source()`.
pub fn error_chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt;

    #[derive(Debug)]
    struct Layer {
        what: &'static str,
        source: Option<&'static Layer>,
    }

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.what)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.source.map(|layer| layer as &(dyn Error + 'static))
        }
    }

    #[test]
    fn each_cause_once_joined_by_colons() {
        static ROOT: Layer = Layer {
            what: "Permission denied",
            source: None,
        };
        static MIDDLE: Layer = Layer {
            what: "perf_event_open failed",
            source: Some(&ROOT),
        };
        let top = Layer {
            what: "no clock",
            source: Some(&MIDDLE),
        };
        assert_eq!(
            error_chain(&top),
            "no clock: perf_event_open failed: Permission denied"
        );
        assert_eq!(error_chain(&ROOT), "Permission denied");
    }
}
