//! A response's head and body framing, written as hyper's HTTP/1.1 server
//! writes them for a `GET`, so that a client cannot tell which of the two
//! answered.
//!
//! hyper 1.x (`proto::h1::role::Server::encode` and `conn::enforce_version`)
//! is the reference: the status line (`HTTP/1.1 200 OK` or the code with its
//! canonical reason, or the reason the upstream sent), the handler's headers
//! in their order with lower-case names, Content-Length or
//! Transfer-Encoding by the body (an exact length gives Content-Length, an
//! unknown one chunked encoding), `connection: close` added when the
//! connection will not be kept, `date` last unless the handler set it; each
//! data frame as one chunk (`{len:X}\r\n` … `\r\n`), `0\r\n\r\n` at the end.
//! Tests compare the bytes with hyper's for the same responses.

use bytes::Buf;
use http::header::{self, HeaderMap, HeaderValue};
use http::{StatusCode, response};

/// What the handler's body says of its length, as hyper reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyLength {
    /// The body is already at its end.
    Empty,
    /// An exact length (`size_hint`).
    Known(u64),
    /// A stream: chunked encoding.
    Unknown,
}

/// How the body's bytes go on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoder {
    /// As they are, up to this many more bytes.
    Length(u64),
    /// In chunks, ended by a last chunk of length 0.
    Chunked,
}

/// A response head ready to write.
#[derive(Debug)]
pub(super) struct EncodedHead {
    pub(super) bytes: Vec<u8>,
    pub(super) encoder: Encoder,
    /// The connection closes after this response.
    pub(super) last: bool,
}

/// Why a response cannot be written; the connection is closed instead, as
/// hyper closes it.
#[derive(Debug, thiserror::Error)]
pub(super) enum HeadError {
    #[error("a {0} response cannot be sent as the final answer")]
    Informational(StatusCode),
    #[error("invalid content-length")]
    ContentLength,
    #[error("both content-length and transfer-encoding")]
    Conflicting,
}

/// The head of `parts` for a `GET`'s response, its body framed as `body`
/// says. `keep_alive` false adds `connection: close`; `date` gives the Date
/// header's value when the handler set none.
pub(super) fn encode_head(
    parts: &mut response::Parts,
    body: BodyLength,
    keep_alive: bool,
    date: impl FnOnce() -> String,
) -> Result<EncodedHead, HeadError> {
    let status = parts.status;
    if status.is_informational() {
        return Err(HeadError::Informational(status));
    }
    if !keep_alive {
        add_connection_close(&mut parts.headers);
    }
    // 204 and 304 have no body, so neither length nor chunks.
    let can_have_body = !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);

    let mut dst = Vec::with_capacity(64 + parts.headers.len() * 32);
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    if status == StatusCode::OK && reason.is_none() {
        dst.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        dst.extend_from_slice(b"HTTP/1.1 ");
        dst.extend_from_slice(status.as_str().as_bytes());
        dst.push(b' ');
        match reason {
            Some(reason) => dst.extend_from_slice(reason.as_bytes()),
            None => dst.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
        }
        dst.extend_from_slice(b"\r\n");
    }

    let mut encoder = Encoder::Length(0);
    let mut wrote_len = false;
    let mut wrote_date = false;
    let mut last = !keep_alive;
    for name in parts.headers.keys() {
        let values = parts.headers.get_all(name);
        match *name {
            header::CONTENT_LENGTH => {
                if wrote_len {
                    return Err(HeadError::Conflicting);
                }
                let first = values.iter().next().expect("a key has a value");
                match body {
                    // No body to send: the length is written below, as 0.
                    BodyLength::Empty => continue,
                    // hyper trusts the header when the body knows its length.
                    BodyLength::Known(len) => encoder = Encoder::Length(len),
                    BodyLength::Unknown => {
                        let len = parse_length(first).ok_or(HeadError::ContentLength)?;
                        if values.iter().any(|v| parse_length(v) != Some(len)) {
                            return Err(HeadError::ContentLength);
                        }
                        encoder = Encoder::Length(len);
                    }
                }
                field(&mut dst, "content-length", first.as_bytes());
                wrote_len = true;
            }
            header::TRANSFER_ENCODING => {
                if wrote_len {
                    return Err(HeadError::Conflicting);
                }
                if !can_have_body {
                    continue;
                }
                let mut joined = join(values.iter());
                if !values.iter().next_back().is_some_and(is_chunked) {
                    joined.extend_from_slice(b", chunked");
                }
                field(&mut dst, "transfer-encoding", &joined);
                encoder = Encoder::Chunked;
                wrote_len = true;
            }
            header::CONNECTION => {
                last |= values.iter().any(|v| has_option(v, b"close"));
                field(&mut dst, "connection", &join(values.iter()));
            }
            header::TRAILER => {
                if can_have_body {
                    field(&mut dst, "trailer", &join(values.iter()));
                }
            }
            _ => {
                wrote_date |= *name == header::DATE;
                for value in values {
                    field(&mut dst, name.as_str(), value.as_bytes());
                }
            }
        }
    }

    if !wrote_len {
        encoder = match body {
            BodyLength::Unknown if can_have_body => {
                dst.extend_from_slice(b"transfer-encoding: chunked\r\n");
                Encoder::Chunked
            }
            BodyLength::Unknown => Encoder::Length(0),
            BodyLength::Empty | BodyLength::Known(0) => {
                if can_have_body {
                    dst.extend_from_slice(b"content-length: 0\r\n");
                }
                Encoder::Length(0)
            }
            BodyLength::Known(len) if can_have_body => {
                field(&mut dst, "content-length", len.to_string().as_bytes());
                Encoder::Length(len)
            }
            BodyLength::Known(_) => Encoder::Length(0),
        };
    }
    if !can_have_body {
        encoder = Encoder::Length(0);
    }
    if !wrote_date {
        field(&mut dst, "date", date().as_bytes());
    }
    dst.extend_from_slice(b"\r\n");
    Ok(EncodedHead { bytes: dst, encoder, last })
}

