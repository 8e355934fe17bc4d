//! The upstream's watch and list responses, read in one place: the URL of
//! a cache's collection, the GET that fetches it, the query of a watch
//! ([`watch_params`]), a list page and its metadata ([`ListPage`],
//! [`ListMeta`]), opening a watch ([`open_watch`]) and reading it change by
//! change ([`WatchLines`]: the splitter that cuts a watch body into lines,
//! and one typed parse of a line, an event, a bookmark or an ERROR, decoded
//! into the [`Change`] the cache's writer applies).
//!
//! Only reading lives here; deciding and applying live with the reflector
//! (the cache's writer) and the freshness proof. The reflector's long watch
//! and the freshness proof's short catch-up watch both read through here,
//! so a bookmark is known by its parsed type, never by searching the bytes
//! (an object's data may hold `"type":"BOOKMARK"`).

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::body;
use crate::cache::resource_info::ResourceInfo;
use crate::cache::state::object::{CachedObject, DecodeError, ObjectShape};
use crate::encode::watch::EventType;
use crate::upstream::Upstream;
use crate::upstream::bounded_read::{self, LIST_PAGE_BYTES, ReadError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReflectorError {
    #[error("upstream request failed")]
    Request(#[source] crate::upstream::SendError),
    #[error("upstream answered {status}: {body}")]
    Status { status: StatusCode, body: String },
    #[error("reading the upstream list")]
    Read(#[source] ReadError),
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

/// An ERROR event's Status: its code, and its message (a 410's is handed
/// to the watchers a backfill serves, as the API server wrote it).
#[derive(Deserialize)]
struct ErrorStatus {
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    message: String,
}

/// A bookmark's object: its version, and whether it ends a watch-list's
/// initial events (the `k8s.io/initial-events-end` annotation).
#[derive(Deserialize)]
struct BookmarkObject {
    #[serde(default)]
    metadata: BookmarkMeta,
}

#[derive(Deserialize, Default)]
struct BookmarkMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default)]
    annotations: Option<std::collections::HashMap<String, String>>,
}

/// The annotation the API server puts on the bookmark that ends a
/// watch-list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// The metadata watchmux reads of an upstream list: one type for every
/// reader.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    pub resource_version: String,
    #[serde(default, rename = "continue")]
    pub continue_token: Option<String>,
}

impl ListMeta {
    /// The list's resourceVersion, as a number.
    pub(crate) fn version(&self) -> Result<u64, ReflectorError> {
        self.resource_version.parse().map_err(|_| ReflectorError::ListVersion(self.resource_version.clone()))
    }
}

/// One page of an upstream list; its items raw, borrowed from the body.
#[derive(Deserialize)]
pub(crate) struct ListPage<'a> {
    #[serde(default)]
    pub metadata: ListMeta,
    #[serde(borrow, default)]
    pub items: Option<Vec<&'a RawValue>>,
}

/// One change read from an upstream watch, decoded.
#[derive(Debug)]
pub(crate) enum Change {
    /// ADDED, MODIFIED or DELETED, and when its line had been read (the
    /// start of its fan-out time).
    Event(EventType, CachedObject, Instant),
    /// Nothing changed up to this version.
    Bookmark(u64),
}

impl Change {
    /// The version this change brings the cache to.
    pub(crate) fn rv(&self) -> u64 {
        match self {
            Self::Event(_, object, _) => object.rv,
            Self::Bookmark(rv) => *rv,
        }
    }
}

/// One line of an upstream watch, parsed.
#[derive(Debug)]
pub(crate) enum Line {
    /// A blank line (between events, harmless).
    Blank,
    /// ADDED, MODIFIED or DELETED, with the object's raw JSON.
    Event(EventType, EventObject),
    /// Nothing changed up to this version.
    Bookmark(u64),
    /// A watch-list's initial events are complete at this version (a
    /// bookmark too: to a watch that started elsewhere, only that).
    InitialEventsEnd(u64),
}

