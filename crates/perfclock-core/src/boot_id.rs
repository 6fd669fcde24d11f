//! The boot id: the kernel's name for one boot of one machine
//! (`/proc/sys/kernel/random/boot_id`, random at every boot).
//!
//! Counter values and the offsets between clocks are only meaningful within the boot they were
//! taken in, so everything perfclock keeps across processes names its boot with one: the shared
//! page's header, the published paravirt offset and each jitdump's `.timeconv` sidecar. One type
//! carries it everywhere, parsed once where it is read, so that two boot ids are compared as
//! values (never as text whose spelling may differ) and printed in the kernel's one spelling.

use core::fmt;

/// One boot's id: the 16 bytes the kernel prints as `8-4-4-4-12` lower-case hex digits, held as
/// two words (the number the first 16 hex digits spell, then the last 16's) because the shared
/// page stores it as two atomic `u64`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BootId {
    words: [u64; 2],
}

impl BootId {
    /// The boot id whose words (as [`BootId::words`] gives them) are `words`.
    pub const fn from_words(words: [u64; 2]) -> BootId {
        BootId { words }
    }

    /// The two words: the first 16 hex digits, then the last 16.
    pub const fn words(self) -> [u64; 2] {
        self.words
    }

    /// A boot id as the kernel prints it (`/proc/sys/kernel/random/boot_id`, surrounding white
    /// space allowed): 32 hex digits, dashes anywhere ignored; `None` otherwise. Readers that
    /// accept only the kernel's exact spelling compare [`BootId`]'s `Display` with the text.
    pub fn parse(text: &str) -> Option<BootId> {
        let mut words = [0u64; 2];
        let mut digits = 0usize;
        for c in text.trim().chars().filter(|c| *c != '-') {
            let digit = u64::from(c.to_digit(16)?);
            let word = words.get_mut(digits / 16)?;
            *word = (*word << 4) | digit;
            digits += 1;
        }
        (digits == 32).then_some(BootId { words })
    }
}

/// The kernel's spelling: `8-4-4-4-12` lower-case hex digits, as in
/// `/proc/sys/kernel/random/boot_id` (without its newline).
impl fmt::Display for BootId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [high, low] = self.words;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0xffff,
            low >> 48,
            low & 0xffff_ffff_ffff
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn boot_ids_parse_as_the_kernel_prints_them() {
        assert_eq!(
            BootId::parse("01234567-89ab-cdef-0123-456789abcdef\n"),
            Some(BootId::from_words([
                0x0123_4567_89ab_cdef,
                0x0123_4567_89ab_cdef
            ]))
        );
        assert_eq!(
            BootId::parse("0123456789abcdef-0123-4567-89ab-cdef01234567"),
            None
        );
        assert_eq!(BootId::parse("01234567-89ab-cdef-0123-456789abcdeg"), None);
        assert_eq!(BootId::parse(""), None);
    }

    #[test]
    fn display_is_the_kernels_spelling_and_parses_back() {
        let id = BootId::from_words([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
        let text = format!("{id}");
        assert_eq!(text, "01234567-89ab-cdef-fedc-ba9876543210");
        assert_eq!(BootId::parse(&text), Some(id));
        assert_eq!(id.words(), [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
        assert_eq!(
            format!("{}", BootId::from_words([0, 1])),
            "00000000-0000-0000-0000-000000000001"
        );
    }
}
