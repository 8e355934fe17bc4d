use std::io::Read;

use bytes::{Buf, Bytes};
use http::{HeaderMap, HeaderValue, Response, header};
use http_body_util::BodyExt;

use super::*;
use crate::body::{BoxError, Chunk, ChunkList};

fn asking(values: &[&[u8]]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for v in values {
        headers.append(header::ACCEPT_ENCODING, HeaderValue::from_bytes(v).unwrap());
    }
    headers
}

/// Each case as Go's `ContentEncodingSupported` answers it (read from
/// apiserver v0.37.2's compression.go: comma split, TrimSpace, `== "gzip"`).
#[test]
fn accept_encoding_is_read_as_the_api_server_reads_it() {
    let long_then_gzip = format!("{}gzip", "br, ".repeat(10_000));
    let long_without = "deflate,".repeat(10_000);
    let cases: &[(&[u8], bool)] = &[
        (b"gzip", true),
        (b"gzip, deflate", true),
        (b"deflate, gzip", true),
        (b"br,gzip", true),
        (b" \tgzip\t ", true),
        // U+00A0 and U+0085 are spaces to Go's TrimSpace.
        ("\u{a0}gzip\u{85}".as_bytes(), true),
        (b",,gzip,,", true),
        (long_then_gzip.as_bytes(), true),
        (b"", false),
        (b"GZIP", false),
        (b"Gzip", false),
        (b"gzip;q=0", false),
        (b"gzip;q=1", false),
        (b"gzip ;q=1.0", false),
        (b"x-gzip", false),
        (b"identity", false),
        (b"*", false),
        (b"br", false),
        (b"deflate", false),
        (b"gzip2", false),
        (b"g zip", false),
        (b"gzip\xff", false),
        (long_without.as_bytes(), false),
    ];
    for (value, want) in cases {
        let shown = String::from_utf8_lossy(&value[..value.len().min(40)]).into_owned();
        assert_eq!(accepts_gzip(&asking(&[value])), *want, "Accept-Encoding: {shown:?}");
    }
    assert!(!accepts_gzip(&HeaderMap::new()), "no header: no gzip");
}

#[test]
fn only_the_first_accept_encoding_header_counts() {
    // Go's Header.Get returns the first value only.
    assert!(!accepts_gzip(&asking(&[b"br", b"gzip"])));
    assert!(accepts_gzip(&asking(&[b"gzip", b"br"])));
    assert!(!accepts_gzip(&asking(&[b"", b"gzip"])));
}

fn exactly(n: u64) -> http_body::SizeHint {
    http_body::SizeHint::with_exact(n)
}

fn at_least(n: u64) -> http_body::SizeHint {
    let mut hint = http_body::SizeHint::new();
    hint.set_lower(n);
    hint
}

#[test]
fn complete_bodies_compress_only_over_128_kib() {
    assert!(!compresses(AnswerKind::Complete, &exactly(0)));
    assert!(!compresses(AnswerKind::Complete, &exactly(THRESHOLD)), "exactly 128 KiB stays plain");
    assert!(compresses(AnswerKind::Complete, &exactly(THRESHOLD + 1)));
    assert!(!compresses(AnswerKind::Complete, &at_least(0)), "an unknown length is left alone");
    assert!(!compresses(AnswerKind::Complete, &at_least(THRESHOLD)), "at least 128 KiB may be exactly that");
    assert!(compresses(AnswerKind::Complete, &at_least(THRESHOLD + 1)), "a streamed list known to be longer");
    assert_eq!(THRESHOLD, 131_072);
}

#[test]
fn only_watch_lists_compress_among_watches_whatever_their_size() {
    assert!(compresses(AnswerKind::WatchList, &at_least(0)));
    assert!(compresses(AnswerKind::WatchList, &exactly(0)));
    assert!(!compresses(AnswerKind::Watch, &at_least(0)));
    assert!(!compresses(AnswerKind::Watch, &exactly(10 * THRESHOLD)));
}

