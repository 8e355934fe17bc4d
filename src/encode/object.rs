//! Objects in the forms the cache writes besides the stored JSON:
//! today `PartialObjectMetadata`, the object's metadata under the meta
//! group's own type (what metadata informers and `kubectl get` ask for).

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct MetadataOnly<'a> {
    #[serde(borrow)]
    metadata: &'a RawValue,
}

/// The raw JSON of an object's `metadata`, as it stands in `json` (a
/// slice of it), if the object has one: what PartialObjectMetadata in
/// either form carries, and where a resourceVersion is stamped.
pub(crate) fn metadata_of(json: &[u8]) -> Option<&str> {
    serde_json::from_slice::<MetadataOnly>(json).ok().map(|m| m.metadata.get())
}

/// `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{…}}`
/// with the metadata bytes copied from the object's JSON unchanged (an
/// object without metadata gets `{}`).
pub(crate) fn partial_object_metadata_json(json: &[u8]) -> Bytes {
    const HEAD: &[u8] = b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":";
    let metadata = metadata_of(json).map_or(&b"{}"[..], str::as_bytes);
    let mut out = BytesMut::with_capacity(HEAD.len() + metadata.len() + 1);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(metadata);
    out.extend_from_slice(b"}");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_bytes_are_copied_as_they_are_and_a_missing_metadata_is_empty() {
        let pod = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p", "labels":{"a":"b"}},"spec":{}}"#;
        assert_eq!(
            partial_object_metadata_json(pod),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p", "labels":{"a":"b"}}}"#
        );
        assert_eq!(
            partial_object_metadata_json(br#"{"kind":"Pod"}"#),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{}}"#
        );
    }
}
