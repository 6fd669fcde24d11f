//! A file's clock by name: what a program passes as a string and a front end reads from its
//! environment variable, and the name that is no clock's ([`UnknownClock`]).

use std::ffi::OsStr;
use std::fmt;

/// A clock a file's times are in, known by name.
///
/// `Display` and `FromStr` of an implementing type are [`ClockName::as_str`] and
/// [`ClockName::from_name`].
pub trait ClockName: Copy + Eq + Default + fmt::Display + 'static {
    /// Every clock.
    const ALL: &'static [Self];
    /// What the clock is the clock of, for messages: `"jitdump clock"`.
    const KIND: &'static str;
    /// The names to use instead of an unknown one, each with what it is for.
    const CHOICES: &'static str;
    /// The environment variable front ends read the clock from.
    const VARIABLE: &'static str;

    /// The clock's name.
    fn as_str(self) -> &'static str;

    /// The clock called `name`.
    ///
    /// # Errors
    /// [`UnknownClock`] if no clock has that name (names are case-sensitive).
    fn from_name(name: &str) -> Result<Self, UnknownClock> {
        Self::ALL
            .iter()
            .copied()
            .find(|clock| clock.as_str() == name)
            .ok_or_else(|| UnknownClock::new::<Self>(name, None))
    }

    /// The clock [`ClockName::VARIABLE`] names: the default when it is unset or empty, and
    /// also in a setuid, setgid or file-capability process, whose environment is not its own
    /// to trust ([`perfclock_os::env::env_var_os`]).
    ///
    /// # Errors
    /// [`UnknownClock`] (naming the variable) if the value is not a clock's name.
    fn from_env() -> Result<Self, UnknownClock> {
        Self::from_value(perfclock_os::env::env_var_os(Self::VARIABLE).as_deref())
    }

    /// As [`ClockName::from_env`], for the variable's value (`None`: unset).
    ///
    /// # Errors
    /// As [`ClockName::from_env`].
    fn from_value(value: Option<&OsStr>) -> Result<Self, UnknownClock> {
        match value {
            None => Ok(Self::default()),
            Some(value) if value.is_empty() => Ok(Self::default()),
            Some(value) => value
                .to_str()
                .and_then(|name| Self::from_name(name).ok())
                .ok_or_else(|| {
                    UnknownClock::new::<Self>(&value.to_string_lossy(), Some(Self::VARIABLE))
                }),
        }
    }
}

/// A name that is no clock's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownClock {
    /// The name given (invalid UTF-8 replaced).
    pub name: String,
    /// The environment variable it came from, if any.
    pub variable: Option<&'static str>,
    kind: &'static str,
    choices: &'static str,
}

impl UnknownClock {
    /// `name`, which no `C` has, from `variable` if any.
    pub fn new<C: ClockName>(name: &str, variable: Option<&'static str>) -> UnknownClock {
        UnknownClock {
            name: name.to_owned(),
            variable,
            kind: C::KIND,
            choices: C::CHOICES,
        }
    }
}

impl fmt::Display for UnknownClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let UnknownClock {
            name,
            kind,
            choices,
            ..
        } = self;
        match self.variable {
            Some(variable) => write!(f, "{variable}={name:?} names no {kind}: use {choices}"),
            None => write!(f, "unknown {kind} {name:?}: use {choices}"),
        }
    }
}

impl std::error::Error for UnknownClock {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    enum Tick {
        #[default]
        Slow,
        Fast,
    }

    impl fmt::Display for Tick {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.as_str())
        }
    }

    impl ClockName for Tick {
        const ALL: &'static [Tick] = &[Tick::Slow, Tick::Fast];
        const KIND: &'static str = "tick clock";
        const CHOICES: &'static str = "slow or fast";
        const VARIABLE: &'static str = "PERFCLOCK_PROCFILE_TEST_CLOCK";

        fn as_str(self) -> &'static str {
            match self {
                Tick::Slow => "slow",
                Tick::Fast => "fast",
            }
        }
    }

    #[test]
    fn names_round_trip_and_others_are_refused() {
        for &clock in Tick::ALL {
            assert_eq!(Tick::from_name(clock.as_str()), Ok(clock));
        }
        let error = Tick::from_name("Fast").unwrap_err();
        assert_eq!(error.name, "Fast");
        assert_eq!(error.variable, None);
        assert_eq!(
            error.to_string(),
            "unknown tick clock \"Fast\": use slow or fast"
        );
    }

    #[test]
    fn values_unset_or_empty_are_the_default() {
        assert_eq!(Tick::from_value(None), Ok(Tick::Slow));
        assert_eq!(Tick::from_value(Some(OsStr::new(""))), Ok(Tick::Slow));
        assert_eq!(Tick::from_value(Some(OsStr::new("fast"))), Ok(Tick::Fast));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let error = Tick::from_value(Some(OsStr::new("medium"))).unwrap_err();
        assert_eq!(
            error.to_string(),
            "PERFCLOCK_PROCFILE_TEST_CLOCK=\"medium\" names no tick clock: use slow or fast"
        );
        use std::os::unix::ffi::OsStrExt;
        let error = Tick::from_value(Some(OsStr::from_bytes(b"fa\xffst"))).unwrap_err();
        assert_eq!(error.name, "fa\u{fffd}st");
        assert_eq!(error.variable, Some(Tick::VARIABLE));
    }
}