/// Why a watch line ends the watch.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LineEnd {
    /// An ERROR event with 410: the upstream no longer has our version.
    /// Its Status's message (`too old resource version: 550 (568)`).
    #[error("the upstream answered 410 Expired")]
    Expired(String),
    /// Not a watch event's JSON.
    #[error("an unreadable watch line")]
    Unreadable(#[source] serde_json::Error),
    #[error("bookmark without resourceVersion")]
    BookmarkWithoutVersion,
    /// An ERROR event other than 410, with its Status as sent.
    #[error("ERROR event: {0}")]
    ErrorEvent(String),
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    /// An event whose object is not one of the cache's kind.
    #[error("an undecodable object")]
    Undecodable(#[source] crate::cache::state::object::DecodeError),
}

/// An event's object as its line carried it.
#[derive(Debug)]
pub(crate) struct EventObject {
    raw: Bytes,
    /// The whole line, when the object was cut from it by its place in the
    /// API server's own form rather than found by reading the line
    /// ([`parse_line`]); read in full if the cut turns out not to be JSON.
    cut_from: Option<Bytes>,
}

impl EventObject {
    /// The object decoded for a cache of `shape`: [`LineEnd::Undecodable`]
    /// for JSON that is no object of its kind, [`LineEnd::Unreadable`] for a
    /// line that is no watch event's JSON, as reading the line first says.
    pub(crate) fn decode(self, shape: &ObjectShape) -> Result<CachedObject, LineEnd> {
        match (CachedObject::decode(self.raw, shape), self.cut_from) {
            (Err(DecodeError::Json(_) | DecodeError::Utf8), Some(line)) => match read_line_in_full(&line)? {
                Line::Event(_, object) => object.decode(shape),
                // Not reached (a line that starts as an event's reads as one
                // or not at all), but upstream bytes get an error, not a panic.
                other => Err(LineEnd::UnknownType(format!("{other:?}"))),
            },
            (decoded, _) => decoded.map_err(LineEnd::Undecodable),
        }
    }
}

/// How kube-apiserver starts each event's line: `{"type":"ADDED","object":`
/// and so on, the object running to the line's closing brace.
const EVENT_LINE_STARTS: [(&[u8], EventType); 3] = [
    (br#"{"type":"ADDED","object":"#, EventType::Added),
    (br#"{"type":"MODIFIED","object":"#, EventType::Modified),
    (br#"{"type":"DELETED","object":"#, EventType::Deleted),
];

/// Parses one watch line (without its newline).
///
/// An event line in the API server's own form is cut, not read: its object
/// is then read once, by the decoder, which checks all of it (reading the
/// line here first scanned every object twice, a twentieth of a cache's CPU
/// at the ingest ceiling). A cut that is not JSON is read in full after
/// all ([`EventObject::decode`]), so every line reads as before.
pub(crate) fn parse_line(line: &Bytes) -> Result<Line, LineEnd> {
    let cut = EVENT_LINE_STARTS.iter().find(|(start, _)| line.starts_with(start));
    if let Some((start, kind)) = cut.filter(|_| line.last() == Some(&b'}')) {
        let raw = line.slice(start.len()..line.len() - 1);
        return Ok(Line::Event(*kind, EventObject { raw, cut_from: Some(line.clone()) }));
    }
    read_line_in_full(line)
}

/// [`parse_line`] by reading the line as JSON.
fn read_line_in_full(line: &Bytes) -> Result<Line, LineEnd> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(Line::Blank);
    }
    let event: WatchLine = serde_json::from_slice(line).map_err(LineEnd::Unreadable)?;
    let raw = line.slice_ref(event.object.get().as_bytes());
    let kind = match event.kind {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => {
            let bookmark: BookmarkObject = serde_json::from_slice(&raw).map_err(LineEnd::Unreadable)?;
            let meta = bookmark.metadata;
            let rv = meta.resource_version.parse().map_err(|_| LineEnd::BookmarkWithoutVersion)?;
            let ends_initial_events =
                meta.annotations.as_ref().and_then(|a| a.get(INITIAL_EVENTS_END)).is_some_and(|v| v == "true");
            return Ok(if ends_initial_events { Line::InitialEventsEnd(rv) } else { Line::Bookmark(rv) });
        }
        "ERROR" => {
            let status: ErrorStatus =
                serde_json::from_slice(&raw).unwrap_or(ErrorStatus { code: None, message: String::new() });
            return Err(if status.code == Some(410) {
                LineEnd::Expired(status.message)
            } else {
                LineEnd::ErrorEvent(String::from_utf8_lossy(&raw).into_owned())
            });
        }
        other => return Err(LineEnd::UnknownType(other.to_owned())),
    };
    Ok(Line::Event(kind, EventObject { raw, cut_from: None }))
}

/// Decodes a parsed line for a cache of objects of `shape` into the change
/// its writer applies; `None` for a blank line.
pub(crate) fn decode_line(shape: &ObjectShape, line: Line) -> Result<Option<Change>, LineEnd> {
    match line {
        Line::Blank => Ok(None),
        Line::Bookmark(rv) | Line::InitialEventsEnd(rv) => Ok(Some(Change::Bookmark(rv))),
        Line::Event(kind, object) => {
            // The start of the event's fan-out time: decoding is watchmux's work too.
            let arrived = std::time::Instant::now();
            let obj = object.decode(shape)?;
            Ok(Some(Change::Event(kind, obj, arrived)))
        }
    }
}

/// One watch line read as the writer reads it: [`parse_line`] then
/// [`decode_line`] (the fuzz tests feed the writer lines so).
#[cfg(test)]
pub(crate) fn read_line(shape: &ObjectShape, line: &Bytes) -> Result<Option<Change>, LineEnd> {
    decode_line(shape, parse_line(line)?)
}

/// The longest watch line (one event) read from the upstream. An event is
/// one object, and the API server refuses a request body over 3 MB (etcd one
/// over 1.5 MiB by default): a line this long is no event, and reading on
/// would hold an upstream's endless bytes in memory.
pub(crate) const MAX_LINE_BYTES: usize = 64 << 20;

/// Cuts a watch body into lines as its frames arrive (a line may span
/// frames, a frame may hold many lines).
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    buf: BytesMut,
    /// How much of `buf` is known to hold no newline: each byte is looked
    /// at once, however many frames a long line spans.
    scanned: usize,
}

impl LineSplitter {
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete line, without its newline.
    pub(crate) fn next_line(&mut self) -> Option<Bytes> {
        let Some(at) = memchr::memchr(b'\n', &self.buf[self.scanned..]) else {
            self.scanned = self.buf.len();
            return None;
        };
        let end = self.scanned + at;
        self.scanned = 0;
        let line = self.buf.split_to(end + 1).freeze();
        Some(line.slice(..end))
    }

    /// Whether the line being read is already longer than [`MAX_LINE_BYTES`].
    pub(crate) fn overlong(&self) -> bool {
        self.scanned > MAX_LINE_BYTES
    }
}

/// The collection URL of `info` with `params`, then `selectors` (a cache's
/// scope).
pub(crate) fn collection_uri(info: &ResourceInfo, selectors: &[(String, String)], params: &[(&str, String)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        query.append_pair(k, v);
    }
    for (k, v) in selectors {
        query.append_pair(k, v);
    }
    format!("{}?{}", info.collection_path(None), query.finish())
}

/// The query of a watch of changes after `from`, with bookmarks, that the
/// upstream ends after `timeout_seconds`: the reflector's watch and the
/// catch-up watch ask alike.
pub(crate) fn watch_params(from: u64, timeout_seconds: u64) -> [(&'static str, String); 4] {
    [
        ("watch", "true".to_owned()),
        ("allowWatchBookmarks", "true".to_owned()),
        ("resourceVersion", from.to_string()),
        ("timeoutSeconds", timeout_seconds.to_string()),
    ]
}

/// A list (or one page of it) the upstream answered with success.
pub(crate) struct Listed {
    pub body: Bytes,
    /// Its headers (the resource's `Warning`s: `cache::warnings`).
    pub headers: HeaderMap,
}

/// A list (or one page of it): the whole body, once the status says success.
/// `gzip`: asking for it (the cache's `SyncSettings::gzip_lists`).
pub(crate) async fn get_list(upstream: &Upstream, uri: String, gzip: bool) -> Result<Listed, ReflectorError> {
    let (headers, body) = fetch_list(upstream, uri, "application/json", gzip, Lane::Cache).await?;
    Ok(Listed { body, headers })
}

/// [`get_list`] in one of the forms `accept` names (the consistency check
/// reads PartialObjectMetadataList), with the `Content-Type` it came in.
pub(crate) async fn get_list_as(
    upstream: &Upstream,
    uri: String,
    accept: &'static str,
    gzip: bool,
) -> Result<(Option<http::HeaderValue>, Bytes), ReflectorError> {
    let (headers, body) = fetch_list(upstream, uri, accept, gzip, Lane::Cache).await?;
    Ok((headers.get(header::CONTENT_TYPE).cloned(), body))
}

/// A list's headers and whole body, once the status says success.
async fn fetch_list(
    upstream: &Upstream,
    uri: String,
    accept: &'static str,
    gzip: bool,
    lane: Lane,
) -> Result<(HeaderMap, Bytes), ReflectorError> {
    let resp = upstream_get_on(upstream, uri, accept, gzip, lane).await?;
    let status = resp.status();
    let (parts, body) = resp.into_parts();
    let gzip = crate::compress::is_gzip(&parts.headers);
    if !status.is_success() {
        let mut said = bounded_read::read_prefix(body, bounded_read::REFUSAL_BYTES).await;
        if gzip {
            said = bounded_read::gunzip(&said, bounded_read::REFUSAL_BYTES).unwrap_or(said);
        }
        return Err(ReflectorError::Status { status, body: String::from_utf8_lossy(&said).into_owned() });
    }
    let mut bytes = bounded_read::read_whole(body, LIST_PAGE_BYTES).await.map_err(ReflectorError::Read)?;
    if gzip {
        bytes = bounded_read::gunzip(&bytes, LIST_PAGE_BYTES).map_err(ReflectorError::Read)?;
    }
    Ok((parts.headers, bytes))
}

/// How asking for a watch went.
pub(crate) enum Opened {
    /// Changes follow.
    Streaming(WatchLines),
    /// 410: the upstream no longer has the version asked for.
    Expired,
    /// 404: the upstream does not serve the resource (any more).
    Gone,
    /// 504 `ResourceVersionTooLarge`: the API server's watch cache did not
    /// reach the version asked for within its wait (its own lag, or another
    /// cluster whose versions are below it). Its refusal, status and body.
    TooLarge(ReflectorError),
    /// No answer, or another status (with its body).
    Failed(ReflectorError),
}

/// Asks for the watch at `uri`.
pub(crate) async fn open_watch(upstream: &Upstream, uri: String) -> Opened {
    let resp = match upstream_get(upstream, uri).await {
        Ok(r) => r,
        Err(e) => return Opened::Failed(e),
    };
    match resp.status() {
        StatusCode::GONE => Opened::Expired,
        StatusCode::NOT_FOUND => Opened::Gone,
        status if !status.is_success() => {
            let body = bounded_read::read_prefix(resp.into_body(), bounded_read::REFUSAL_BYTES).await;
            let too_large = status == StatusCode::GATEWAY_TIMEOUT && is_too_large(&body);
            let refusal = ReflectorError::Status { status, body: String::from_utf8_lossy(&body).into_owned() };
            if too_large { Opened::TooLarge(refusal) } else { Opened::Failed(refusal) }
        }
        _ => Opened::Streaming(WatchLines::new(resp)),
    }
}

/// Whether a 504's Status names the cause `ResourceVersionTooLarge`.
fn is_too_large(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Status {
        #[serde(default)]
        details: Option<Details>,
    }
    #[derive(Deserialize)]
    struct Details {
        #[serde(default)]
        causes: Vec<Cause>,
    }
    #[derive(Deserialize)]
    struct Cause {
        #[serde(default, rename = "reason")]
        kind: String,
    }
    serde_json::from_slice::<Status>(body)
        .ok()
        .and_then(|s| s.details)
        .is_some_and(|d| d.causes.iter().any(|c| c.kind == "ResourceVersionTooLarge"))
}

/// How reading a watch ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamEnd {
    /// The upstream ended the response (its timeout).
    #[error("the upstream ended the watch")]
    Closed,
    /// Nothing arrived within the silence allowed (this long): a
    /// connection that died without a FIN or RST.
    #[error("no byte from the upstream watch for {0:?}")]
    Silent(Duration),
    /// The connection failed.
    #[error("the upstream watch broke")]
    Broken(#[source] crate::body::BoxError),
    /// A line longer than any event ([`MAX_LINE_BYTES`]).
    #[error("an event longer than {} MiB", MAX_LINE_BYTES >> 20)]
    Overlong,
    /// A line ended it (an ERROR event, or one that cannot be read).
    #[error(transparent)]
    Line(LineEnd),
}

/// An open upstream watch, read change by change.
pub(crate) struct WatchLines {
    body: BoxBody<Bytes, crate::body::BoxError>,
    lines: LineSplitter,
    headers: HeaderMap,
    /// The HTTP version the upstream answered with: HTTP/2 has PINGs to find
    /// a dead connection, HTTP/1.1 only the watch's own bytes.
    version: http::Version,
    /// When the last frame arrived (or the watch opened). The silence
    /// allowed is counted from here, not from each call to
    /// [`next_line`](Self::next_line): a caller that wakes for other reasons
    /// and reads again must not push the deadline back.
    last_frame: tokio::time::Instant,
}

impl std::fmt::Debug for WatchLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchLines").field("version", &self.version).finish_non_exhaustive()
    }
}

