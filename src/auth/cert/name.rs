//! X.509 names read as Go's crypto/x509 reads them (`parseName` and
//! `parseASN1String` in crypto/x509/parser.go), so a subject means to
//! watchmux what it means to kube-apiserver.
//!
//! Go accepts six string types and decodes each its own way; any other
//! type, or a value its type does not allow, fails the whole certificate
//! (and so the TLS handshake: crypto/tls parses every client certificate).
//! The rules, in Go's order:
//!
//! | type | tag | Go reads it as | refuses |
//! |---|---|---|---|
//! | T61String | 20 | Latin-1: each byte one character | nothing |
//! | PrintableString | 19 | ASCII | a byte outside `A-Z a-z 0-9 '()+,-./:=?` space, `*`, `&` |
//! | UTF8String | 12 | UTF-8 | invalid UTF-8 (`utf8.Valid`) |
//! | BMPString | 30 | UCS-2 big-endian, one trailing NUL pair dropped | an odd length, surrogates, U+FFFE, U+FFFF, U+FDD0..U+FDEF |
//! | IA5String | 22 | ASCII | a byte over 0x7f |
//! | NumericString | 18 | ASCII | a byte other than a digit or a space |
//!
//! UniversalString, VisibleString, GeneralString and every other tag are
//! refused ("unsupported string type").

use super::der::{Der, SEQUENCE, SET};

const UTF8_STRING: u8 = 12;
const NUMERIC_STRING: u8 = 18;
const PRINTABLE_STRING: u8 = 19;
const T61_STRING: u8 = 20;
const IA5_STRING: u8 = 22;
const BMP_STRING: u8 = 30;

/// One attribute of a name: its type's arcs and its value, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Attribute {
    pub oid: Vec<u32>,
    pub value: String,
}

/// Why Go would not parse a name; the messages are Go's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NameError {
    #[error("x509: invalid RDNSequence")]
    Sequence,
    #[error("x509: invalid RDNSequence: invalid attribute")]
    Attribute,
    #[error("x509: invalid RDNSequence: invalid attribute type")]
    AttributeType,
    #[error("x509: invalid RDNSequence: invalid attribute value")]
    AttributeValue,
    #[error("x509: invalid RDNSequence: invalid attribute value: {0}")]
    String(#[from] StringError),
}

/// Why Go would not take an attribute's value as a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StringError {
    #[error("invalid PrintableString")]
    Printable,
    #[error("invalid UTF-8 string")]
    Utf8,
    #[error("invalid BMPString")]
    Bmp,
    #[error("invalid IA5String")]
    Ia5,
    #[error("invalid NumericString")]
    Numeric,
    #[error("unsupported string type: {0}")]
    Unsupported(u8),
}

/// The attributes of a DER `Name`, in certificate order (Go's
/// `parseName`): every RDN set, every attribute of each, in the order
/// encoded. Bytes after the `Name`'s own element, and after an attribute's
/// value inside its SEQUENCE, are ignored, as Go ignores them.
pub(super) fn read_name(der: &[u8]) -> Result<Vec<Attribute>, NameError> {
    let mut rdns = Der::new(Der::new(der).read(SEQUENCE).ok_or(NameError::Sequence)?);
    let mut attributes = Vec::new();
    while !rdns.is_empty() {
        let mut set = Der::new(rdns.read(SET).ok_or(NameError::Sequence)?);
        while !set.is_empty() {
            let mut atav = Der::new(set.read(SEQUENCE).ok_or(NameError::Attribute)?);
            let oid = atav.read_oid().ok_or(NameError::AttributeType)?;
            let (tag, value) = atav.read_any().ok_or(NameError::AttributeValue)?;
            attributes.push(Attribute { oid, value: read_string(tag, value)? });
        }
    }
    Ok(attributes)
}

/// An attribute value as Go's `parseASN1String` reads it.
pub(super) fn read_string(tag: u8, value: &[u8]) -> Result<String, StringError> {
    match tag {
        // T.61 is nearly Latin-1; Go (like BoringSSL) reads it as Latin-1.
        T61_STRING => Ok(value.iter().map(|b| char::from(*b)).collect()),
        PRINTABLE_STRING if value.iter().all(|b| is_printable(*b)) => Ok(ascii(value)),
        PRINTABLE_STRING => Err(StringError::Printable),
        UTF8_STRING => std::str::from_utf8(value).map(str::to_owned).map_err(|_| StringError::Utf8),
        BMP_STRING => read_bmp(value),
        IA5_STRING if value.is_ascii() => Ok(ascii(value)),
        IA5_STRING => Err(StringError::Ia5),
        NUMERIC_STRING if value.iter().all(|b| b.is_ascii_digit() || *b == b' ') => Ok(ascii(value)),
        NUMERIC_STRING => Err(StringError::Numeric),
        other => Err(StringError::Unsupported(other)),
    }
}

