//! Gzip for the answers watchmux writes itself, decided as kube-apiserver
//! v1.37.2 decides it, so that a client cannot tell from the headers whether
//! the cache or the API server answered.
//!
//! kube-apiserver (`endpoints/handlers/responsewriters`, `handlers/watch.go`):
//!
//! - **Who asked**: the first `Accept-Encoding` header, split at commas, one
//!   token equal to `gzip` once trimmed. Nothing else counts: not `GZIP`,
//!   not `gzip;q=1` (nor `gzip;q=0`), not `*`, not `x-gzip`
//!   ([`accepts_gzip`]).
//! - **A GET or LIST answer** (errors too) is compressed when its body is
//!   over 128 KiB ([`THRESHOLD`]); its streaming encoders buffer the first
//!   bytes, so the decision is the whole body's length.
//! - **A watch** is compressed only when it is a watch-list
//!   (`sendInitialEvents=true&allowWatchBookmarks=true`, the
//!   `WatchListCompression` gate, beta and on in v1.37), whatever its size,
//!   as a series of gzip members, each closed when the server has nothing
//!   more to send at that moment; the compressor goes back to a pool between
//!   members, so an idle watch holds no compressor state.
//! - **Headers**: `Content-Encoding: gzip` and `Vary: Accept-Encoding`,
//!   added only when the body is compressed. Level 1 (least CPU).
//!
//! Encode-once stays as it is: the shared encoded bytes of every object are
//! read, never copied, by the compressor of each response that compresses
//! ([`GzipBody`]). Requests that pass through are not touched: the client's
//! `Accept-Encoding` goes upstream and the upstream's encoding comes back.

mod gzip;

use http::{HeaderMap, HeaderValue, Response, header};

pub(crate) use gzip::GzipBody;

use crate::body::{self, ProxyBody};

/// kube-apiserver's `defaultGzipThresholdBytes`: bodies longer than this
/// are compressed, bodies of exactly this length are not.
pub(crate) const THRESHOLD: u64 = 128 * 1024;

/// What kind of answer a response is, as far as compression goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerKind {
    /// A complete body: a GET, a LIST, an error.
    Complete,
    /// A watch asking for initial events and bookmarks (a watch-list).
    WatchList,
    /// Any other watch: never compressed.
    Watch,
}

/// Whether (and how) the answers watchmux writes itself are compressed
/// (`--compress-responses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResponseCompression {
    /// On: as the API server does (its `APIResponseCompression` and
    /// `WatchListCompression` gates are on by default). Off: never.
    pub(crate) enabled: bool,
}

impl Default for ResponseCompression {
    fn default() -> Self {
        Self { enabled: true }
    }
}

impl ResponseCompression {
    /// `response` as it goes to a client that sent `request_headers`:
    /// compressed, with the API server's headers, when the API server would
    /// compress it; otherwise unchanged.
    pub(crate) fn apply(
        self,
        request_headers: &HeaderMap,
        kind: AnswerKind,
        response: Response<ProxyBody>,
    ) -> Response<ProxyBody> {
        let length = http_body::Body::size_hint(response.body());
        if !self.enabled || !accepts_gzip(request_headers) || !compresses(kind, &length) {
            return response;
        }
        let (mut parts, inner) = response.into_parts();
        parts.headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        parts.headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        parts.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(parts, body::boxed_chunks(GzipBody::new(inner)))
    }
}

/// The API server's decision for an answer of this kind and (for a complete
/// body) this length, once the client has asked for gzip.
pub(crate) fn compresses(kind: AnswerKind, length: &http_body::SizeHint) -> bool {
    match kind {
        // A complete body knows its length, or (a LIST streamed from the
        // cache) that it is longer than some bound; one that knew neither
        // would be left alone rather than guessed at.
        AnswerKind::Complete => length.exact().unwrap_or(length.lower()) > THRESHOLD,
        AnswerKind::WatchList => true,
        AnswerKind::Watch => false,
    }
}

/// Whether a response says its body is gzip (an upstream answer to a LIST
/// that asked for it).
pub(crate) fn is_gzip(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_ENCODING).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"))
}

/// Whether the request asks for gzip, read as Go's
/// `responsewriters.ContentEncodingSupported` reads it: only the first
/// `Accept-Encoding` header (`Header.Get`), split at every comma, a token
/// that is exactly `gzip` after `strings.TrimSpace`. No quality values, no
/// case folding, no wildcard.
pub(crate) fn accepts_gzip(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::ACCEPT_ENCODING) else {
        return false;
    };
    value.as_bytes().split(|&b| b == b',').any(|token| {
        // A token with bytes that are not UTF-8 keeps them after trimming
        // (Go's TrimSpace stops at an invalid rune), so it is never `gzip`.
        std::str::from_utf8(token).is_ok_and(|t| trim_go_space(t) == "gzip")
    })
}

/// Go's `strings.TrimSpace`: Unicode White_Space at both ends, which is
/// Rust's `char::is_whitespace` (both include U+0085 and U+00A0).
fn trim_go_space(s: &str) -> &str {
    s.trim_matches(char::is_whitespace)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
