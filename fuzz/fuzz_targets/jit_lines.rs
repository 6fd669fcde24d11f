//! A jitdump's source lines as `perfclock report` reads them (`perfclock_report::jit_lines`):
//! the dump is a runtime's file. On arbitrary bytes, and on loads at any address of any size,
//! reading gives lines or a typed error, never a panic, and any address of any load can be
//! asked for. On a dump of arbitrary code loads and
//! debug-info records laid out as perf's `jitdump.h` says, every load is read, and the line of
//! each address (the process's or the image's, from `GEN_ELF_TEXT_OFFSET`) is the last entry at
//! or below it, none before the first entry or from the last on, as a brute-force reading of
//! the same entries says.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use perfclock_report::jit_lines::{DumpLines, GEN_ELF_TEXT_OFFSET};

#[derive(Arbitrary, Debug)]
struct Load {
    code_addr: u64,
    code_size: u16,
    /// A `code_size` field other than the code's length (a runtime's lie).
    claimed_size: Option<u64>,
    /// `(offset into the code, line, file)`: a debug-info record before the load, if any.
    entries: Option<Vec<(u16, u32, u8)>>,
    probes: Vec<u16>,
}

const FILES: [&str; 3] = ["Hot.java", "a/b/Cart.java", "x"];

fn record(out: &mut Vec<u8>, id: u32, body: &[u8]) {
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 8]);
    out.extend_from_slice(body);
}

fn dump(loads: &[Load]) -> Vec<u8> {
    let mut out = b"DTiJ".to_vec();
    for word in [1u32, 40, 62, 0, 7] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.extend_from_slice(&[0u8; 16]);
    for (index, load) in loads.iter().enumerate() {
        if let Some(entries) = &load.entries {
            let mut body = load.code_addr.to_le_bytes().to_vec();
            body.extend_from_slice(&(entries.len() as u64).to_le_bytes());
            for &(offset, line, file) in entries {
                body.extend_from_slice(
                    &load.code_addr.wrapping_add(u64::from(offset)).to_le_bytes(),
                );
                body.extend_from_slice(&line.to_le_bytes());
                body.extend_from_slice(&0u32.to_le_bytes());
                body.extend_from_slice(FILES[usize::from(file) % FILES.len()].as_bytes());
                body.push(0);
            }
            record(&mut out, 2, &body);
        }
        let mut body = 7u32.to_le_bytes().to_vec();
        body.extend_from_slice(&7u32.to_le_bytes());
        let size = load.claimed_size.unwrap_or(u64::from(load.code_size));
        for word in [load.code_addr, load.code_addr, size, index as u64] {
            body.extend_from_slice(&word.to_le_bytes());
        }
        body.extend_from_slice(b"f\0");
        body.resize(body.len() + usize::from(load.code_size), 0x90);
        record(&mut out, 0, &body);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if let Ok((lines, counts)) = DumpLines::read(data, data.len() as u64) {
        assert!(counts.with_lines <= counts.loads);
        for index in 0..4 {
            for address in [0, GEN_ELF_TEXT_OFFSET, u64::MAX] {
                let _ = lines.line_at(index, address);
            }
        }
    }

    let Ok(loads) = Vec::<Load>::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    // Any load, at any address and of any size: asking for any address never panics.
    let any = dump(&loads);
    if let Ok((lines, _)) = DumpLines::read(&any[..], any.len() as u64) {
        for (index, load) in loads.iter().enumerate() {
            let end = load.code_addr.wrapping_add(u64::from(load.code_size));
            for address in [0, GEN_ELF_TEXT_OFFSET, u64::MAX, load.code_addr, end] {
                let _ = lines.line_at(index as u64, address);
            }
        }
    }
    let loads: Vec<Load> = loads
        .into_iter()
        .take(16)
        // Room for every 16-bit offset above the code's address, and every image address
        // (the text offset and a 16-bit offset) below it.
        .filter(|load| load.code_addr < u64::MAX - 0x2_0000)
        .filter(|load| load.code_addr > GEN_ELF_TEXT_OFFSET + 0x1_0000)
        .filter(|load| load.claimed_size.is_none())
        .collect();
    let bytes = dump(&loads);
    let (lines, counts) =
        DumpLines::read(&bytes[..], bytes.len() as u64).expect("a well-formed dump is read");
    assert_eq!(counts.loads, loads.len());
    assert_eq!(counts.malformed, 0);
    for (index, load) in loads.iter().enumerate() {
        let mut entries: Vec<(u64, u32, &str)> = load
            .entries
            .iter()
            .flatten()
            .map(|&(offset, line, file)| {
                (
                    load.code_addr + u64::from(offset),
                    line,
                    FILES[usize::from(file) % FILES.len()],
                )
            })
            .collect();
        // Of entries at one address, the sort keeps their order; the last of them wins.
        entries.sort_by_key(|entry| entry.0);
        for &probe in &load.probes {
            let address = load.code_addr + u64::from(probe);
            let expected = match entries.iter().rposition(|entry| entry.0 <= address) {
                Some(at) if at + 1 < entries.len() => Some((entries[at].2, entries[at].1)),
                _ => None,
            };
            let inside = u64::from(probe) < u64::from(load.code_size);
            let got = lines.line_at(index as u64, address);
            if inside {
                assert_eq!(got, expected, "{load:?} at {address:#x}");
                let image = GEN_ELF_TEXT_OFFSET + u64::from(probe);
                assert_eq!(
                    lines.line_at(index as u64, image),
                    expected,
                    "{load:?} at image {image:#x}"
                );
            } else {
                assert_eq!(got, None, "outside the code: {load:?} at {address:#x}");
            }
        }
    }
});
