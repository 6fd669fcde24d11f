//! From HotSpot's per-pc inlining stacks to what the jitdump says about one compiled method:
//! the source line of each stretch of code, and the stretches that came from inlined methods.
//!
//! HotSpot describes a compiled method by "pc descriptors": at each recorded pc (calls,
//! safepoint polls, implicit exception points), the stack of methods inlined there, innermost
//! first, with a bytecode index in each. The agent reads a descriptor as perf's own agent does:
//! it holds from its pc up to the next descriptor's pc (`jvmti_write_debug_info` writes one
//! line entry per descriptor at its pc); code before the first descriptor belongs to the
//! compiled method itself (no line). Pure functions over method keys, so they are tested
//! without a JVM.

/// A stretch `[start, end)` of a compiled method's code and the inlining stack that produced
/// it, borrowed from its pc descriptor: `(method, bci)` innermost first (`frames[0]` is the
/// method whose bytecode it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Region<'a, K> {
    pub start: u64,
    pub end: u64,
    pub frames: &'a [(K, i32)],
}

/// Whether two inlining stacks hold the same methods (bcis aside).
pub(crate) fn same_methods<K: Eq>(a: &[(K, i32)], b: &[(K, i32)]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0)
}

/// The regions of the code `[start, end)` described by `scopes` (`(pc, stack of (method,
/// bci))`, any order; pcs outside the code and empty stacks are ignored; of several scopes at
/// one pc the first wins).
pub(crate) fn regions<K: Copy + Eq>(
    start: u64,
    end: u64,
    scopes: &[(u64, Vec<(K, i32)>)],
) -> Vec<Region<'_, K>> {
    let mut inside: Vec<&(u64, Vec<(K, i32)>)> = scopes
        .iter()
        .filter(|(pc, stack)| (start..end).contains(pc) && !stack.is_empty())
        .collect();
    inside.sort_by_key(|(pc, _)| *pc);
    inside.dedup_by_key(|(pc, _)| *pc);
    inside
        .iter()
        .enumerate()
        .map(|(i, (pc, stack))| Region {
            start: *pc,
            end: inside.get(i + 1).map_or(end, |next| next.0),
            frames: stack.as_slice(),
        })
        .collect()
}

/// The line a bytecode index belongs to: the entry with the greatest start at or before `bci`.
/// `table` is sorted by start (JVMTI's `GetLineNumberTable` need not be: [`sort_line_table`]).
pub(crate) fn line_of(table: &[(i64, i32)], bci: i32) -> Option<i32> {
    let after = table.partition_point(|(start, _)| *start <= i64::from(bci));
    after.checked_sub(1).map(|i| table[i].1)
}

/// Sorts a method's line table by start once, so each region's line is found by bisection.
pub(crate) fn sort_line_table(table: &mut [(i64, i32)]) {
    table.sort_by_key(|(start, _)| *start);
}

/// One line entry: from `addr` on, the code is `method`'s line `line`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LineAt<K> {
    pub addr: u64,
    pub method: K,
    pub line: i32,
}

/// The line table of the code `[start, end)` of `compiled`, from `regions`: each region's
/// innermost method's line, consecutive repeats merged; code before the first region (the
/// method's entry) on the line of `compiled`'s bytecode 0; and a closing copy of the last entry
/// at `end`. The closing entry is needed because perf's `genelf_debug.c` ends the DWARF line
/// sequence at the last entry's own address, so the last entry covers no code (a method with
/// one entry, common for C2 code, would get no line at all, as under perf's own agent).
/// `lines(method)` is the method's line table sorted by start ([`sort_line_table`]), or `None`
/// when it has none (native, no debug information): its regions get no entry and keep the
/// previous line.
pub(crate) fn line_entries<'a, K: Copy + Eq>(
    start: u64,
    end: u64,
    compiled: K,
    regions: &[Region<'_, K>],
    mut lines: impl FnMut(K) -> Option<&'a [(i64, i32)]>,
) -> Vec<LineAt<K>> {
    let mut entries: Vec<LineAt<K>> = Vec::new();
    let entry_line = lines(compiled).and_then(|table| line_of(table, 0));
    if let Some(line) = entry_line.filter(|_| regions.first().is_none_or(|r| r.start > start)) {
        entries.push(LineAt {
            addr: start,
            method: compiled,
            line,
        });
    }
    for region in regions {
        let (method, bci) = region.frames[0];
        let Some(line) = lines(method).and_then(|table| line_of(table, bci)) else {
            continue;
        };
        if entries
            .last()
            .is_some_and(|last| last.method == method && last.line == line)
        {
            continue;
        }
        entries.push(LineAt {
            addr: region.start,
            method,
            line,
        });
    }
    close(&mut entries, end);
    entries
}

