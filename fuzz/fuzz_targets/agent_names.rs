//! The JVMTI agent's parsers of bytes it did not write (`perfclock_agent::fuzzing`): the method
//! names it builds from class and method signatures (class files anyone may write) and its
//! option string. Nothing panics; the JVM's form is the signatures as they are; no name holds a
//! NUL (which ends a jitdump name) unless the input did; the Java form grows by at most 9 bytes
//! per signature byte (`Z` -> `boolean, `), so a huge name cannot come from a small input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_agent::fuzzing::{method_names, parse_options};

fuzz_target!(|data: &[u8]| {
    // class signature, method name, method signature and option string: 0xff-separated (0xff
    // never occurs in the JVM's modified UTF-8).
    let mut parts = data.splitn(4, |&b| b == 0xff);
    let class = parts.next().unwrap_or_default();
    let name = parts.next().unwrap_or_default();
    let signature = parts.next().unwrap_or_default();
    let options = parts.next().unwrap_or_default();

    let names = method_names(class, name, signature);
    // Java (plain, dotted) x (no signature, signature), then the JVM form likewise, then the
    // source path.
    assert_eq!(names.len(), 9);
    assert_eq!(
        names[4],
        [class, name].concat(),
        "the JVM form without its signature"
    );
    assert_eq!(names[5], [class, name, signature].concat(), "the JVM form");
    let input_has_nul = [class, name, signature]
        .iter()
        .any(|part| part.contains(&0));
    for symbol in &names {
        assert!(input_has_nul || !symbol.contains(&0), "a NUL in {symbol:?}");
        assert!(
            symbol.len() <= class.len() + name.len() + 9 * signature.len() + 2,
            "{} bytes from {} + {} + {}",
            symbol.len(),
            class.len(),
            name.len(),
            signature.len()
        );
    }

    let _ = parse_options(&String::from_utf8_lossy(options));
});
