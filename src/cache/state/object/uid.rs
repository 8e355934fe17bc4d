//! An object's `metadata.uid`, held in 16 bytes when it is a UUID.
//!
//! The API server gives every object a UUID, 36 characters of text: in an
//! allocation of its own that was 48 bytes a cached object beside the
//! pointer to it. A UUID in its canonical form (`8-4-4-4-12` hex digits,
//! lowercase as the API server writes them, or all uppercase) is kept as
//! its 16 bytes and written back as the same text; anything else (mixed
//! case, another shape, an empty uid) is kept as it came.

use std::fmt;

/// Where the hyphens of a canonical UUID are.
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

/// `metadata.uid`, exactly as the object carried it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum Uid {
    /// A canonical UUID with lowercase hex digits (or no letters at all).
    Lower([u8; 16]),
    /// A canonical UUID with uppercase hex digits.
    Upper([u8; 16]),
    /// Any other text.
    Text(Box<str>),
}

impl Default for Uid {
    fn default() -> Self {
        Uid::Text(Box::default())
    }
}

impl Uid {
    pub(crate) fn new(text: &str) -> Self {
        Self::uuid(text).unwrap_or_else(|| Uid::Text(text.into()))
    }

    /// The 16 bytes of a canonical UUID in one case.
    fn uuid(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        if bytes.len() != 36 || HYPHENS.iter().any(|&at| bytes[at] != b'-') {
            return None;
        }
        let (mut lower, mut upper) = (false, false);
        let mut digits = bytes.iter().enumerate().filter(|(at, _)| !HYPHENS.contains(at)).map(|(_, &b)| {
            lower |= b.is_ascii_lowercase();
            upper |= b.is_ascii_uppercase();
            char::from(b).to_digit(16).map(|d| d as u8)
        });
        let mut uuid = [0u8; 16];
        for byte in &mut uuid {
            *byte = (digits.next()?? << 4) | digits.next()??;
        }
        drop(digits);
        match (lower, upper) {
            (_, false) => Some(Uid::Lower(uuid)),
            (false, true) => Some(Uid::Upper(uuid)),
            (true, true) => None,
        }
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (uuid, digits) = match self {
            Uid::Text(text) => return f.write_str(text),
            Uid::Lower(uuid) => (uuid, b"0123456789abcdef"),
            Uid::Upper(uuid) => (uuid, b"0123456789ABCDEF"),
        };
        let mut text = [0u8; 36];
        let mut at = 0;
        for byte in uuid {
            for nibble in [byte >> 4, byte & 0xf] {
                if HYPHENS.contains(&at) {
                    text[at] = b'-';
                    at += 1;
                }
                text[at] = digits[usize::from(nibble)];
                at += 1;
            }
        }
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn canonical_uuids_are_held_inline_in_their_case() {
        for (text, inline) in [
            ("00000000-0000-4000-8000-000000000001", true),
            ("0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3", true),
            ("0A1B2C3D-4E5F-4A6B-8C7D-8E9FA0B1C2D3", true),
            ("0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2D3", false),
            ("0a1b2c3d4e5f-4a6b-8c7d-8e9fa0b1c2d3-", false),
            ("0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2g3", false),
            ("0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d", false),
            ("+a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3", false),
            ("u-1", false),
            ("", false),
        ] {
            let uid = Uid::new(text);
            assert_eq!(!matches!(uid, Uid::Text(_)), inline, "{text}");
            assert_eq!(uid.to_string(), text);
        }
        assert_ne!(Uid::new("0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3"), Uid::new("0A1B2C3D-4E5F-4A6B-8C7D-8E9FA0B1C2D3"));
        assert_eq!(Uid::default().to_string(), "");
    }

    proptest! {
        #[test]
        fn any_text_is_written_back_as_it_came(
            text in "[0-9a-fA-F-]{36}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}|.{0,40}",
            other in "[0-9a-fA-F-]{36}|.{0,40}",
        ) {
            let uid = Uid::new(&text);
            prop_assert_eq!(uid.to_string(), text.clone());
            // Two uids are equal exactly when their texts are.
            prop_assert_eq!(uid == Uid::new(&other), text == other);
        }
    }
}
