//! A short list of strings in one allocation, for what every cached object
//! keeps: its selectable field values and its labels.
//!
//! A million cached pods held each of their eleven field values and each
//! label key and value in an allocation of its own, with two words of
//! pointer and length beside it: about 600 bytes a pod, more than half of
//! what the cache spent beyond the objects' JSON (issue 47). Packed, a pod's
//! fields are one allocation of about 90 bytes.
//!
//! The layout is one `str` (no unsafe code: slicing it checks the bounds
//! and the character boundaries): a header of numbers written in a fixed
//! width of `w` bytes, 7 bits each, so every header byte is ASCII, then the
//! strings one after another.
//!
//! ```text
//! [w] [count: w bytes] [end of string 0: w bytes] ... [end of string count-1] [text]
//! ```
//!
//! An end is the string's end within the text, so string `i` runs from the
//! end of `i - 1` (0 for the first) to its own. The empty list is the empty
//! `str`, which allocates nothing. `w` is the fewest bytes that hold both
//! the count and the text's length: one byte up to 127 bytes of text, which
//! covers most objects' fields and labels.

use std::fmt;

/// Bits of a number each header byte holds: the byte stays below 0x80.
const BITS: u32 = 7;

/// Strings in one allocation, read by index.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct PackedStrs(Box<str>);

impl PackedStrs {
    /// `strings`, in their order (read twice: their lengths, then their text).
    pub(crate) fn new<S: AsRef<str>>(strings: impl IntoIterator<Item = S, IntoIter: Clone>) -> Self {
        let strings = strings.into_iter();
        let (count, text) = strings.clone().fold((0, 0), |(count, text), s| (count + 1, text + s.as_ref().len()));
        if count == 0 {
            return Self::default();
        }
        let largest = text.max(count);
        let width = (1..).find(|w| largest >> (BITS * w) == 0).expect("a width") as usize;
        let mut packed = String::with_capacity(1 + width * (1 + count) + text);
        packed.push(char::from(width as u8));
        push_number(&mut packed, count, width);
        let mut end = 0;
        for s in strings.clone() {
            end += s.as_ref().len();
            push_number(&mut packed, end, width);
        }
        for s in strings {
            packed.push_str(s.as_ref());
        }
        Self(packed.into_boxed_str())
    }

    /// How many strings there are.
    pub(crate) fn len(&self) -> usize {
        if self.0.is_empty() { 0 } else { self.number(1) }
    }

    /// String `i`; `None` past the last.
    pub(crate) fn get(&self, i: usize) -> Option<&str> {
        let count = self.len();
        if i >= count {
            return None;
        }
        let width = self.width();
        let text = 1 + width * (1 + count);
        let start = if i == 0 { 0 } else { self.number(1 + width * i) };
        let end = self.number(1 + width * (i + 1));
        self.0.get(text + start..text + end)
    }

    /// Every string, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    fn width(&self) -> usize {
        usize::from(self.0.as_bytes()[0])
    }

    /// The number written at byte `at` of the header.
    fn number(&self, at: usize) -> usize {
        let bytes = &self.0.as_bytes()[at..at + self.width()];
        bytes.iter().fold(0, |n, &b| (n << BITS) | usize::from(b))
    }
}

/// `n` in `width` bytes of 7 bits, most significant first.
fn push_number(packed: &mut String, n: usize, width: usize) {
    for i in (0..width).rev() {
        let digit = (n >> (BITS as usize * i)) & 0x7f;
        packed.push(char::from(digit as u8));
    }
}

impl fmt::Debug for PackedStrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_empty_list_allocates_nothing_and_has_no_strings() {
        let empty = PackedStrs::new::<&str>([]);
        assert_eq!(empty, PackedStrs::default());
        assert_eq!(empty.0.len(), 0);
        assert_eq!((empty.len(), empty.get(0)), (0, None));
    }

    #[test]
    fn one_header_byte_a_number_while_the_text_is_short() {
        let packed = PackedStrs::new(["ab", "", "c"]);
        assert_eq!(&*packed.0, "\u{1}\u{3}\u{2}\u{2}\u{3}abc");
        assert_eq!(packed.iter().collect::<Vec<_>>(), ["ab", "", "c"]);
        assert_eq!(packed.get(3), None);
    }

    #[test]
    fn longer_text_takes_wider_numbers() {
        for len in [127, 128, 16_383, 16_384, 70_000] {
            let long = "é".repeat(len / 2) + &"x".repeat(len % 2);
            let packed = PackedStrs::new(["", long.as_str(), "z"]);
            assert_eq!(packed.iter().collect::<Vec<_>>(), ["", long.as_str(), "z"], "{len}");
            assert!(packed.0.bytes().take(1 + packed.width() * 4).all(|b| b < 0x80), "{len}: an ASCII header");
        }
    }

    proptest! {
        #[test]
        fn every_list_reads_back_as_it_was_given(strings in proptest::collection::vec(".{0,40}", 0..20)) {
            let packed = PackedStrs::new(&strings);
            prop_assert_eq!(packed.len(), strings.len());
            prop_assert_eq!(packed.iter().collect::<Vec<_>>(), strings.iter().map(String::as_str).collect::<Vec<_>>());
            prop_assert_eq!(packed.get(strings.len()), None);
            prop_assert_eq!(packed.clone(), packed);
        }
    }
}
