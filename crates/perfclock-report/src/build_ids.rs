//! The build ids of a recording's images, as `perf buildid-list -i IN` prints them (perf's
//! `HEADER_BUILD_ID` section, read by perf itself): one `HEX PATH` line per image, the path
//! spelled as `perf script` names the DSO, so the pprof mappings can carry them.

use std::collections::BTreeMap;

/// The arguments of `perf buildid-list` (before `-i IN`) whose output [`parse`] reads.
pub const PERF_BUILDID_LIST_ARGS: &[&str] = &["buildid-list"];

/// Build ids (lowercase hex) by DSO from `perf buildid-list`'s output. Lines that are not a
/// hex id, a space and a name are skipped (perf prints nothing else there, but a warning on
/// stdout must not become a mapping); a DSO listed twice keeps its first id.
pub fn parse(output: &str) -> BTreeMap<String, String> {
    let mut build_ids = BTreeMap::new();
    for line in output.lines() {
        let Some((id, dso)) = line.split_once(' ') else {
            continue;
        };
        let dso = dso.trim();
        let is_id = !id.is_empty()
            && id.len() <= 2 * 64
            && id.len() % 2 == 0
            && id.bytes().all(|b| b.is_ascii_hexdigit());
        if is_id && !dso.is_empty() {
            build_ids
                .entry(dso.to_owned())
                .or_insert_with(|| id.to_ascii_lowercase());
        }
    }
    build_ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_read_by_dso_and_anything_else_is_skipped() {
        let output = "\
32a7f3bacee6bf69da94f497a8a076483baea20e [kernel.kallsyms]
93AC61EC5A8EB1396F9FBD350E3169A558528A40 /usr/lib/x86_64-linux-gnu/libc.so.6
no build id here
abc /odd/length
45183927463c526d5b9c9d456494ad816a7e3fee /usr/lib/jvm/java 17/lib/server/libjvm.so
0000000000000000000000000000000000000000 [kernel.kallsyms]
";
        let ids = parse(output);
        assert_eq!(
            ids.into_iter().collect::<Vec<_>>(),
            [
                (
                    "/usr/lib/jvm/java 17/lib/server/libjvm.so".to_owned(),
                    "45183927463c526d5b9c9d456494ad816a7e3fee".to_owned()
                ),
                (
                    "/usr/lib/x86_64-linux-gnu/libc.so.6".to_owned(),
                    "93ac61ec5a8eb1396f9fbd350e3169a558528a40".to_owned()
                ),
                (
                    "[kernel.kallsyms]".to_owned(),
                    "32a7f3bacee6bf69da94f497a8a076483baea20e".to_owned()
                ),
            ]
        );
    }
}
