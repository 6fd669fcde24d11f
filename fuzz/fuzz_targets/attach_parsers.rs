//! The parsers of what a JVM and /proc hand `perfclock attach`, on arbitrary bytes: they never
//! panic, and what they return is consistent with the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_attach::procfs::{self, ProcStatus};
use perfclock_attach::protocol::{self, LoadResponse};

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
    if let Some(blocker) = procfs::attach_blocker(cmdline, environ, &|_| Some(file.to_vec())) {
        assert!(blocker.option == "-Xrs" || blocker.option == "-XX:+DisableAttachMechanism");
    }
    let request = protocol::load_request(cmdline, environ);
    if let Ok(request) = request {
        assert_eq!(request.iter().filter(|&&b| b == 0).count(), 5);
    }
});