/// `connection: close` added to the Connection field (or as it) unless an
/// option there says close already: hyper's answer on a connection it will
/// not keep.
fn add_connection_close(headers: &mut HeaderMap) {
    match headers.entry(header::CONNECTION) {
        header::Entry::Occupied(mut entry) => {
            if !entry.iter().any(|v| has_option(v, b"close")) {
                entry.append(HeaderValue::from_static("close"));
            }
        }
        header::Entry::Vacant(entry) => {
            entry.insert(HeaderValue::from_static("close"));
        }
    }
}

fn field(dst: &mut Vec<u8>, name: &str, value: &[u8]) {
    dst.extend_from_slice(name.as_bytes());
    dst.extend_from_slice(b": ");
    dst.extend_from_slice(value);
    dst.extend_from_slice(b"\r\n");
}

/// The values of one field on one line, as hyper writes its special fields.
fn join<'a>(values: impl Iterator<Item = &'a HeaderValue>) -> Vec<u8> {
    let mut joined = Vec::new();
    for (i, value) in values.enumerate() {
        if i > 0 {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(value.as_bytes());
    }
    joined
}

/// A Content-Length value: digits only, as hyper reads one.
fn parse_length(value: &HeaderValue) -> Option<u64> {
    let digits = value.as_bytes();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// True when the last coding of a Transfer-Encoding value is chunked.
fn is_chunked(value: &HeaderValue) -> bool {
    value
        .as_bytes()
        .rsplit(|&b| b == b',')
        .next()
        .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// True when a comma-separated value has `option` among its options.
fn has_option(value: &HeaderValue, option: &[u8]) -> bool {
    value.as_bytes().split(|&b| b == b',').any(|o| o.trim_ascii().eq_ignore_ascii_case(option))
}

/// The size line of a chunk, `{len:X}\r\n`, without an allocation.
pub(super) struct ChunkSize {
    bytes: [u8; 18],
    pos: u8,
    len: u8,
}

impl ChunkSize {
    pub(super) fn new(len: usize) -> Self {
        let mut bytes = [0u8; 18];
        let mut digits = [0u8; 16];
        let mut n = len;
        let mut count = 0;
        loop {
            digits[count] = b"0123456789ABCDEF"[n & 0xf];
            count += 1;
            n >>= 4;
            if n == 0 {
                break;
            }
        }
        for i in 0..count {
            bytes[i] = digits[count - 1 - i];
        }
        bytes[count] = b'\r';
        bytes[count + 1] = b'\n';
        Self { bytes, pos: 0, len: (count + 2) as u8 }
    }
}

impl Buf for ChunkSize {
    fn remaining(&self) -> usize {
        usize::from(self.len - self.pos)
    }

    fn chunk(&self) -> &[u8] {
        &self.bytes[usize::from(self.pos)..usize::from(self.len)]
    }

    fn advance(&mut self, cnt: usize) {
        assert!(cnt <= self.remaining(), "advanced past the end of a chunk size");
        self.pos += cnt as u8;
    }
}