/// The entries of a whole method's table `entries` (in address order, as [`line_entries`]
/// makes them) that apply to its part `[start, end)`: the
/// line in effect at `start` moved there, those inside, and a closing entry at `end`.
pub(crate) fn entries_within<K: Copy>(
    entries: &[LineAt<K>],
    start: u64,
    end: u64,
) -> Vec<LineAt<K>> {
    // `entries` are in address order: the stretch is found by bisection, not by a scan per
    // inlined range (a large compiled method has hundreds of both).
    let first_after = entries.partition_point(|e| e.addr <= start);
    let mut out: Vec<LineAt<K>> = first_after
        .checked_sub(1)
        .map(|i| LineAt {
            addr: start,
            ..entries[i]
        })
        .into_iter()
        .collect();
    let inside = entries[first_after..].partition_point(|e| e.addr < end);
    out.extend_from_slice(&entries[first_after..first_after + inside]);
    close(&mut out, end);
    out
}

fn close<K: Copy>(entries: &mut Vec<LineAt<K>>, end: u64) {
    if let Some(&last) = entries.last() {
        if last.addr < end {
            entries.push(LineAt { addr: end, ..last });
        }
    }
}

/// A stretch of code that came from an inlined method: `stack[0]` was inlined into
/// `stack[1]`, ... into `stack[last]`, the compiled method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InlinedRange<K> {
    pub start: u64,
    pub end: u64,
    pub stack: Vec<K>,
}

/// The inlined stretches of `regions`: adjacent regions with the same method stack merged,
/// those whose stack is deeper than the compiled method alone kept.
pub(crate) fn inlined_ranges<K: Copy + Eq>(regions: &[Region<'_, K>]) -> Vec<InlinedRange<K>> {
    let mut ranges: Vec<InlinedRange<K>> = Vec::new();
    let mut keep = |run: Region<'_, K>| {
        if run.frames.len() > 1 && run.end > run.start {
            ranges.push(InlinedRange {
                start: run.start,
                end: run.end,
                stack: run.frames.iter().map(|(method, _)| *method).collect(),
            });
        }
    };
    let mut run: Option<Region<'_, K>> = None;
    for region in regions {
        match &mut run {
            Some(current)
                if current.end == region.start && same_methods(current.frames, region.frames) =>
            {
                current.end = region.end;
            }
            _ => {
                if let Some(done) = run.replace(region.clone()) {
                    keep(done);
                }
            }
        }
    }
    if let Some(done) = run {
        keep(done);
    }
    ranges
}