impl WatchLines {
    /// The body of a watch the upstream answered with success.
    pub(crate) fn new(resp: http::Response<Incoming>) -> Self {
        let version = resp.version();
        let (parts, body) = resp.into_parts();
        Self::from_body(parts.headers, version, body.map_err(Into::into).boxed())
    }

    fn from_body(headers: HeaderMap, version: http::Version, body: BoxBody<Bytes, crate::body::BoxError>) -> Self {
        let last_frame = tokio::time::Instant::now();
        Self { body, lines: LineSplitter::default(), headers, version, last_frame }
    }

    /// The HTTP version of the upstream's answer.
    pub(crate) fn version(&self) -> http::Version {
        self.version
    }

    /// The answer's headers (the resource's `Warning`s).
    pub(crate) fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The next change, decoded as objects of `shape`; the end when there is none.
    /// `silence`: how long the upstream may send nothing at all, counted
    /// from its last frame however often this is called meanwhile.
    ///
    /// Cancel-safe (for `select!`): a line is taken whole or not at all, and
    /// what arrived stays buffered here.
    pub(crate) async fn next(&mut self, shape: &ObjectShape, silence: Option<Duration>) -> Result<Change, StreamEnd> {
        loop {
            match decode_line(shape, self.next_line(silence).await?) {
                Ok(Some(change)) => return Ok(change),
                Ok(None) => {}
                Err(end) => return Err(StreamEnd::Line(end)),
            }
        }
    }

