//! The `.timeconv` sidecar parser (`jit-<pid>.dump.timeconv`, read by `perfclock
//! inject-time-conv` from a directory others may write) on arbitrary text: it never panics, and
//! whatever it accepts prints back to a record that parses to the same value.
//!
//! Half the inputs are raw text; the other half keep the record's shape (the magic line and the
//! keys, in an order and with values taken from the input) so the value parsers and the
//! conversion's checks are reached, not only the magic line.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use perfclock_core::pvclock::PvclockParams;
use perfclock_core::{BootId, TimeConversion};
use perfclock_jitdump::timeconv::{PvclockConversion, TimeConvMode, TimeConvRecord, MAGIC_LINE};

/// The record's keys in file order, `clock` and `pvclock` included, as the writer prints them:
/// read from a record it wrote, so this target follows the format instead of keeping a list of its own.
fn keys() -> &'static [String] {
    static KEYS: OnceLock<Vec<String>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let conversion = TimeConversion::new(1, 0, 0).expect("a valid conversion");
        let params = PvclockParams::new(1, 1, 1 << 31, 0, 0).expect("a valid entry");
        let record = TimeConvRecord::new(
            1,
            BootId::from_words([0, 0]),
            TimeConvMode::Paravirt,
            "tsc",
            conversion,
            0,
            0,
        )
        .with_pvclock(PvclockConversion {
            params,
            offset_ns: -1,
        });
        record
            .to_string()
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(key, _)| key.to_owned())
            .collect()
    })
}

fn check(text: &str) {
    if let Ok(record) = TimeConvRecord::parse(text) {
        let printed = record.to_string();
        assert_eq!(
            TimeConvRecord::parse(&printed).as_ref(),
            Ok(&record),
            "{printed}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    if shape & 1 == 0 {
        if let Ok(text) = std::str::from_utf8(rest) {
            check(text);
        }
        return;
    }
    // Structured: the values are the input's ';'-separated fields, the key order rotates.
    let values: Vec<String> = rest
        .split(|&b| b == b';')
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    let mut text = format!("{MAGIC_LINE}\n");
    let keys = keys();
    for i in 0..keys.len() {
        let key = &keys[(i + usize::from(shape >> 1)) % keys.len()];
        let value = values.get(i).map_or("0", String::as_str);
        text.push_str(&format!("{key}={value}\n"));
    }
    check(&text);
});
