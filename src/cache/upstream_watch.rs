//! The upstream's watch and list responses, read in one place: the URL of
//! a cache's collection, the GET that fetches it, the splitter that cuts a
//! watch body into lines, and one typed parse of a line (an event, a
//! bookmark, an ERROR) decoded into the [`Change`] the cache's writer
//! applies. The reflector's
//! long watch and the freshness proof's short catch-up watch both read
//! through here, so a bookmark is known by its parsed type, never by
//! searching the bytes (an object's data may hold `"type":"BOOKMARK"`).

use bytes::{Bytes, BytesMut};
use http::{Request, StatusCode, header};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::object::CachedObject;
use super::resource::{Change, ResourceCache};
use crate::body;
use crate::encode::watch::EventType;
use crate::upstream::Upstream;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReflectorError {
    #[error("upstream request failed")]
    Request(#[source] crate::upstream::SendError),
    #[error("upstream answered {status}: {body}")]
    Status { status: StatusCode, body: String },
    #[error("reading the upstream response")]
    Body(#[source] hyper::Error),
    #[error("decoding the upstream list")]
    Decode(#[source] serde_json::Error),
    #[error("the upstream list's resourceVersion {0:?} is not a number")]
    ListVersion(String),
}

#[derive(Deserialize)]
struct WatchLine<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize)]
struct StatusOrMeta {
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    metadata: Option<RvOnly>,
}

#[derive(Deserialize)]
struct RvOnly {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
}

/// One line of an upstream watch, parsed.
#[derive(Debug)]
pub(crate) enum Line {
    /// A blank line (between events, harmless).
    Blank,
    /// ADDED, MODIFIED or DELETED, with the object's raw JSON.
    Event(EventType, Bytes),
    /// Nothing changed up to this version.
    Bookmark(u64),
}

/// Why a watch line ends the watch.
#[derive(Debug)]
pub(crate) enum LineEnd {
    /// An ERROR event with 410: the upstream no longer has our version.
    Expired,
    Failed(String),
}

/// Parses one watch line (without its newline).
pub(crate) fn parse_line(line: &Bytes) -> Result<Line, LineEnd> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(Line::Blank);
    }
    let event: WatchLine = serde_json::from_slice(line).map_err(|e| LineEnd::Failed(e.to_string()))?;
    let raw = line.slice_ref(event.object.get().as_bytes());
    let kind = match event.kind {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => {
            let meta: StatusOrMeta = serde_json::from_slice(&raw).map_err(|e| LineEnd::Failed(e.to_string()))?;
            let rv = meta
                .metadata
                .and_then(|m| m.resource_version)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| LineEnd::Failed("bookmark without resourceVersion".into()))?;
            return Ok(Line::Bookmark(rv));
        }
        "ERROR" => {
            let status: StatusOrMeta =
                serde_json::from_slice(&raw).unwrap_or(StatusOrMeta { code: None, metadata: None });
            return Err(if status.code == Some(410) {
                LineEnd::Expired
            } else {
                LineEnd::Failed(format!("ERROR event: {}", String::from_utf8_lossy(&raw)))
            });
        }
        other => return Err(LineEnd::Failed(format!("unknown event type {other:?}"))),
    };
    Ok(Line::Event(kind, raw))
}

/// Decodes a parsed line for `cache` into the change its writer applies;
/// `None` for a blank line.
pub(crate) fn decode_line(cache: &ResourceCache, line: Line) -> Result<Option<Change>, LineEnd> {
    match line {
        Line::Blank => Ok(None),
        Line::Bookmark(rv) => Ok(Some(Change::Bookmark(rv))),
        Line::Event(kind, raw) => {
            // The start of the event's fan-out time: decoding is watchmux's work too.
            let arrived = std::time::Instant::now();
            let obj = CachedObject::decode(raw, &cache.shape).map_err(|e| LineEnd::Failed(e.to_string()))?;
            Ok(Some(Change::Event(kind, obj, arrived)))
        }
    }
}

/// One watch line read as the writer reads it: [`parse_line`] then
/// [`decode_line`].
pub(crate) fn read_line(cache: &ResourceCache, line: &Bytes) -> Result<Option<Change>, LineEnd> {
    decode_line(cache, parse_line(line)?)
}

/// Cuts a watch body into lines as its frames arrive (a line may span
/// frames, a frame may hold many lines).
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    buf: BytesMut,
}

impl LineSplitter {
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete line, without its newline.
    pub(crate) fn next_line(&mut self) -> Option<Bytes> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line = self.buf.split_to(end + 1).freeze();
        Some(line.slice(..end))
    }
}

/// The cache's collection URL with `params` and the cache's scope selectors.
pub(crate) fn collection_uri(cache: &ResourceCache, params: &[(&str, String)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        query.append_pair(k, v);
    }
    for (k, v) in &cache.scope.query {
        query.append_pair(k, v);
    }
    format!("{}?{}", cache.shape.info.collection_path(None), query.finish())
}

/// A JSON GET to the upstream with watchmux's identity.
pub(crate) async fn upstream_get(
    upstream: &Upstream,
    uri: String,
) -> Result<http::Response<hyper::body::Incoming>, ReflectorError> {
    let req = Request::get(uri)
        .header(header::ACCEPT, "application/json")
        .header(header::USER_AGENT, concat!("watchmux/", env!("CARGO_PKG_VERSION")))
        .body(body::empty())
        .expect("valid request");
    upstream.send(req).await.map_err(ReflectorError::Request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_across_frames() {
        let mut s = LineSplitter::default();
        s.push(b"{\"a\":1}\n{\"b\"");
        assert_eq!(s.next_line().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(s.next_line(), None);
        s.push(b":2}\n\n");
        assert_eq!(s.next_line().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(s.next_line().as_deref(), Some(&b""[..]));
        assert_eq!(s.next_line(), None);
    }

    #[test]
    fn an_object_whose_data_says_bookmark_is_an_event() {
        // A Secret of type BOOKMARK: the pair appears in the object's bytes.
        let line = Bytes::from_static(
            br#"{"type":"ADDED","object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","resourceVersion":"5"},"type":"BOOKMARK"}}"#,
        );
        assert!(matches!(parse_line(&line), Ok(Line::Event(EventType::Added, _))));
        let bookmark =
            Bytes::from_static(br#"{"type":"BOOKMARK","object":{"kind":"Secret","metadata":{"resourceVersion":"9"}}}"#);
        assert!(matches!(parse_line(&bookmark), Ok(Line::Bookmark(9))));
        let gone = Bytes::from_static(br#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#);
        assert!(matches!(parse_line(&gone), Err(LineEnd::Expired)));
        assert!(matches!(parse_line(&Bytes::from_static(b"  ")), Ok(Line::Blank)));
    }
}
