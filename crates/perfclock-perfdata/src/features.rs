//! Feature sections: the `HEADER_*` bits of `perf_file_header.adds_features`, whose sections
//! are listed, in bit order, in the table right after the data section.

use std::fmt;

/// A feature bit (`HEADER_*` in perf's `tools/perf/util/header.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Feature(pub u32);

impl Feature {
    /// `HEADER_HOSTNAME`.
    pub const HOSTNAME: Self = Self(3);
    /// `HEADER_CMDLINE`.
    pub const CMDLINE: Self = Self(11);
    /// `HEADER_AUXTRACE`: an index of absolute offsets into the data section.
    pub const AUXTRACE: Self = Self(18);
    /// `HEADER_SAMPLE_TIME`: the first and the last sample's time (two u64).
    pub const SAMPLE_TIME: Self = Self(21);
    /// `HEADER_CLOCKID`: the clock's resolution (`perf record -k`).
    pub const CLOCKID: Self = Self(23);
    /// `HEADER_DIR_FORMAT`: the data lives in other files (`perf record --threads`).
    pub const DIR_FORMAT: Self = Self(24);
    /// `HEADER_COMPRESSED`: the data holds zstd-compressed records (`perf record -z`).
    pub const COMPRESSED: Self = Self(27);
    /// `HEADER_CLOCK_DATA`: a wall-clock reference for `perf script -F+tod` ([`crate::ClockData`]).
    pub const CLOCK_DATA: Self = Self(29);
    /// One past the highest bit the header can hold (`HEADER_FEAT_BITS`).
    pub const BITS: u32 = 256;
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::HOSTNAME => f.write_str("HEADER_HOSTNAME"),
            Self::CMDLINE => f.write_str("HEADER_CMDLINE"),
            Self::AUXTRACE => f.write_str("HEADER_AUXTRACE"),
            Self::SAMPLE_TIME => f.write_str("HEADER_SAMPLE_TIME"),
            Self::CLOCKID => f.write_str("HEADER_CLOCKID"),
            Self::DIR_FORMAT => f.write_str("HEADER_DIR_FORMAT"),
            Self::COMPRESSED => f.write_str("HEADER_COMPRESSED"),
            Self::CLOCK_DATA => f.write_str("HEADER_CLOCK_DATA"),
            Self(bit) => write!(f, "feature {bit}"),
        }
    }
}

/// The set of feature bits of a header: 256 bits, four little-endian u64 words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeatureSet(pub [u64; 4]);

impl FeatureSet {
    /// Whether `feature` is set; bits past 255 never are.
    pub fn contains(&self, feature: Feature) -> bool {
        self.word_and_bit(feature)
            .is_some_and(|(word, bit)| self.0[word] & bit != 0)
    }

    /// Sets `feature`; bits past 255 are ignored.
    pub fn insert(&mut self, feature: Feature) {
        if let Some((word, bit)) = self.word_and_bit(feature) {
            self.0[word] |= bit;
        }
    }

    /// The set bits in ascending order: the order of their table entries.
    pub fn iter(&self) -> impl Iterator<Item = Feature> + '_ {
        (0..Feature::BITS)
            .map(Feature)
            .filter(|feature| self.contains(*feature))
    }

    /// How many bits are set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|word| word.count_ones() as usize).sum()
    }

    /// Whether no bit is set.
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    /// Where `feature`'s entry is in the feature table: the number of set bits below it.
    pub fn table_index(&self, feature: Feature) -> usize {
        self.iter().take_while(|set| *set < feature).count()
    }

    fn word_and_bit(&self, feature: Feature) -> Option<(usize, u64)> {
        (feature.0 < Feature::BITS).then(|| ((feature.0 / 64) as usize, 1 << (feature.0 % 64)))
    }
}
