//! How an object's bytes are kept in a store that is not encrypted: deflated
//! behind a tag byte, so that the file stays near the objects' own size.
//!
//! Why: redb keeps each leaf of its B-tree in a page of a power-of-two size
//! (4 KiB and up) and splits a leaf that outgrows its page in two halves.
//! Objects of about a page (a pod's JSON is 2 to 8 KiB) then sit one or two
//! to a page that is often twice what they need: 10,000 pods of 3,970 bytes
//! took 1.71 times their bytes, and compaction gives nothing back (the space
//! is inside pages, not free pages). Deflated, a pod is about a quarter of
//! its size, several share a page, and the file is well under the objects'
//! bytes (docs/node-local.md has the figures).
//!
//! The stored value is `0x00` then a raw deflate stream (flate2, already in
//! the tree for gzip responses); the bytes it inflates to are exactly the
//! cache's, so a load decodes them as before and never re-encodes. A value
//! that starts with `{` is JSON stored as is, as stores of the first format
//! hold every object: they load unchanged, and are rewritten deflated as
//! their objects change.
//!
//! Encrypted stores (`seal.rs`) are not deflated: an object's compressed
//! size depends on what it holds, and so sealing a compressed Secret would
//! let whoever can change part of it and read the file's size learn the rest
//! (a compression oracle). They keep the bytes as they are.

use std::io::{Read as _, Write as _};

use bytes::Bytes;
use flate2::Compression;

/// The first byte of a deflated value (JSON starts with `{`).
const DEFLATED: u8 = 0x00;

/// Bytes no stored object inflates past: the API server refuses objects of
/// more than a few MiB, so more is a damaged or forged store, not an object.
const MAX_INFLATED: u64 = 64 << 20;

/// `json` as stored: the tag and its deflate stream.
pub(crate) fn pack(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() / 3 + 16);
    out.push(DEFLATED);
    // The fastest level: the writer thread deflates a whole relist at once,
    // and the next level up saves a few percent more for twice the time.
    let mut encoder = flate2::write::DeflateEncoder::new(out, Compression::fast());
    encoder.write_all(json).expect("writing to a Vec");
    Bytes::from(encoder.finish().expect("writing to a Vec"))
}

/// The object's bytes from what a store holds.
pub(crate) fn unpack(stored: Bytes) -> Result<Bytes, String> {
    match stored.first() {
        Some(b'{') => Ok(stored),
        Some(&DEFLATED) => {
            let mut json = Vec::with_capacity(stored.len() * 4);
            let mut inflater = flate2::read::DeflateDecoder::new(&stored[1..]).take(MAX_INFLATED + 1);
            inflater.read_to_end(&mut json).map_err(|e| format!("does not inflate: {e}"))?;
            if json.len() as u64 > MAX_INFLATED {
                return Err(format!("inflates past {MAX_INFLATED} bytes"));
            }
            Ok(Bytes::from(json))
        }
        Some(other) => Err(format!("starts with the unknown tag {other:#04x}")),
        None => Err("is empty".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_json_unpacks_to_the_same_bytes_and_is_smaller() {
        let json = br#"{"kind":"Pod","metadata":{"name":"p","labels":{"app":"web","tier":"front"}},"spec":{"containers":[{"name":"c","image":"registry.example/app:1.2.3","env":[{"name":"A","value":"aaaaaaaaaaaaaaaa"},{"name":"B","value":"aaaaaaaaaaaaaaaa"}]}]}}"#;
        let packed = pack(json);
        assert_eq!(packed[0], DEFLATED);
        assert!(packed.len() < json.len(), "{} >= {}", packed.len(), json.len());
        assert_eq!(&unpack(packed).unwrap()[..], &json[..]);
    }

    #[test]
    fn json_stored_as_is_loads_as_is() {
        let json = Bytes::from_static(br#"{"kind":"ConfigMap"}"#);
        assert_eq!(unpack(json.clone()).unwrap(), json);
    }

    #[test]
    fn a_damaged_value_is_an_error_never_other_bytes() {
        assert!(unpack(Bytes::new()).is_err());
        assert!(unpack(Bytes::from_static(b"\x07abc")).unwrap_err().contains("unknown tag"));
        let mut truncated = pack(b"{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}}").to_vec();
        truncated.truncate(truncated.len() - 3);
        assert!(unpack(Bytes::from(truncated)).is_err());
    }

    #[test]
    fn a_value_that_inflates_past_the_bound_is_refused() {
        let mut bomb = vec![b' '; (MAX_INFLATED + 10) as usize];
        bomb[0] = b'{';
        let packed = pack(&bomb);
        assert!(packed.len() < 1 << 20, "deflates to {} bytes", packed.len());
        assert!(unpack(packed).unwrap_err().contains("inflates past"));
    }
}
