//! The protobuf wire format as gogo-protobuf's generated `MarshalToSizedBuffer`
//! writes it for the Kubernetes types: varints, field keys and
//! length-delimited bodies.
//!
//! Go writes each message backwards into a buffer sized in advance; the bytes
//! are those of a forward writer that knows every length before it writes it.
//! Here a body is written in place first and its length prefix slid in front
//! of it afterwards, which costs one `copy_within` per nested message and no
//! allocation.

/// Wire type 0: bool, int32, int64.
pub(super) const VARINT: u8 = 0;
/// Wire type 2: strings, bytes, embedded messages, map entries.
pub(super) const LEN: u8 = 2;

/// A varint as `encodeVarintGenerated` writes it. Negative int32 and int64
/// values arrive here sign-extended to 64 bits (`uint64(int32(-1))`), so they
/// take ten bytes, as in Go.
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// How many bytes [`put_varint`] writes for `v`.
pub(super) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// How many bytes [`put_bytes`] writes for a field below 16 with a body of `len` bytes.
pub(super) fn len_field_size(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

pub(super) fn put_key(out: &mut Vec<u8>, field: u32, wire: u8) {
    put_varint(out, (u64::from(field) << 3) | u64::from(wire));
}

/// A length-delimited field whose body is already at hand.
pub(super) fn put_bytes(out: &mut Vec<u8>, field: u32, body: &[u8]) {
    put_key(out, field, LEN);
    put_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// Starts a length-delimited field whose body the caller writes next;
/// [`end_len`] puts the length in front of it.
pub(super) fn begin_len(out: &mut Vec<u8>, field: u32) -> usize {
    put_key(out, field, LEN);
    out.len()
}

/// Ends the field opened by [`begin_len`] at `start`.
pub(super) fn end_len(out: &mut Vec<u8>, start: usize) {
    let body_len = out.len() - start;
    let mut prefix = [0u8; 10];
    let mut n = 0;
    let mut v = body_len as u64;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            prefix[n] = byte;
            n += 1;
            break;
        }
        prefix[n] = byte | 0x80;
        n += 1;
    }
    out.resize(out.len() + n, 0);
    out.copy_within(start..start + body_len, start + n);
    out[start..start + n].copy_from_slice(&prefix[..n]);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Writing a body first and sliding its length in front gives the
        /// bytes of writing the length first, for every length and field.
        #[test]
        fn a_body_written_in_place_is_framed_as_one_written_whole(
            field in 1u32..(1 << 29),
            len in prop_oneof![0usize..300, 16_000usize..17_000],
            prefix in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let body: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut whole = prefix.clone();
            put_bytes(&mut whole, field, &body);
            let mut in_place = prefix;
            let start = begin_len(&mut in_place, field);
            in_place.extend_from_slice(&body);
            end_len(&mut in_place, start);
            prop_assert_eq!(in_place, whole);
        }
    }

    #[test]
    fn varint_len_is_what_put_varint_writes() {
        for v in [0, 1, 127, 128, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(varint_len(v), out.len(), "{v}");
        }
    }

    #[test]
    fn negative_int32_takes_ten_bytes_as_in_go() {
        let mut out = Vec::new();
        put_varint(&mut out, -1i64 as u64);
        assert_eq!(out, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    }

    #[test]
    fn length_is_slid_in_front_of_a_long_body() {
        let mut out = vec![0xaa];
        let start = begin_len(&mut out, 2);
        out.extend(std::iter::repeat_n(7u8, 300));
        end_len(&mut out, start);
        assert_eq!(&out[..4], &[0xaa, 0x12, 0xac, 0x02]);
        assert_eq!(out.len(), 4 + 300);
        assert!(out[4..].iter().all(|&b| b == 7));
    }
}