    /// The next line, parsed but not decoded (blank lines too). Cancel-safe
    /// as [`next`](Self::next) is.
    pub(crate) async fn next_line(&mut self, silence: Option<Duration>) -> Result<Line, StreamEnd> {
        loop {
            if let Some(line) = self.lines.next_line() {
                return parse_line(&line).map_err(StreamEnd::Line);
            }
            if self.lines.overlong() {
                return Err(StreamEnd::Overlong);
            }
            let next = match silence {
                Some(silence) => tokio::time::timeout_at(self.last_frame + silence, self.body.frame())
                    .await
                    .map_err(|_| StreamEnd::Silent(silence))?,
                None => self.body.frame().await,
            };
            self.last_frame = tokio::time::Instant::now();
            let frame = match next {
                None => return Err(StreamEnd::Closed),
                Some(Err(e)) => return Err(StreamEnd::Broken(e)),
                Some(Ok(frame)) => frame,
            };
            if let Ok(data) = frame.into_data() {
                self.lines.push(&data);
            }
        }
    }
}

/// A JSON GET to the upstream with watchmux's identity.
pub(crate) async fn upstream_get(
    upstream: &Upstream,
    uri: String,
) -> Result<http::Response<hyper::body::Incoming>, ReflectorError> {
    upstream_get_as(upstream, uri, "application/json", false).await
}