/// A body of `len` bytes that compress well, in pieces of 1,000, as a
/// LIST's items are.
fn list_like(len: usize) -> (Vec<u8>, ProxyBody) {
    const ITEM: &[u8] = b"{\"kind\":\"Pod\",\"name\":\"pod-00000\"}\n";
    let whole: Vec<u8> = (0..len).map(|i| ITEM[i % ITEM.len()]).collect();
    let chunks = whole.chunks(1000).map(|c| Chunk::from(Bytes::copy_from_slice(c))).collect();
    (whole, body::boxed_chunks(ChunkList::new(chunks)))
}

fn response(body: ProxyBody) -> Response<ProxyBody> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn gunzip_all(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut out).expect("valid gzip");
    out
}

async fn collect(body: ProxyBody) -> Vec<Bytes> {
    let mut body = std::pin::pin!(body);
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        let mut data = frame.unwrap().into_data().unwrap();
        frames.push(data.copy_to_bytes(data.remaining()));
    }
    frames
}

#[tokio::test]
async fn a_large_answer_gets_the_api_servers_headers_and_decodes_to_the_same_bytes() {
    let (whole, body) = list_like(THRESHOLD as usize + 1);
    let mut resp = response(body);
    resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Origin"));
    let resp = ResponseCompression::default().apply(&asking(&[b"gzip"]), AnswerKind::Complete, resp);
    assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
    let vary: Vec<_> = resp.headers().get_all(header::VARY).iter().collect();
    assert_eq!(vary, ["Origin", "Accept-Encoding"], "Vary is added to, as Go's Header.Add");
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    let frames = collect(resp.into_body()).await;
    let compressed: Vec<u8> = frames.concat();
    assert!(compressed.len() < whole.len() / 10, "{} bytes from {}", compressed.len(), whole.len());
    assert_eq!(gunzip_all(&compressed), whole);
    // One member: a plain single-member decoder reads it all.
    let mut single = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..]).read_to_end(&mut single).unwrap();
    assert_eq!(single, whole);
    assert_eq!(&compressed[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 0xff]);
}

#[tokio::test]
async fn answers_at_the_threshold_without_gzip_asked_or_with_it_off_are_untouched() {
    for (len, asked, enabled) in [(THRESHOLD as usize, true, true), (200_000, false, true), (200_000, true, false)] {
        let (whole, body) = list_like(len);
        let headers = if asked { asking(&[b"gzip"]) } else { asking(&[b"br"]) };
        let resp = ResponseCompression { enabled }.apply(&headers, AnswerKind::Complete, response(body));
        assert!(resp.headers().get(header::CONTENT_ENCODING).is_none(), "{len} {asked} {enabled}");
        assert!(resp.headers().get(header::VARY).is_none());
        assert_eq!(http_body::Body::size_hint(resp.body()).exact(), Some(len as u64), "the body is the same one");
        assert_eq!(collect(resp.into_body()).await.concat(), whole);
    }
}

#[tokio::test]
async fn a_large_body_is_sent_in_bounded_frames() {
    // Random bytes do not compress: the output is as large as the input.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let whole: Vec<u8> = (0..1_000_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let chunks = whole.chunks(64 * 1024).map(|c| Chunk::from(Bytes::copy_from_slice(c))).collect();
    let body = body::boxed_chunks(GzipBody::new(body::boxed_chunks(ChunkList::new(chunks))));
    let frames = collect(body).await;
    assert!(frames.len() > 10, "{} frames", frames.len());
    // A frame holds the emit size, one input chunk (64 KiB here) and what
    // deflate held back (its 64 KiB of pending output) at most.
    let largest = frames.iter().map(Bytes::len).max().unwrap();
    assert!(largest < (32 + 64 + 64 + 1) * 1024, "{largest}");
    assert_eq!(gunzip_all(&frames.concat()), whole);
}

