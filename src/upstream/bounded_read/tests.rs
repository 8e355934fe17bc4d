use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Body, Frame, SizeHint};

use super::*;

/// A body that never ends, one 64 KiB frame after another: what an upstream
/// streaming garbage forever would send.
struct Endless;

impl Body for Endless {
    type Data = Bytes;
    type Error = hyper::Error;
    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        static CHUNK: [u8; 64 << 10] = [b'x'; 64 << 10];
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&CHUNK)))))
    }
}

/// A body that says it is `len` bytes long and sends nothing.
struct Claims(u64);

impl Body for Claims {
    type Data = Bytes;
    type Error = hyper::Error;
    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        panic!("a body past the bound by its length is not read")
    }
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0)
    }
}

fn frames(parts: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = hyper::Error> + Unpin {
    let frames: Vec<Result<Frame<Bytes>, hyper::Error>> =
        parts.iter().map(|p| Ok(Frame::data(Bytes::from_static(p)))).collect();
    StreamBody::new(futures_util::stream::iter(frames))
}

fn gzip_member(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, data).unwrap();
    enc.finish().unwrap()
}

#[tokio::test]
async fn a_body_within_the_bound_is_read_whole_however_it_is_framed() {
    let whole = read_whole(frames(&[b"{\"items\"", b":[]", b"}"]), 12).await.unwrap();
    assert_eq!(whole, &b"{\"items\":[]}"[..], "exactly the bound is within it");
    let one = Bytes::from_static(b"{\"kind\":\"Status\"}");
    let read = read_whole(
        Full::new(one.clone()).map_err(|never: std::convert::Infallible| -> hyper::Error { match never {} }),
        1 << 20,
    )
    .await
    .unwrap();
    assert_eq!(read.as_ptr(), one.as_ptr(), "one frame is returned as it came, not copied");
    assert!(read_whole(frames(&[]), 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_body_one_byte_past_the_bound_is_refused() {
    let err = read_whole(frames(&[b"{\"items\"", b":[]", b"}"]), 11).await.unwrap_err();
    assert!(matches!(err, ReadError::TooLarge { limit: 11 }), "{err:?}");
}

#[tokio::test]
async fn an_endless_body_ends_at_the_bound() {
    let err = read_whole(Endless, 1 << 20).await.unwrap_err();
    assert!(matches!(err, ReadError::TooLarge { limit } if limit == 1 << 20), "{err:?}");
}

#[tokio::test]
async fn a_length_past_the_bound_is_refused_before_a_byte_is_read() {
    let err = read_whole(Claims(u64::MAX), LIST_PAGE_BYTES).await.unwrap_err();
    assert!(matches!(err, ReadError::TooLarge { .. }), "{err:?}");
    let err = read_whole(Claims(LIST_PAGE_BYTES as u64 + 1), LIST_PAGE_BYTES).await.unwrap_err();
    assert!(matches!(err, ReadError::TooLarge { .. }), "{err:?}");
}

#[tokio::test]
async fn a_refusal_keeps_only_its_first_bytes() {
    assert_eq!(read_prefix(frames(&[b"abc", b"def", b"ghi"]), 5).await, &b"abcde"[..]);
    assert_eq!(read_prefix(frames(&[b"abc"]), 5).await, &b"abc"[..]);
    assert_eq!(read_prefix(Endless, 100_000).await.len(), 100_000);
}

#[test]
fn every_gzip_member_is_inflated_as_go_reads_them() {
    let two = [gzip_member(b"{\"items\":["), gzip_member(b"]}")].concat();
    assert_eq!(gunzip(&two, 12).unwrap(), &b"{\"items\":[]}"[..]);
    let err = gunzip(&two[..two.len() - 3], 12).unwrap_err();
    assert!(matches!(err, ReadError::Gunzip(_)), "a cut body is an error, not a short list: {err:?}");
    assert!(matches!(gunzip(b"not gzip at all", 12), Err(ReadError::Gunzip(_))));
}

#[test]
fn a_gzip_bomb_stops_at_the_bound() {
    // A MiB of zeros is about 10 KiB compressed at level 1; a hundred
    // members of it would inflate to 100 MiB from a MiB.
    let member = gzip_member(&vec![0u8; 1 << 20]);
    assert!(member.len() < 16 << 10, "{}", member.len());
    let bomb = member.repeat(100);
    let err = gunzip(&bomb, 1 << 20).unwrap_err();
    assert!(matches!(err, ReadError::TooLarge { limit } if limit == 1 << 20), "{err:?}");
    assert_eq!(gunzip(&member, 1 << 20).unwrap().len(), 1 << 20, "exactly the bound is within it");
    let err = gunzip(&member, (1 << 20) - 1).unwrap_err();
    assert!(matches!(err, ReadError::TooLarge { .. }), "{err:?}");
}