/// Which of watchmux's own connections a GET goes on.
#[derive(Debug, Clone, Copy)]
enum Lane {
    /// The cache's lists and watches.
    Cache,
    /// The probe lane (`upstream::probe_lane`): proofs of the upstream's
    /// current version, answered within [`PROOF_TIMEOUT`] or not at all.
    Probe,
}

/// How long a proof of the upstream's current version may wait for its
/// answer's head on the probe lane: what a consistent read waits for its
/// whole proof (the API server's own three seconds).
const PROOF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// A GET to the upstream with watchmux's identity, accepting `accept`;
/// `gzip`: asking for it.
pub(crate) async fn upstream_get_as(
    upstream: &Upstream,
    uri: String,
    accept: &'static str,
    gzip: bool,
) -> Result<http::Response<hyper::body::Incoming>, ReflectorError> {
    upstream_get_on(upstream, uri, accept, gzip, Lane::Cache).await
}

/// [`upstream_get_as`] on `lane`.
async fn upstream_get_on(
    upstream: &Upstream,
    uri: String,
    accept: &'static str,
    gzip: bool,
    lane: Lane,
) -> Result<http::Response<hyper::body::Incoming>, ReflectorError> {
    let mut req = Request::get(uri)
        .header(header::ACCEPT, accept)
        .header(header::USER_AGENT, concat!("watchmux/", env!("CARGO_PKG_VERSION")));
    if gzip {
        req = req.header(header::ACCEPT_ENCODING, "gzip");
    }
    let req = req.body(body::empty()).expect("valid request");
    match lane {
        Lane::Cache => upstream.send(req).await,
        Lane::Probe => upstream.send_probe(req, PROOF_TIMEOUT).await,
    }
    .map_err(ReflectorError::Request)
}

