//! What `Agent_OnLoad` and `Agent_OnAttach` return: 0 for success, else the code of an
//! [`AgentFailure`], the table `perfclock attach` reads the code back with (crate
//! `perfclock-agent-codes`), and the message printed on the JVM's stderr.
//!
//! The agent's errors follow the workspace's error policy, stated in docs/design.md ("Errors").

use perfclock_agent_codes::AgentFailure;

/// A failure and the message printed on the JVM's stderr for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StartError {
    pub failure: AgentFailure,
    pub message: String,
}

impl StartError {
    pub(crate) fn new(failure: AgentFailure, message: impl Into<String>) -> StartError {
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

    /// The README's return-code table: each row, code, name, meaning and fix, is the type's.
    #[test]
    fn readme_table_is_the_types_table() {
        let readme = include_str!("../README.md");
        let header = "| code | name | returned when | what fixes it |";
        let rows: Vec<&str> = readme
            .lines()
            .skip_while(|line| *line != header)
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .collect();
        let expected: Vec<String> = AgentFailure::ALL
            .into_iter()
            .map(|failure| {
                format!(
                    "| {} | `{}` | {} | {} |",
                    failure.code(),
                    failure.name(),
                    failure.meaning(),
                    failure.fix()
                )
            })
            .collect();
        assert_eq!(
            rows,
            expected,
            "the README's table under {header:?} is not AgentFailure's; its rows are:\n{}",
            expected.join("\n")
        );
    }
}
