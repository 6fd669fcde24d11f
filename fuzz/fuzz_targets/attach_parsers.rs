//! The parsers of what a JVM and /proc hand `perfclock attach`, on arbitrary bytes: they never
//! panic, and what they return is consistent with the input; option files are asked for within
//! the budget; the escaped text shown on a terminal holds no control character.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_attach::procfs::{self, ProcStatus};
use perfclock_attach::protocol::{self, LoadResponse};
use perfclock_core::untrusted::{Untrusted, UNTRUSTED_MAX_CHARS};

fuzz_target!(|data: &[u8]| {
    // The JVM's answer to `load`.
    match protocol::parse_load_response(data) {
        Ok(LoadResponse::Loaded { message })
        | Ok(LoadResponse::NotLoaded { message })
        | Ok(LoadResponse::AgentFailed { message, .. })
        | Ok(LoadResponse::Refused { message, .. }) => assert!(message.len() <= data.len() * 3),
        Err(malformed) => assert!(malformed.excerpt.chars().count() <= 200),
    }
    let text = String::from_utf8_lossy(data);
    if let Some(status) = ProcStatus::parse(&text) {
        for signal in -1..=66 {
            let _ = status.catches(signal);
        }
    }
    let _ = procfs::vm_of_maps(&text);
    let _ = procfs::maps_file(&text, 8, 1, 1234);
    // Split the input into a command line, an environment and an option file's contents.
    let (cmdline, rest) = data.split_at(data.len() / 3);
    let (environ, file) = rest.split_at(rest.len() / 2);
    let mut asked = 0usize;
    let mut read_file = |_: &str, max: usize| {
        asked += 1;
        assert!(max <= procfs::OPTION_FILES_MAX_BYTES + 1);
        Some(file[..file.len().min(max)].to_vec())
    };
    if let Some(blocker) = procfs::attach_blocker(cmdline, environ, &mut read_file) {
        assert!(blocker.option == "-Xrs" || blocker.option == "-XX:+DisableAttachMechanism");
    }
    assert!(asked <= procfs::OPTION_FILES_MAX_COUNT);
    // What a terminal is shown of the JVM's bytes: no control character, bounded.
    let shown = Untrusted(data).to_string();
    assert!(!shown.chars().any(char::is_control));
    assert!(shown.chars().count() <= UNTRUSTED_MAX_CHARS * 10 + 40);
    let request = protocol::load_request(cmdline, environ);
    if let Ok(request) = request {
        assert_eq!(request.iter().filter(|&&b| b == 0).count(), 5);
    }
});