/// The upstream's current version for the collection at `uri` (a
/// consistent `LIST ?limit=1`): at least any version its etcd ever served.
/// `gzip` as for [`get_list`]. Sent on the probe lane, apart from the
/// cache's own watches, so that a frozen connection under them does not
/// hold the proof back.
pub(crate) async fn consistent_rv(upstream: &Upstream, uri: String, gzip: bool) -> Option<u64> {
    let (_, body) = fetch_list(upstream, uri, "application/json", gzip, Lane::Probe).await.ok()?;
    let page: ListPage = serde_json::from_slice(&body).ok()?;
    page.metadata.version().ok()
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
        // A line over many frames, each byte looked at once.
        for _ in 0..100 {
            s.push(b"0123456789");
            assert_eq!(s.next_line(), None);
            assert_eq!(s.scanned, s.buf.len());
        }
        s.push(b"!\nnext");
        assert_eq!(s.next_line().map(|l| l.len()), Some(1001));
        assert_eq!((s.next_line(), s.scanned), (None, 4));
    }

    #[test]
    fn a_line_longer_than_any_event_is_refused() {
        let mut s = LineSplitter::default();
        let frame = vec![b'x'; 1 << 20];
        for _ in 0..(MAX_LINE_BYTES >> 20) {
            s.push(&frame);
            assert_eq!(s.next_line(), None);
            assert!(!s.overlong());
        }
        s.push(b"x");
        assert_eq!(s.next_line(), None);
        assert!(s.overlong(), "one byte over");
    }

    /// Every line decodes through the cut as reading it in full decodes it:
    /// the same object, or the same kind of end.
    #[test]
    fn a_cut_event_line_decodes_as_the_line_read_in_full() {
        let shape = crate::cache::state::object::ObjectShape::new(
            crate::cache::resource_info::test_info("", "configmaps", "ConfigMap", true),
            None,
        );
        let outcome = |line: Result<Line, LineEnd>| match line {
            Ok(Line::Event(kind, object)) => match object.decode(&shape) {
                Ok(obj) => format!("{kind:?} {}", String::from_utf8_lossy(obj.json())),
                Err(LineEnd::Undecodable(_)) => "undecodable".to_owned(),
                Err(LineEnd::Unreadable(_)) => "unreadable".to_owned(),
                Err(other) => format!("{other}"),
            },
            Ok(other) => format!("{other:?}"),
            Err(LineEnd::Unreadable(_)) => "unreadable".to_owned(),
            Err(other) => format!("{other}"),
        };
        let meta = r#"{"metadata":{"name":"a","namespace":"n","resourceVersion":"5"}"#;
        let lines = [
            format!(r#"{{"type":"ADDED","object":{meta}}}}}"#),
            format!(r#"{{"type":"DELETED","object":{meta},"data":{{"}}":"}}"}}}}}}"#),
            // Not the API server's form: read in full, as before.
            format!(r#"{{"type":"MODIFIED","object":{meta}}},"extra":1}}"#),
            format!(r#"{{"type":"MODIFIED", "object":{meta}}}}}"#),
            format!(r#"{{"object":{meta}}},"type":"MODIFIED"}}"#),
            format!(r#"{{"type":"MODIFIED","object":{meta}}},"type":"ADDED"}}"#),
            // The cut is not JSON, or not the object.
            r#"{"type":"ADDED","object":{"a":"}"}"#.to_owned(),
            r#"{"type":"ADDED","object":{"a":}"#.to_owned(),
            r#"{"type":"ADDED","object":}"#.to_owned(),
            r#"{"type":"ADDED","object":[1]}"#.to_owned(),
            r#"{"type":"ADDED","object":{"metadata":{"name":"\ud800"}}}"#.to_owned(),
            // Not an object of its kind, read alike either way.
            r#"{"type":"ADDED","object":{"metadata":{}}}"#.to_owned(),
        ];
        let mut cut = 0;
        for line in lines {
            let line = Bytes::from(line);
            let parsed = parse_line(&line);
            cut += usize::from(matches!(&parsed, Ok(Line::Event(_, o)) if o.cut_from.is_some()));
            assert_eq!(outcome(parsed), outcome(read_line_in_full(&line)), "{}", String::from_utf8_lossy(&line));
        }
        assert_eq!(cut, 10, "the lines that start in the API server's form and end in a brace are cut");
        let invalid_utf8 =
            Bytes::from([&br#"{"type":"ADDED","object":{"metadata":{"name":""#[..], &[0xff], br#""}}}"#].concat());
        assert_eq!(outcome(parse_line(&invalid_utf8)), "unreadable");
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
        assert!(matches!(parse_line(&gone), Err(LineEnd::Expired(m)) if m.is_empty()));
        let told = Bytes::from_static(
            br#"{"type":"ERROR","object":{"kind":"Status","message":"too old resource version: 550 (568)","code":410}}"#,
        );
        assert!(matches!(parse_line(&told), Err(LineEnd::Expired(m)) if m == "too old resource version: 550 (568)"));
        assert!(matches!(parse_line(&Bytes::from_static(b"  ")), Ok(Line::Blank)));
    }

    /// The silence deadline counts from the watch's last frame, not from
    /// each read: a reader that a catch-up wakes every 100 ms (as the
    /// reflector's loop is) still finds a dead watch at the deadline.
    #[tokio::test(start_paused = true)]
    async fn silence_counts_from_the_last_frame_however_often_the_reader_wakes() {
        use http_body_util::channel::Channel;
        let (mut tx, rx) = Channel::<Bytes, crate::body::BoxError>::new(4);
        let mut lines = WatchLines::from_body(HeaderMap::new(), http::Version::HTTP_11, rx.boxed());
        let silence = Duration::from_secs(12);
        let start = tokio::time::Instant::now();
        // One bookmark 5 s in, then nothing, the body kept open for good.
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let bookmark = &br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#[..];
            tx.send_data(Bytes::from([bookmark, b"\n"].concat())).await.unwrap();
            std::future::pending::<()>().await;
            drop(tx);
        });
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let (mut wakes, mut bookmark_at) = (0u32, None);
        let silent_at = loop {
            assert!(start.elapsed() < Duration::from_secs(600), "never found silent");
            tokio::select! {
                line = lines.next_line(Some(silence)) => match line {
                    Ok(Line::Bookmark(9)) => bookmark_at = Some(start.elapsed()),
                    Err(StreamEnd::Silent(_)) => break start.elapsed(),
                    other => panic!("{other:?}"),
                },
                _ = tick.tick() => wakes += 1,
            }
        };
        sender.abort();
        assert_eq!(bookmark_at, Some(Duration::from_secs(5)));
        assert!(wakes > 150, "the reader was woken meanwhile: {wakes}");
        // 12 s after the bookmark's frame, not 12 s after the last wake-up.
        assert!(silent_at >= Duration::from_secs(17) && silent_at < Duration::from_millis(17_200), "{silent_at:?}");
    }

    /// A list page's answer from a fake upstream: `status`, gzip or not,
    /// and a body that claims `claimed` bytes and sends `sent`.
    async fn page_from(status: StatusCode, gzip: bool, claimed: Option<u64>, sent: Bytes) -> ReflectorError {
        use crate::upstream::{UpstreamOptions, fake_server};
        let addr = fake_server::serve(move |_req| {
            let sent = sent.clone();
            async move {
                let mut resp = http::Response::builder().status(status);
                if gzip {
                    resp = resp.header(header::CONTENT_ENCODING, "gzip");
                }
                let body = match claimed {
                    // hyper sends the header's length and then waits on
                    // the body, which never sends a byte.
                    Some(len) => {
                        resp = resp.header(header::CONTENT_LENGTH, len);
                        body::boxed(Silent)
                    }
                    None => body::full(sent),
                };
                resp.body(body).unwrap()
            }
        })
        .await;
        let upstream = fake_server::upstream(addr, UpstreamOptions::default());
        // Bounded: a read that ignored the bound would wait on `Silent`.
        let listed =
            tokio::time::timeout(Duration::from_secs(20), get_list(&upstream, "/api/v1/pods?limit=500".into(), false));
        listed.await.expect("answered in time").err().expect("an error")
    }

    /// A body that never sends a byte.
    struct Silent;

    impl hyper::body::Body for Silent {
        type Data = Bytes;
        type Error = crate::body::BoxError;
        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_list_page_longer_than_any_real_one_is_refused_unread() {
        let err = page_from(StatusCode::OK, false, Some(LIST_PAGE_BYTES as u64 + 1), Bytes::new()).await;
        assert!(matches!(err, ReflectorError::Read(ReadError::TooLarge { .. })), "{err:?}");
    }

    #[tokio::test]
    async fn a_list_page_that_is_not_gzip_as_it_says_is_an_error_not_a_list() {
        let err = page_from(StatusCode::OK, true, None, Bytes::from_static(b"{\"items\":[]}")).await;
        assert!(matches!(err, ReflectorError::Read(ReadError::Gunzip(_))), "{err:?}");
    }

    #[tokio::test]
    async fn a_refusal_keeps_its_message_inflated_and_no_more_than_its_bound() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, br#"{"kind":"Status","code":500}"#).unwrap();
        let gz = Bytes::from(enc.finish().unwrap());
        let err = page_from(StatusCode::INTERNAL_SERVER_ERROR, true, None, gz).await;
        let ReflectorError::Status { status, body } = err else { panic!("{err:?}") };
        assert_eq!((status, body.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, r#"{"kind":"Status","code":500}"#));
        let huge = Bytes::from(vec![b'x'; 4 * bounded_read::REFUSAL_BYTES]);
        let err = page_from(StatusCode::INTERNAL_SERVER_ERROR, false, None, huge).await;
        let ReflectorError::Status { body, .. } = err else { panic!("{err:?}") };
        assert_eq!(body.len(), bounded_read::REFUSAL_BYTES);
    }
}

#[cfg(test)]
mod fuzz;
