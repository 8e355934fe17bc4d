//! Watch frames in JSON, as kube-apiserver writes them: one event per line,
//! `{"type":…,"object":…}`.
//!
//! An event frame is a static per-type header, the object's shared bytes
//! and a static tail, handed to hyper as one [`Chunk`]: the object is never
//! copied per watcher. Bookmarks and ERROR events are small and built here.

use bytes::Bytes;

use super::status::Status;
use super::variant::ContentVariant;
use crate::body::Chunk;

/// The type of a watch event about an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// The object appeared (or entered the watcher's selectors).
    Added,
    /// The object changed.
    Modified,
    /// The object went (or left the watcher's selectors).
    Deleted,
}

impl EventType {
    fn header(self) -> Bytes {
        Bytes::from_static(match self {
            Self::Added => b"{\"type\":\"ADDED\",\"object\":",
            Self::Modified => b"{\"type\":\"MODIFIED\",\"object\":",
            Self::Deleted => b"{\"type\":\"DELETED\",\"object\":",
        })
    }
}

const TAIL: &[u8] = b"}\n";

/// The frame of an event of type `kind` about an object already encoded in
/// the watch's variant.
pub(crate) fn event_frame(kind: EventType, object: Bytes) -> Chunk {
    Chunk::parts(kind.header(), object, Bytes::from_static(TAIL))
}

/// A BOOKMARK frame: an empty object of the watched kind carrying only a
/// resourceVersion, and the initial-events-end annotation when asked.
pub(crate) fn bookmark_frame(
    kind: &str,
    api_version: &str,
    variant: ContentVariant,
    rv: u64,
    initial_end: bool,
) -> Chunk {
    let (kind, api_version) = variant.object_type(kind, api_version);
    let annotations = if initial_end { r#","annotations":{"k8s.io/initial-events-end":"true"}"# } else { "" };
    let text = format!(
        r#"{{"type":"BOOKMARK","object":{{"kind":{},"apiVersion":{},"metadata":{{"resourceVersion":"{rv}"{annotations}}}}}}}"#,
        serde_json::to_string(kind).expect("string"),
        serde_json::to_string(api_version).expect("string"),
    ) + "\n";
    Chunk::from(Bytes::from(text))
}

/// An ERROR frame carrying a Status; the stream ends after it.
pub(crate) fn error_frame(status: &Status) -> Chunk {
    Chunk::from(Bytes::from(format!("{{\"type\":\"ERROR\",\"object\":{}}}\n", status.to_json())))
}

#[cfg(test)]
mod tests {
    use bytes::Buf;

    use super::*;

    fn text(mut chunk: Chunk) -> String {
        let bytes = chunk.copy_to_bytes(chunk.remaining());
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn frames_are_header_shared_object_and_newline() {
        let object = Bytes::from_static(br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}"#);
        let frame = text(event_frame(EventType::Added, object));
        assert!(frame.starts_with(r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","#), "{frame}");
        assert!(frame.ends_with("}}\n"));
        let v: serde_json::Value = serde_json::from_str(frame.trim_end()).unwrap();
        assert_eq!(v["object"]["metadata"]["name"], "a");
    }

    #[test]
    fn bookmarks_match_the_api_servers_shape() {
        assert_eq!(
            text(bookmark_frame("ConfigMap", "v1", ContentVariant::Json, 1541, true)),
            "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"1541\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n"
        );
        assert_eq!(
            text(bookmark_frame("ConfigMap", "v1", ContentVariant::PartialObjectMetadataJson, 7, false)),
            "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"7\"}}}\n"
        );
    }

    #[test]
    fn error_frames_carry_the_status() {
        let status = Status::new(
            http::StatusCode::GONE,
            crate::encode::status::StatusReason::Expired,
            "too old resource version: 1 (457)",
        );
        assert_eq!(
            text(error_frame(&status)),
            "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource version: 1 (457)\",\"reason\":\"Expired\",\"code\":410}}\n"
        );
    }
}
