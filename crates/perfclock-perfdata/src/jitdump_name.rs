//! The name perf looks for in a recording's maps to find a JIT's dump: `jit-<pid>.dump`
//! (perf's `jit_detect`, `tools/perf/util/jitdump.c`).

use std::path::Path;

/// The file name of process `pid`'s jitdump: `jit-<pid>.dump`.
pub fn jitdump_file_name(pid: u32) -> String {
    format!("jit-{pid}.dump")
}

/// The pid of a jitdump path whose file name is `jit-<pid>.dump` (decimal digits only, as
/// perf matches it), or `None`.
pub fn jitdump_pid(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let digits = name.strip_prefix("jit-")?.strip_suffix(".dump")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_perfs_pattern_and_round_trip() {
        assert_eq!(jitdump_pid(Path::new("/a/jit-12.dump")), Some(12));
        assert_eq!(jitdump_pid(Path::new("jit-0.dump")), Some(0));
        for pid in [0, 1, 4_194_304, u32::MAX] {
            assert_eq!(jitdump_pid(Path::new(&jitdump_file_name(pid))), Some(pid));
        }
        for name in [
            "/a/jit-.dump",
            "/a/jit-1x.dump",
            "/a/jit-+1.dump",
            "/a/jit-1.dump.timeconv",
            "/jit-1.dump/x",
            "/a/jit-99999999999.dump",
        ] {
            assert_eq!(jitdump_pid(Path::new(name)), None, "{name}");
        }
    }
}