/// The name of an inlined range: the innermost method, then each caller out to the compiled
/// method, joined by ` <- ` ("called from").
pub(crate) fn inlined_name(labels: &[&[u8]]) -> Vec<u8> {
    labels.join(&b" <- "[..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(pc: u64, stack: &[(u32, i32)]) -> (u64, Vec<(u32, i32)>) {
        (pc, stack.to_vec())
    }

    #[test]
    fn regions_run_from_each_pc_to_the_next_and_ignore_outsiders() {
        let scopes = [
            scope(0x130, &[(1, 9)]),
            scope(0x110, &[(2, 4), (1, 3)]),
            scope(0x90, &[(1, 0)]),   // before the code
            scope(0x200, &[(1, 0)]),  // at its end
            scope(0x120, &[]),        // no stack
            scope(0x110, &[(1, 77)]), // a second scope at one pc
        ];
        let regions = regions(0x100, 0x200, &scopes);
        assert_eq!(
            regions,
            vec![
                Region {
                    start: 0x110,
                    end: 0x130,
                    frames: &[(2, 4), (1, 3)][..],
                },
                Region {
                    start: 0x130,
                    end: 0x200,
                    frames: &[(1, 9)][..],
                },
            ]
        );
    }

    #[test]
    fn line_of_takes_the_last_start_at_or_before_the_bci() {
        let mut table = [(10, 3), (0, 1), (4, 2)];
        sort_line_table(&mut table);
        assert_eq!(line_of(&table, 0), Some(1));
        assert_eq!(line_of(&table, 5), Some(2));
        assert_eq!(line_of(&table, 10), Some(3));
        assert_eq!(line_of(&table, 1000), Some(3));
        assert_eq!(line_of(&[(2, 1)], 1), None);
        assert_eq!(line_of(&[], 1), None);
    }

    #[test]
    fn line_entries_use_the_innermost_method_merge_repeats_and_close_at_the_end() {
        let scopes = [
            scope(0x108, &[(1, 0)]),
            scope(0x10c, &[(1, 1)]), // same line as 0x108
            scope(0x110, &[(2, 5), (1, 2)]),
            scope(0x118, &[(3, 0), (1, 3)]), // method 3 has no table
            scope(0x120, &[(1, 10)]),
        ];
        let regions = regions(0x100, 0x130, &scopes);
        let one: &[(i64, i32)] = &[(0, 40), (10, 41)];
        let two: &[(i64, i32)] = &[(0, 70)];
        let table = |m| match m {
            1 => Some(one),
            2 => Some(two),
            _ => None,
        };
        let entries = line_entries(0x100, 0x130, 1, &regions, table);
        let got: Vec<_> = entries.iter().map(|e| (e.addr, e.method, e.line)).collect();
        assert_eq!(
            got,
            vec![
                (0x100, 1, 40), // the entry, before the first descriptor
                (0x110, 2, 70),
                (0x120, 1, 41),
                (0x130, 1, 41), // closes the sequence
            ]
        );
        // One descriptor at the very start: one line, closed at the end.
        let start_only = [scope(0x100, &[(2, 0)])];
        let regions = super::regions(0x100, 0x130, &start_only);
        let got: Vec<_> = line_entries(0x100, 0x130, 1, &regions, table)
            .iter()
            .map(|e| (e.addr, e.line))
            .collect();
        assert_eq!(got, vec![(0x100, 70), (0x130, 70)]);
        // No table at all: nothing.
        assert!(line_entries(0x100, 0x130, 3, &regions, |_| None).is_empty());
    }

    #[test]
    fn entries_within_move_the_current_line_to_the_start_and_close() {
        let entry = |addr, line| LineAt {
            addr,
            method: 1u32,
            line,
        };
        let all = [
            entry(0x100, 1),
            entry(0x110, 2),
            entry(0x120, 3),
            entry(0x140, 3),
        ];
        let got: Vec<_> = entries_within(&all, 0x118, 0x130)
            .iter()
            .map(|e| (e.addr, e.line))
            .collect();
        assert_eq!(got, vec![(0x118, 2), (0x120, 3), (0x130, 3)]);
        assert!(entries_within(&all, 0x50, 0x60).is_empty());
    }

    #[test]
    fn inlined_ranges_merge_equal_stacks_and_skip_the_compiled_method() {
        let scopes = [
            scope(0x100, &[(1, 0)]),
            scope(0x110, &[(2, 0), (1, 3)]),
            scope(0x118, &[(2, 7), (1, 3)]),
            scope(0x120, &[(1, 9)]),
            scope(0x128, &[(3, 1), (2, 2), (1, 4)]),
        ];
        let ranges = inlined_ranges(&regions(0x100, 0x140, &scopes));
        assert_eq!(
            ranges,
            vec![
                InlinedRange {
                    start: 0x110,
                    end: 0x120,
                    stack: vec![2, 1]
                },
                InlinedRange {
                    start: 0x128,
                    end: 0x140,
                    stack: vec![3, 2, 1]
                },
            ]
        );
    }

    #[test]
    fn inlined_name_lists_callers_outward() {
        assert_eq!(
            inlined_name(&[b"LA;h(J)J", b"LA;g(J)J", b"LA;f()V"]),
            b"LA;h(J)J <- LA;g(J)J <- LA;f()V".to_vec()
        );
    }
}
