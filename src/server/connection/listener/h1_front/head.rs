//! Reading an HTTP/1.1 request head at the front, and telling a watch the
//! front serves from a request it leaves to hyper.
//!
//! The head is parsed with httparse, the parser hyper's HTTP/1.1 server
//! uses, with the same (default) settings, so whatever the front cannot
//! parse hyper cannot either: such bytes go to hyper, which answers them
//! as it always has (400, 414, 431). The front takes only what it can
//! answer without reading a body or changing protocols: an HTTP/1.1 `GET`
//! that is a watch, in origin form, without Content-Length,
//! Transfer-Encoding, Upgrade or Expect, and with no Connection option
//! but keep-alive.

use std::io;

use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version, header};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::body::RequestBody;
use crate::request::RequestInfo;

/// The largest head the front reads. A larger one goes to hyper, which
/// reads heads up to `listener::MAX_HEADER_BYTES` (client-go's heads,
/// a bearer token included, are under 2 KiB).
pub(super) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most header fields the front parses; a request with more goes to
/// hyper, which takes 512.
const MAX_HEADERS: usize = 128;
/// Room made for each read of a head.
const READ_SIZE: usize = 2048;

/// What the front found at the start of a request.
pub(super) enum Head {
    /// A watch the front serves: its head, and no body.
    Watch(Box<Request<RequestBody>>),
    /// Anything else: every byte read is in the buffer, for hyper.
    Other,
    /// The client closed the connection before a request began.
    Closed,
}

/// Reads a request head into `buf`, which may hold bytes already read (a
/// request pipelined behind the last one). On [`Head::Watch`] the head's
/// bytes are taken out of `buf`, leaving whatever followed them.
pub(super) async fn read_head<IO: AsyncRead + Unpin>(io: &mut IO, buf: &mut Vec<u8>) -> io::Result<Head> {
    loop {
        if !buf.is_empty() {
            match parse(buf) {
                Parsed::Partial if buf.len() < MAX_HEAD_BYTES => {}
                Parsed::Partial | Parsed::Other => return Ok(Head::Other),
                Parsed::Watch(req, len) => {
                    buf.drain(..len);
                    if buf.is_empty() {
                        // Not kept while the watch streams.
                        *buf = Vec::new();
                    }
                    return Ok(Head::Watch(req));
                }
            }
        }
        buf.reserve(READ_SIZE);
        if io.read_buf(buf).await? == 0 {
            return Ok(if buf.is_empty() { Head::Closed } else { Head::Other });
        }
    }
}

enum Parsed {
    /// The head is not complete yet.
    Partial,
    /// A complete head of `len` bytes that the front serves.
    Watch(Box<Request<RequestBody>>, usize),
    /// Not for the front: another request, or not HTTP hyper would take.
    Other,
}

fn parse(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => match watch_request(&req) {
            Some(request) => Parsed::Watch(Box::new(request), len),
            None => Parsed::Other,
        },
        Ok(httparse::Status::Partial) => Parsed::Partial,
        // Malformed, or more headers than the front parses: hyper answers.
        Err(_) => Parsed::Other,
    }
}

/// The request, when it is one the front serves.
fn watch_request(parsed: &httparse::Request<'_, '_>) -> Option<Request<RequestBody>> {
    if parsed.method? != "GET" || parsed.version? != 1 {
        return None;
    }
    let path = parsed.path?;
    // Origin form only: hyper would take the absolute form too, as a proxy
    // request, which no Kubernetes client sends.
    if !path.starts_with('/') {
        return None;
    }
    let uri = Uri::try_from(path).ok()?;
    if !RequestInfo::classify(&Method::GET, &uri).is_watch() {
        return None;
    }
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).ok()?;
        if leaves_to_hyper(&name, field.value) {
            return None;
        }
        headers.append(name, HeaderValue::from_bytes(field.value).ok()?);
    }
    let mut request = Request::new(RequestBody::Empty);
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Some(request)
}

/// A header that leaves the request to hyper: one announcing a body (even
/// of length 0: hyper's reading of lengths is the one to keep), an upgrade,
/// an expectation, or a Connection option other than keep-alive (`close`:
/// hyper's closing after the answer, with its `connection: close`).
fn leaves_to_hyper(name: &HeaderName, value: &[u8]) -> bool {
    match *name {
        header::CONTENT_LENGTH | header::TRANSFER_ENCODING | header::UPGRADE | header::EXPECT => true,
        header::CONNECTION => {
            !value.split(|&b| b == b',').all(|option| option.trim_ascii().eq_ignore_ascii_case(b"keep-alive"))
        }
        _ => false,
    }
}
