//! A DER reader with the rules of Go's `cryptobyte` package, which
//! crypto/x509 parses certificates with: single-octet tags only, lengths in
//! their shortest form (no indefinite length, at most four length octets),
//! object identifiers of minimal sub-identifiers that fit in 31 bits.
//! Certificate names are read with it so that watchmux refuses exactly the
//! encodings Go refuses; everything else in a certificate is left to
//! rustls and x509-parser.

/// Universal tags of the structures a name is made of (constructed).
pub(super) const SEQUENCE: u8 = 0x30;
pub(super) const SET: u8 = 0x31;
const OBJECT_IDENTIFIER: u8 = 0x06;

/// The unread rest of some DER input.
#[derive(Debug, Clone, Copy)]
pub(super) struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self(bytes)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One element's tag and contents (cryptobyte's `ReadAnyASN1`); `None`,
    /// and nothing consumed, when it is not a DER element cryptobyte reads.
    pub(super) fn read_any(&mut self) -> Option<(u8, &'a [u8])> {
        let [tag, len_byte, rest @ ..] = self.0 else { return None };
        // High-tag-number form (X.690 8.1.2.4): cryptobyte reads only tags below 31.
        if tag & 0x1f == 0x1f {
            return None;
        }
        let (header, len) = if len_byte & 0x80 == 0 {
            (2, usize::from(*len_byte))
        } else {
            let len_len = usize::from(len_byte & 0x7f);
            // 0 is the indefinite length, which DER forbids.
            if len_len == 0 || len_len > 4 || rest.len() < len_len {
                return None;
            }
            let len = rest[..len_len].iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b));
            // DER lengths use the fewest octets: short form below 128, no leading zero octet.
            if len < 128 || len >> ((len_len - 1) * 8) == 0 {
                return None;
            }
            (2 + len_len, usize::try_from(len).ok()?)
        };
        let end = header.checked_add(len)?;
        let contents = self.0.get(header..end)?;
        self.0 = &self.0[end..];
        Some((*tag, contents))
    }

    /// The contents of an element with `tag` (cryptobyte's `ReadASN1`).
    pub(super) fn read(&mut self, tag: u8) -> Option<&'a [u8]> {
        let mut ahead = *self;
        match ahead.read_any()? {
            (t, contents) if t == tag => {
                *self = ahead;
                Some(contents)
            }
            _ => None,
        }
    }

    /// An OBJECT IDENTIFIER's arcs (cryptobyte's `ReadASN1ObjectIdentifier`).
    pub(super) fn read_oid(&mut self) -> Option<Vec<u32>> {
        let mut ahead = *self;
        let mut bytes = ahead.read(OBJECT_IDENTIFIER)?;
        let first = base128(&mut bytes)?;
        // The first sub-identifier packs two arcs: 40 * first + second,
        // the first arc 0, 1 or 2 (only 2 may have a second arc over 39).
        let mut arcs = if first < 80 { vec![first / 40, first % 40] } else { vec![2, first - 80] };
        while !bytes.is_empty() {
            arcs.push(base128(&mut bytes)?);
        }
        *self = ahead;
        Some(arcs)
    }
}

/// One base-128 sub-identifier: at most five octets, no leading 0x80 octet
/// (X.690 8.19.2), a value below 2^31 (Go's int stays 32-bit safe).
fn base128(bytes: &mut &[u8]) -> Option<u32> {
    let mut value: u32 = 0;
    for (i, b) in bytes.iter().enumerate() {
        if i == 5 || value >= 1 << (31 - 7) || (i == 0 && *b == 0x80) {
            return None;
        }
        value = (value << 7) | u32::from(b & 0x7f);
        if b & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(bytes: &[u8]) -> Option<(u8, Vec<u8>)> {
        Der::new(bytes).read_any().map(|(t, c)| (t, c.to_vec()))
    }

    #[test]
    fn short_and_long_lengths_in_their_shortest_form_are_read() {
        assert_eq!(any(&[0x0c, 2, b'h', b'i', 0xff]), Some((0x0c, b"hi".to_vec())));
        let mut long = vec![0x0c, 0x81, 200];
        long.extend(std::iter::repeat_n(b'a', 200));
        assert_eq!(any(&long).unwrap().1.len(), 200);
        let mut two = vec![0x0c, 0x82, 0x01, 0x00];
        two.extend(std::iter::repeat_n(b'a', 256));
        assert_eq!(any(&two).unwrap().1.len(), 256);
    }

    #[test]
    fn encodings_der_forbids_are_refused_as_cryptobyte_refuses_them() {
        // Indefinite length.
        assert_eq!(any(&[0x30, 0x80, 0, 0]), None);
        // Long form for a length under 128.
        assert_eq!(any(&[0x0c, 0x81, 1, b'a']), None);
        // A leading zero length octet.
        let mut padded = vec![0x0c, 0x82, 0x00, 0x80];
        padded.extend([b'a'; 128]);
        assert_eq!(any(&padded), None);
        // More than four length octets.
        assert_eq!(any(&[0x0c, 0x85, 0, 0, 0, 0, 1, b'a']), None);
        // High-tag-number form.
        assert_eq!(any(&[0x1f, 0x20, 0]), None);
        // Truncated contents, truncated header.
        assert_eq!(any(&[0x0c, 3, b'a']), None);
        assert_eq!(any(&[0x0c]), None);
    }

    #[test]
    fn read_wants_the_tag_and_consumes_nothing_otherwise() {
        let mut der = Der::new(&[0x0c, 1, b'a']);
        assert_eq!(der.read(SEQUENCE), None);
        assert_eq!(der.read(0x0c), Some(&b"a"[..]));
        assert!(der.is_empty());
    }

    fn oid(contents: &[u8]) -> Option<Vec<u32>> {
        let mut bytes = vec![OBJECT_IDENTIFIER, u8::try_from(contents.len()).unwrap()];
        bytes.extend_from_slice(contents);
        Der::new(&bytes).read_oid()
    }

    #[test]
    fn object_identifiers_are_read_as_go_reads_them() {
        assert_eq!(oid(&[0x55, 0x04, 0x03]), Some(vec![2, 5, 4, 3]));
        // 1.3.6.1.4.1.57683.2, the API server's UID attribute.
        assert_eq!(oid(&[0x2b, 6, 1, 4, 1, 0x83, 0xc2, 0x53, 2]), Some(vec![1, 3, 6, 1, 4, 1, 57683, 2]));
        // The first octet over 80 is arc 2 with any second arc.
        assert_eq!(oid(&[0x81, 0x00]), Some(vec![2, 48]));
        // Empty, a leading 0x80, a truncated arc, six octets, 2^31.
        assert_eq!(oid(&[]), None);
        assert_eq!(oid(&[0x55, 0x80, 0x01]), None);
        assert_eq!(oid(&[0x55, 0x81]), None);
        assert_eq!(oid(&[0x55, 0x81, 0x81, 0x81, 0x81, 0x81, 0x01]), None);
        assert_eq!(oid(&[0x55, 0x88, 0x80, 0x80, 0x80, 0x00]), None);
        assert_eq!(oid(&[0x55, 0x87, 0xff, 0xff, 0xff, 0x7f]), Some(vec![2, 5, (1 << 31) - 1]));
    }
}