#[tokio::test]
async fn a_watch_list_closes_a_member_whenever_nothing_more_is_ready() {
    let (mut tx, rx) = http_body_util::channel::Channel::<Chunk, BoxError>::new(8);
    let resp = ResponseCompression::default().apply(
        &asking(&[b"gzip"]),
        AnswerKind::WatchList,
        response(body::boxed_chunks(rx)),
    );
    assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
    assert_eq!(resp.headers()[header::VARY], "Accept-Encoding");
    let mut body = std::pin::pin!(resp.into_body());
    let events: [&[u8]; 3] = [b"{\"type\":\"ADDED\"}\n", b"{\"type\":\"MODIFIED\"}\n", b"{\"type\":\"BOOKMARK\"}\n"];
    // Two events ready at once go in one member; the third in its own.
    tx.send_data(Chunk::from(Bytes::from_static(events[0]))).await.unwrap();
    tx.send_data(Chunk::from(Bytes::from_static(events[1]))).await.unwrap();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let mut single = Vec::new();
    flate2::read::GzDecoder::new(first.chunk()).read_to_end(&mut single).unwrap();
    assert_eq!(single, [events[0], events[1]].concat(), "a complete member, readable on its own");
    assert_eq!(readable_before_member_end(first.chunk()), single, "Go's reader gets them before the member's end");
    tx.send_data(Chunk::from(Bytes::from_static(events[2]))).await.unwrap();
    let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
    drop(tx);
    assert!(body.frame().await.is_none(), "the stream ends with its last member");
    let both = [first.chunk(), second.chunk()].concat();
    assert_eq!(gunzip_all(&both), events.concat());
}

/// What a streaming reader can hand out of one member before it reaches the
/// final deflate block: the data up to the last sync-flush marker. Go's
/// `gzip.Reader` returns a member's last bytes only with its end, then
/// blocks reading the next member's header, so a watch's events must all be
/// before that marker.
fn readable_before_member_end(member: &[u8]) -> Vec<u8> {
    const SYNC_MARKER: [u8; 4] = [0, 0, 0xff, 0xff];
    let end = member.windows(4).rposition(|w| w == SYNC_MARKER).expect("a sync flush in the member") + 4;
    let mut inflate = flate2::Decompress::new(false);
    let mut out = Vec::with_capacity(1 << 16);
    inflate.decompress_vec(&member[10..end], &mut out, flate2::FlushDecompress::Sync).unwrap();
    assert_eq!(inflate.total_in() as usize, end - 10, "every byte up to the marker read");
    out
}

#[tokio::test]
async fn a_plain_watch_is_never_compressed() {
    let (_tx, rx) = http_body_util::channel::Channel::<Chunk, BoxError>::new(1);
    let resp =
        ResponseCompression::default().apply(&asking(&[b"gzip"]), AnswerKind::Watch, response(body::boxed_chunks(rx)));
    assert!(resp.headers().get(header::CONTENT_ENCODING).is_none());
    assert!(resp.headers().get(header::VARY).is_none());
}

#[tokio::test]
async fn an_empty_watch_list_sends_nothing() {
    // The API server's per-flush writer writes no member until an event.
    let body = body::boxed_chunks(GzipBody::new(body::empty()));
    assert!(collect(body).await.is_empty());
    let empties = ChunkList::new([Chunk::default(), Chunk::default()].into_iter().collect());
    let body = body::boxed_chunks(GzipBody::new(body::boxed_chunks(empties)));
    assert!(collect(body).await.is_empty(), "empty frames start no member");
}

#[test]
fn an_upstream_answer_is_gzip_by_its_content_encoding() {
    // Inflating it is `upstream::bounded_read::gunzip`'s (tested there).
    let mut headers = HeaderMap::new();
    assert!(!is_gzip(&headers));
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    assert!(is_gzip(&headers));
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("GZIP"));
    assert!(is_gzip(&headers));
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
    assert!(!is_gzip(&headers));
}

proptest::proptest! {
    #[test]
    fn any_chunking_decodes_to_the_same_bytes(
        pieces in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..3000), 0..40),
    ) {
        let whole = pieces.concat();
        let chunks = pieces.into_iter().map(|p| Chunk::parts(Bytes::new(), Bytes::from(p), Bytes::from_static(b""))).collect();
        let body = body::boxed_chunks(GzipBody::new(body::boxed_chunks(ChunkList::new(chunks))));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let compressed = rt.block_on(collect(body)).concat();
        if whole.is_empty() {
            proptest::prop_assert!(compressed.is_empty());
        } else {
            proptest::prop_assert_eq!(gunzip_all(&compressed), whole);
        }
    }
}
