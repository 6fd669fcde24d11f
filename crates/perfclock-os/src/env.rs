//! The process's environment as a library may trust it: nothing from it in a setuid, setgid or
//! file-capability process, and the one parser of every on/off variable.
//!
//! # Safety
//! One unsafe call: `getauxval(AT_SECURE)`, which reads the auxiliary vector the C library saved
//! at start.
#![allow(unsafe_code)]

/// Whether this process runs with elevated privileges its user did not grant it: setuid,
/// setgid or file capabilities (`getauxval(AT_SECURE)`, the flag the C library's own
/// `secure_getenv` reads).
pub fn is_secure_execution() -> bool {
    // SAFETY: getauxval takes a constant and reads the auxiliary vector the C library saved at
    // start; it has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The environment variable `name`, or `None` in a setuid, setgid or file-capability process
/// (AT_SECURE), whose environment belongs to the user who started it, not to the privileges it
/// runs with: a library must not let that user redirect which files it trusts or writes.
/// What `secure_getenv(3)` does, over `std::env::var_os`.
pub fn env_var_os(name: &str) -> Option<std::ffi::OsString> {
    if is_secure_execution() {
        None
    } else {
        std::env::var_os(name)
    }
}

/// The switch the project variable `name` sets: `Some(false)` for `off`, `0`, `false`, `no`;
/// `Some(true)` for `on`, `1`, `true`, `yes` (any case, surrounding blanks ignored); `None`
/// unset or empty (and in an AT_SECURE process, as [`env_var_os`]). The one parser of every
/// on/off variable, so each accepts what users type.
///
/// # Errors
/// [`BadSwitch`](crate::BadSwitch) for any other value.
pub fn env_switch(name: &'static str) -> Result<Option<bool>, crate::BadSwitch> {
    env_var_os(name).map_or(Ok(None), |value| parse_switch(name, &value))
}

/// [`env_switch`]'s parse of `value`.
///
/// # Errors
/// As [`env_switch`].
pub fn parse_switch(
    name: &'static str,
    value: &std::ffi::OsStr,
) -> Result<Option<bool>, crate::BadSwitch> {
    let text = value.to_string_lossy();
    match text.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "off" | "0" | "false" | "no" => Ok(Some(false)),
        "on" | "1" | "true" | "yes" => Ok(Some(true)),
        _ => Err(crate::BadSwitch {
            variable: name,
            value: text.into_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn environment_is_read_outside_secure_execution() {
        // Test binaries are never setuid: the variable must come through.
        assert!(!is_secure_execution());
        assert_eq!(env_var_os("PATH"), std::env::var_os("PATH"));
    }

    #[test]
    fn switches_accept_what_users_type_and_name_the_rest() {
        let parse = |text: &str| parse_switch("PERFCLOCK_X", std::ffi::OsStr::new(text));
        for off in [
            "off", "OFF", "Off", "0", "false", "FALSE", "no", "No", " off ",
        ] {
            assert_eq!(parse(off), Ok(Some(false)), "{off:?}");
        }
        for on in ["on", "ON", "1", "true", "True", "yes", "YES"] {
            assert_eq!(parse(on), Ok(Some(true)), "{on:?}");
        }
        assert_eq!(parse(""), Ok(None));
        let bad = parse("disable").unwrap_err();
        assert_eq!(bad.value, "disable");
        let message = bad.to_string();
        assert!(
            message.starts_with("PERFCLOCK_X=\"disable\" is not a switch"),
            "{message}"
        );
        assert!(message.contains("off (or 0, false, no)"), "{message}");
    }
}
