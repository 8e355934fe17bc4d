//! Bounded fuzzing (proptest) of this parser of untrusted input: any `Accept-Encoding` value, and comma soups of encodings with
//! odd case, q values and spaces. Whether it asks for gzip is exactly whether a
//! comma-separated piece is `gzip` once Go's spaces are trimmed: appending `,gzip` to
//! anything makes it ask, and a value without that piece never does.
//!
//! Part of the crate's fuzz targets: cases, shared strategies and the long-run
//! switch are in `crate::fuzz`.

use http::{HeaderMap, HeaderValue, header};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use crate::compress::accepts_gzip;
use crate::fuzz::config;

fn asks(value: &[u8]) -> bool {
    let mut headers = HeaderMap::new();
    headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_bytes(value).expect("header bytes"));
    accepts_gzip(&headers)
}

/// Go's reading, written out differently: the pieces between commas, each
/// with its Unicode spaces cut from both ends (invalid UTF-8 is never a space).
fn go_reads_gzip(value: &[u8]) -> bool {
    value.split(|&b| b == b',').any(|piece| {
        let text = String::from_utf8_lossy(piece);
        let spaces = |c: char| c.is_whitespace();
        text.trim_start_matches(spaces).trim_end_matches(spaces) == "gzip"
    })
}

fn soup() -> impl Strategy<Value = String> {
    let token = select(
        &["gzip", "GZIP", "Gzip", "gzip;q=0", "gzip;q=1", "x-gzip", "*", "identity", "br", "deflate", "zstd", ""][..],
    );
    let space = select(&["", " ", "\t", "\u{a0}", "\u{85}", "\u{2003}"][..]);
    vec((space.clone(), token, space), 0..12)
        .prop_map(|parts| parts.into_iter().map(|(a, t, b)| format!("{a}{t}{b}")).collect::<Vec<_>>().join(","))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_value_asks_for_gzip_exactly_as_go_reads_it(
        bytes in vec(prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff], 0..300),
    ) {
        prop_assert_eq!(asks(&bytes), go_reads_gzip(&bytes), "{:?}", String::from_utf8_lossy(&bytes));
        let mut with_gzip = bytes.clone();
        with_gzip.extend_from_slice(b",gzip");
        prop_assert!(asks(&with_gzip));
    }

    #[test]
    fn encoding_soups_ask_for_gzip_exactly_as_go_reads_them(value in soup()) {
        prop_assert_eq!(asks(value.as_bytes()), go_reads_gzip(value.as_bytes()), "{:?}", value);
    }
}