fn ascii(value: &[u8]) -> String {
    value.iter().map(|b| char::from(*b)).collect()
}

/// Go's PrintableString set, with `*` and `&`, which Go allows because
/// certificates in the wild carry them.
fn is_printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'\''..=b')' | b'+'..=b'/' | b' ' | b':' | b'=' | b'?' | b'*' | b'&')
}

/// UCS-2, big-endian: the UTF-16 code units that are characters on their
/// own. A terminating NUL pair is dropped (once), as BoringSSL does.
fn read_bmp(value: &[u8]) -> Result<String, StringError> {
    if !value.len().is_multiple_of(2) {
        return Err(StringError::Bmp);
    }
    let value = value.strip_suffix(&[0, 0]).unwrap_or(value);
    value
        .chunks_exact(2)
        .map(|pair| {
            let unit = u16::from_be_bytes([pair[0], pair[1]]);
            let noncharacter = matches!(unit, 0xfffe | 0xffff | 0xfdd0..=0xfdef);
            // Surrogates (0xd800..=0xdfff) are no char: from_u32 refuses them.
            char::from_u32(u32::from(unit)).filter(|_| !noncharacter).ok_or(StringError::Bmp)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER element: tag, short or long length, contents.
    pub(crate) fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match contents.len() {
            n @ 0..=127 => out.push(u8::try_from(n).unwrap()),
            n @ 128..=255 => out.extend([0x81, u8::try_from(n).unwrap()]),
            n => out.extend([0x82, u8::try_from(n >> 8).unwrap(), u8::try_from(n & 0xff).unwrap()]),
        }
        out.extend_from_slice(contents);
        out
    }

    const CN: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];
    const O: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x0a];

    /// A name of single-attribute RDNs: (encoded OID, tag, value).
    fn name(attrs: &[(&[u8], u8, &[u8])]) -> Vec<u8> {
        let rdns: Vec<u8> = attrs
            .iter()
            .flat_map(|(oid, tag, value)| tlv(SET, &tlv(SEQUENCE, &[*oid, &tlv(*tag, value)[..]].concat())))
            .collect();
        tlv(SEQUENCE, &rdns)
    }

    fn values(der: &[u8]) -> Result<Vec<String>, NameError> {
        read_name(der).map(|attrs| attrs.into_iter().map(|a| a.value).collect())
    }

    #[test]
    fn t61_strings_are_latin_1() {
        assert_eq!(read_string(T61_STRING, b"alice"), Ok("alice".into()));
        assert_eq!(read_string(T61_STRING, &[b'j', 0xe9, b'r', 0xf4, b'm', b'e']), Ok("j\u{e9}r\u{f4}me".into()));
        // Every byte is a character, even those T.61 lacks.
        assert_eq!(read_string(T61_STRING, &[0x00, 0x80, 0xff]), Ok("\u{0}\u{80}\u{ff}".into()));
    }

    #[test]
    fn printable_strings_allow_go_s_set_with_star_and_ampersand() {
        let all = b"AZaz09 '()+,-./:=?*&";
        assert_eq!(read_string(PRINTABLE_STRING, all), Ok(String::from_utf8(all.to_vec()).unwrap()));
        for bad in [b'_', b'@', b'!', b'"', b';', b'<', 0x00, 0x80, 0xe9] {
            assert_eq!(read_string(PRINTABLE_STRING, &[b'a', bad]), Err(StringError::Printable), "{bad:#x}");
        }
    }

    #[test]
    fn utf8_strings_must_be_valid_utf8() {
        assert_eq!(read_string(UTF8_STRING, "système:nœud".as_bytes()), Ok("système:nœud".into()));
        // Truncated, overlong, an encoded surrogate, past U+10FFFF.
        for bad in [&[0xc3][..], &[0xc0, 0xaf], &[0xed, 0xa0, 0x80], &[0xf4, 0x90, 0x80, 0x80]] {
            assert_eq!(read_string(UTF8_STRING, bad), Err(StringError::Utf8), "{bad:x?}");
        }
    }

    #[test]
    fn bmp_strings_are_ucs2_big_endian_with_a_terminator_dropped() {
        assert_eq!(read_string(BMP_STRING, &[0, b'a', 0x00, 0xe9, 0x4e, 0x2d]), Ok("a\u{e9}\u{4e2d}".into()));
        assert_eq!(read_string(BMP_STRING, &[0, b'a', 0, 0]), Ok("a".into()));
        // Only one terminator is dropped; a NUL elsewhere stays.
        assert_eq!(read_string(BMP_STRING, &[0, b'a', 0, 0, 0, 0]), Ok("a\u{0}".into()));
        assert_eq!(read_string(BMP_STRING, &[0, 0, 0, b'a']), Ok("\u{0}a".into()));
        assert_eq!(read_string(BMP_STRING, &[0, 0]), Ok(String::new()));
        assert_eq!(read_string(BMP_STRING, &[]), Ok(String::new()));
    }

    #[test]
    fn bmp_strings_refuse_odd_lengths_surrogates_and_noncharacters() {
        // The odd length is refused before the terminator is looked at.
        assert_eq!(read_string(BMP_STRING, &[0, b'a', 0]), Err(StringError::Bmp));
        assert_eq!(read_string(BMP_STRING, &[0, b'a', 0, 0, 0]), Err(StringError::Bmp));
        for unit in [0xd800u16, 0xdbff, 0xdc00, 0xdfff, 0xfffe, 0xffff, 0xfdd0, 0xfdef] {
            let [hi, lo] = unit.to_be_bytes();
            assert_eq!(read_string(BMP_STRING, &[0, b'a', hi, lo]), Err(StringError::Bmp), "{unit:#x}");
        }
        // A surrogate pair is UTF-16, not UCS-2: refused too.
        assert_eq!(read_string(BMP_STRING, &[0xd8, 0x3d, 0xde, 0x00]), Err(StringError::Bmp));
        // Next to the refused ranges, accepted.
        assert_eq!(
            read_string(BMP_STRING, &[0xfd, 0xcf, 0xfd, 0xf0, 0xff, 0xfd]),
            Ok("\u{fdcf}\u{fdf0}\u{fffd}".into())
        );
    }

    #[test]
    fn ia5_strings_are_ascii() {
        assert_eq!(read_string(IA5_STRING, b"a@b_c\x00\x7f"), Ok("a@b_c\u{0}\u{7f}".into()));
        assert_eq!(read_string(IA5_STRING, &[b'a', 0x80]), Err(StringError::Ia5));
        assert_eq!(read_string(IA5_STRING, "é".as_bytes()), Err(StringError::Ia5));
    }

    #[test]
    fn numeric_strings_are_digits_and_spaces() {
        assert_eq!(read_string(NUMERIC_STRING, b"0 9"), Ok("0 9".into()));
        assert_eq!(read_string(NUMERIC_STRING, b"1a"), Err(StringError::Numeric));
    }

    #[test]
    fn other_string_types_are_unsupported() {
        // UniversalString, VisibleString, GeneralString, TeletexString's
        // constructed form, OCTET STRING, a context tag.
        for tag in [28u8, 26, 27, 0x34, 0x04, 0x80] {
            assert_eq!(read_string(tag, b"alice"), Err(StringError::Unsupported(tag)), "{tag}");
        }
    }

    #[test]
    fn a_name_lists_every_attribute_in_order() {
        let der = name(&[
            (&CN, UTF8_STRING, b"system:node:n1"),
            (&O, PRINTABLE_STRING, b"system:nodes"),
            (&CN, BMP_STRING, &[0, b'b', 0, b'o', 0, b'b']),
        ]);
        let attrs = read_name(&der).unwrap();
        assert_eq!(
            attrs.iter().map(|a| a.oid.clone()).collect::<Vec<_>>(),
            [vec![2, 5, 4, 3], vec![2, 5, 4, 10], vec![2, 5, 4, 3]]
        );
        assert_eq!(values(&der), Ok(vec!["system:node:n1".into(), "system:nodes".into(), "bob".into()]));
        // A multi-valued RDN: both attributes, in encoded order.
        let set = tlv(
            SET,
            &[
                tlv(SEQUENCE, &[&CN[..], &tlv(T61_STRING, b"x")].concat()),
                tlv(SEQUENCE, &[&O[..], &tlv(IA5_STRING, b"y")].concat()),
            ]
            .concat(),
        );
        assert_eq!(values(&tlv(SEQUENCE, &set)), Ok(vec!["x".into(), "y".into()]));
        // An empty name, an empty RDN set.
        assert_eq!(values(&tlv(SEQUENCE, &[])), Ok(vec![]));
        assert_eq!(values(&tlv(SEQUENCE, &tlv(SET, &[]))), Ok(vec![]));
    }

    #[test]
    fn one_bad_attribute_fails_the_whole_name() {
        let universal: Vec<u8> = "alice".chars().flat_map(|c| u32::from(c).to_be_bytes()).collect();
        let der = name(&[(&CN, UTF8_STRING, b"alice"), (&O, 28, &universal)]);
        assert_eq!(read_name(&der), Err(NameError::String(StringError::Unsupported(28))));
        let der = name(&[(&CN, PRINTABLE_STRING, b"alice_"), (&CN, UTF8_STRING, b"bob")]);
        assert_eq!(read_name(&der), Err(NameError::String(StringError::Printable)));
    }

    #[test]
    fn malformed_structure_is_refused_with_go_s_reason() {
        assert_eq!(read_name(&tlv(SET, &[])), Err(NameError::Sequence));
        // An RDN that is a SEQUENCE, not a SET.
        assert_eq!(read_name(&tlv(SEQUENCE, &tlv(SEQUENCE, &[]))), Err(NameError::Sequence));
        // An attribute that is a SET.
        assert_eq!(read_name(&tlv(SEQUENCE, &tlv(SET, &tlv(SET, &[])))), Err(NameError::Attribute));
        // No type, or a type that is no OID.
        let atav = |contents: &[u8]| tlv(SEQUENCE, &tlv(SET, &tlv(SEQUENCE, contents)));
        assert_eq!(read_name(&atav(&[])), Err(NameError::AttributeType));
        assert_eq!(read_name(&atav(&tlv(UTF8_STRING, b"a"))), Err(NameError::AttributeType));
        // A type and no value, or a value with an indefinite length.
        assert_eq!(read_name(&atav(&CN)), Err(NameError::AttributeValue));
        assert_eq!(
            read_name(&atav(&[&CN[..], &[UTF8_STRING, 0x80, b'a', 0, 0]].concat())),
            Err(NameError::AttributeValue)
        );
    }

    #[test]
    fn trailing_bytes_go_ignores_are_ignored() {
        // After the value inside an attribute's SEQUENCE (Go reads two
        // elements and never checks for a third), and after the name.
        let atav = tlv(SEQUENCE, &[&CN[..], &tlv(UTF8_STRING, b"a"), &tlv(UTF8_STRING, b"b")].concat());
        let mut der = tlv(SEQUENCE, &tlv(SET, &atav));
        assert_eq!(values(&der), Ok(vec!["a".into()]));
        der.extend([0x05, 0x00]);
        assert_eq!(values(&der), Ok(vec!["a".into()]));
    }

    /// A value of one of Go's string types, and the string Go reads from it.
    fn any_value() -> impl Strategy<Value = (u8, Vec<u8>, String)> {
        let printable = proptest::sample::select(b"AZaz09 '()+,-./:=?*&".to_vec());
        prop_oneof![
            any::<String>().prop_map(|s| (UTF8_STRING, s.clone().into_bytes(), s)),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| (
                T61_STRING,
                b.clone(),
                b.iter().map(|c| char::from(*c)).collect()
            )),
            // Characters of the BMP that are not noncharacters.
            proptest::collection::vec(any::<char>(), 0..20).prop_map(|cs| {
                let s: String = cs
                    .into_iter()
                    .filter(|c| u32::from(*c) <= 0xffff && !matches!(u32::from(*c), 0xfffe | 0xffff | 0xfdd0..=0xfdef))
                    .collect();
                (BMP_STRING, s.encode_utf16().flat_map(u16::to_be_bytes).collect(), s)
            }),
            proptest::collection::vec(printable, 0..40).prop_map(|b| (
                PRINTABLE_STRING,
                b.clone(),
                String::from_utf8(b).unwrap()
            )),
            proptest::collection::vec(0u8..0x80, 0..40).prop_map(|b| (
                IA5_STRING,
                b.clone(),
                String::from_utf8(b).unwrap()
            )),
        ]
    }

    use proptest::prelude::*;

    proptest! {
        /// Any bytes are read or refused, never a panic.
        #[test]
        fn any_bytes_are_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = read_name(&bytes);
            let _ = read_string(bytes.first().copied().unwrap_or(0), &bytes);
        }

        /// A name of valid values reads back as the values, in order.
        /// (A BMPString ending in U+0000 loses it: Go's terminator rule.)
        #[test]
        fn valid_values_read_back_in_order(encoded in proptest::collection::vec(any_value(), 0..6)) {
            let attrs: Vec<(&[u8], u8, &[u8])> = encoded.iter().map(|(tag, raw, _)| (&CN[..], *tag, &raw[..])).collect();
            let expected: Vec<String> = encoded
                .iter()
                .map(|(tag, _, s)| match (*tag, s.strip_suffix('\u{0}')) {
                    (BMP_STRING, Some(cut)) => cut.to_owned(),
                    _ => s.clone(),
                })
                .collect();
            prop_assert_eq!(values(&name(&attrs)), Ok(expected));
        }
    }
}
