//! The kernel records a bracket can be built on, and sets of them.

use core::fmt;

/// Which kernel record a bracket is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    /// `PERF_RECORD_COMM` from `prctl(PR_SET_NAME)`.
    Comm,
    /// `PERF_RECORD_SAMPLE` of a `PERF_COUNT_SW_PAGE_FAULTS` event (period 1).
    PageFault,
    /// `PERF_RECORD_MMAP2` of an anonymous `PROT_EXEC` mapping.
    Mmap2,
}

impl RecordKind {
    /// All kinds.
    pub const ALL: [RecordKind; 3] = [RecordKind::Comm, RecordKind::PageFault, RecordKind::Mmap2];

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Comm => "comm",
            RecordKind::PageFault => "page-fault",
            RecordKind::Mmap2 => "mmap2",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            RecordKind::Comm => 0,
            RecordKind::PageFault => 1,
            RecordKind::Mmap2 => 2,
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`RecordKind`]s (which kinds calibrate, which failed). Small and `Copy`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct KindSet(u8);

impl fmt::Debug for KindSet {
    /// The kinds, not the bits: `{Comm, Mmap2}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl KindSet {
    /// No kind.
    pub const EMPTY: KindSet = KindSet(0);

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: RecordKind) -> bool {
        self.0 & (1 << kind.index()) != 0
    }

    /// The set with `kind` added.
    #[must_use]
    pub fn with(self, kind: RecordKind) -> KindSet {
        KindSet(self.0 | 1 << kind.index())
    }

    /// Whether the set holds no kind.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The kinds in the set, in [`RecordKind::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = RecordKind> {
        RecordKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }

    /// The set as bits (bit `i` for `RecordKind::ALL[i]`), for an atomic cell.
    pub(crate) fn bits(self) -> u8 {
        self.0
    }

    /// The set whose [`KindSet::bits`] are `bits`.
    pub(crate) fn from_bits(bits: u8) -> KindSet {
        KindSet(bits & ((1 << RecordKind::ALL.len()) - 1))
    }
}

impl FromIterator<RecordKind> for KindSet {
    fn from_iter<I: IntoIterator<Item = RecordKind>>(kinds: I) -> Self {
        kinds.into_iter().fold(KindSet::EMPTY, KindSet::with)
    }
}

impl fmt::Display for KindSet {
    /// The kinds' names separated by ", ", or "none".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, kind) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(kind.name())?;
        }
        Ok(())
    }
}
