//! Upstream answers read whole, within a bound.
//!
//! Everything watchmux reads whole from its upstream (list pages, discovery,
//! OpenAPI documents, token and access reviews, the Status of a refusal) is
//! read here, so that what answers on the upstream's address, a compromised
//! or misconfigured kube-apiserver or whatever sits between, cannot make
//! watchmux hold more than a bound for it: an endless body, or a gzip
//! member that inflates a thousandfold, ends in an error for that one
//! request (a list page's error is the reflector's, retried with backoff)
//! instead of taking the process's memory and every client's cache with it.
//!
//! The bounds are far above what a real kube-apiserver sends (each says
//! why) and are not knobs: an answer past one is not a cluster to serve but
//! a fault to report. Watch streams are bounded per event where they are
//! split into lines (`cache::upstream_wire`), and passed-through
//! bodies are never held whole.

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

/// One page of a list (`limit` 500 for the reflector, 1,000 for the
/// consistency check), compressed or inflated. etcd refuses an object over
/// 1.5 MiB by default, so a full page of the largest objects is about
/// 750 MiB of protobuf in etcd and somewhat more as JSON; a GiB leaves room
/// for clusters that raised etcd's limit a little.
pub(crate) const LIST_PAGE_BYTES: usize = 1 << 30;

/// A discovery answer or an OpenAPI document: the aggregated discovery of a
/// cluster with a thousand CRDs is a few MiB, core/v1's OpenAPI v3
/// document 1.6 MB.
pub(crate) const DOCUMENT_BYTES: usize = 64 << 20;

/// A TokenReview or SubjectAccessReview answer: the review sent back with a
/// user's name, groups, extra and a reason; a user in thousands of groups
/// is well under a MiB.
pub(crate) const REVIEW_BYTES: usize = 4 << 20;

/// How much of a refusal's body is kept to say what went wrong (the Status
/// kube-apiserver sends is a few hundred bytes).
pub(crate) const REFUSAL_BYTES: usize = 64 << 10;

/// How a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("reading the upstream answer")]
    Body(#[source] hyper::Error),
    #[error("the upstream answer is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("decompressing the upstream answer")]
    Gunzip(#[source] std::io::Error),
}

/// The whole body, or [`ReadError::TooLarge`] as soon as it passes `limit`
/// bytes (before they are held: a `Content-Length` past it fails at once).
/// A body that arrives in one frame is returned without a copy.
pub(crate) async fn read_whole<B>(mut body: B, limit: usize) -> Result<Bytes, ReadError>
where
    B: hyper::body::Body<Data = Bytes, Error = hyper::Error> + Unpin,
{
    if body.size_hint().lower() > limit as u64 {
        return Err(ReadError::TooLarge { limit });
    }
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut held = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(ReadError::Body)?.into_data() else { continue };
        held += data.len();
        if held > limit {
            return Err(ReadError::TooLarge { limit });
        }
        chunks.push(data);
    }
    Ok(join(chunks, held))
}

/// At most the first `limit` bytes of the body, for a refusal's message:
/// what could be read, a transport error or the bound ending the reading
/// (the connection is then dropped, not pooled, which is fine for an error).
pub(crate) async fn read_prefix<B>(mut body: B, limit: usize) -> Bytes
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut held = 0usize;
    while held < limit {
        let Some(Ok(frame)) = body.frame().await else { break };
        let Ok(mut data) = frame.into_data() else { continue };
        data.truncate(limit - held);
        held += data.len();
        chunks.push(data);
    }
    join(chunks, held)
}

/// A gzip body inflated, every member as Go's reader reads them, or
/// [`ReadError::TooLarge`] once the inflated bytes pass `limit`. A page of
/// 500 pods (about 1.5 MB inflated) takes a few milliseconds, done where it
/// is read.
pub(crate) fn gunzip(compressed: &[u8], limit: usize) -> Result<Bytes, ReadError> {
    use std::io::Read;
    // Reserve for a typical ratio of an API list (about 10 to 15), never
    // past the bound: a small bomb does not get a large buffer up front.
    let mut out = Vec::with_capacity(compressed.len().saturating_mul(8).min(limit));
    let read = flate2::read::MultiGzDecoder::new(compressed)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(ReadError::Gunzip)?;
    if read > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(out.into())
}

fn join(mut chunks: Vec<Bytes>, len: usize) -> Bytes {
    if chunks.len() == 1 {
        return chunks.pop().expect("one chunk");
    }
    let mut whole = BytesMut::with_capacity(len);
    for chunk in chunks {
        whole.extend_from_slice(&chunk);
    }
    whole.freeze()
}

#[cfg(test)]
mod tests;
