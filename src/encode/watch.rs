//! Watch frames as kube-apiserver writes them: in JSON one event per line,
//! `{"type":…,"object":…}`; in protobuf a 4-byte length then a bare
//! `WatchEvent` whose object is the object's whole body (see
//! [`super::protobuf::watch_frame`]).
//!
//! An event frame is a small header, the object's shared bytes and a static
//! tail, handed to hyper as one [`Chunk`]: the object is never copied per
//! watcher. Bookmarks and ERROR events are small and built here.

use bytes::Bytes;

use super::bookmark::{bookmark_metadata, bookmark_object, typed_bookmark_object};
use super::protobuf::{self, Unplaceable};
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
    /// The `type` of the event, as the API server spells it.
    fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }

    /// A JSON frame up to the event's object.
    pub(crate) fn json_prefix(self) -> &'static str {
        match self {
            Self::Added => "{\"type\":\"ADDED\",\"object\":",
            Self::Modified => "{\"type\":\"MODIFIED\",\"object\":",
            Self::Deleted => "{\"type\":\"DELETED\",\"object\":",
        }
    }

    fn header(self) -> Bytes {
        Bytes::from_static(self.json_prefix().as_bytes())
    }
}

const TAIL: &[u8] = b"}\n";

/// A JSON BOOKMARK frame up to its object.
pub(crate) const BOOKMARK_JSON_PREFIX: &str = "{\"type\":\"BOOKMARK\",\"object\":";

/// The frame of an event of type `kind` about an object already encoded in
/// the watch's variant (for protobuf, its whole body).
pub(crate) fn event_frame(variant: ContentVariant, kind: EventType, object: Bytes) -> Chunk {
    if variant.is_protobuf() {
        let head = protobuf::watch_frame_head(kind.as_str(), object.len());
        return Chunk::parts(Bytes::from(head), object, Bytes::new());
    }
    Chunk::parts(kind.header(), object, Bytes::from_static(TAIL))
}

/// A BOOKMARK frame: the object kube-apiserver writes (see
/// [`super::bookmark`]), carrying only a resourceVersion, and the
/// initial-events-end annotation when asked. Only protobuf can fail: a kind
/// the encoder does not know.
pub(crate) fn bookmark_frame(
    kind: &str,
    api_version: &str,
    variant: ContentVariant,
    rv: u64,
    initial_end: bool,
) -> Result<Chunk, Unplaceable> {
    let (pom_kind, pom_version) = variant.object_type(kind, api_version);
    let body = match variant {
        ContentVariant::Json | ContentVariant::PartialObjectMetadataJson => {
            let object = if variant == ContentVariant::Json {
                bookmark_object(kind, api_version, rv, initial_end)
            } else {
                typed_bookmark_object(pom_kind, pom_version, rv, initial_end)
            };
            return Ok(Chunk::from(Bytes::from(format!("{BOOKMARK_JSON_PREFIX}{object}}}\n"))));
        }
        // The protobuf encoder writes Go's zero values of the fields the
        // object leaves out.
        ContentVariant::Protobuf => {
            protobuf::encode_object(bookmark_object(kind, api_version, rv, initial_end).as_bytes())?
        }
        ContentVariant::PartialObjectMetadataProtobuf => {
            let message = protobuf::encode_partial_object_metadata(bookmark_metadata(rv, initial_end).as_bytes())?;
            protobuf::envelope(pom_version, pom_kind, &message)
        }
    };
    Ok(Chunk::from(Bytes::from(protobuf::watch_frame("BOOKMARK", &body))))
}

/// An ERROR frame carrying a Status; the stream ends after it. In protobuf
/// the Status is written as the API server's protobuf serializer writes it.
pub(crate) fn error_frame(variant: ContentVariant, status: &Status) -> Chunk {
    if variant.is_protobuf() {
        match status.to_protobuf() {
            Ok(body) => return Chunk::from(Bytes::from(protobuf::watch_frame("ERROR", &body))),
            // Unreachable: every field a Status is built with is in the table (tested in status.rs).
            Err(e) => tracing::warn!(error = %e, "a Status with no protobuf form; writing JSON"),
        }
    }
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
        let frame = text(event_frame(ContentVariant::Json, EventType::Added, object));
        assert!(frame.starts_with(r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","#), "{frame}");
        assert!(frame.ends_with("}}\n"));
        let v: serde_json::Value = serde_json::from_str(frame.trim_end()).unwrap();
        assert_eq!(v["object"]["metadata"]["name"], "a");
    }

    #[test]
    fn bookmarks_match_the_api_servers_shape() {
        assert_eq!(
            text(bookmark_frame("ConfigMap", "v1", ContentVariant::Json, 1541, true).unwrap()),
            "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"1541\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n"
        );
        assert_eq!(
            text(bookmark_frame("ConfigMap", "v1", ContentVariant::PartialObjectMetadataJson, 7, false).unwrap()),
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
            text(error_frame(ContentVariant::Json, &status)),
            "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource version: 1 (457)\",\"reason\":\"Expired\",\"code\":410}}\n"
        );
    }

    fn bytes(mut chunk: Chunk) -> Vec<u8> {
        chunk.copy_to_bytes(chunk.remaining()).to_vec()
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn protobuf_event_frames_are_the_encoder_s_frames() {
        let object =
            protobuf::encode_object(br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}"#).unwrap();
        for kind in [EventType::Added, EventType::Modified, EventType::Deleted] {
            assert_eq!(
                bytes(event_frame(ContentVariant::Protobuf, kind, Bytes::from(object.clone()))),
                protobuf::watch_frame(kind.as_str(), &object)
            );
        }
    }

    #[test]
    fn protobuf_bookmarks_are_go_s() {
        // Go's bytes (protocorpus -golden) for the ADDED frame of
        // {"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12345"}}: the same event
        // with type BOOKMARK differs only in the type and the length in front.
        let frame = bytes(bookmark_frame("Pod", "v1", ContentVariant::Protobuf, 12345, false).unwrap());
        let added = "0000006a0a05414444454412610a5f6b3873000a090a0276311203506f64124a0a150a0012001a0022002a003205313233343538004200121c1a00320042004a0052005800600068008201008a01009a0100c201001a130a001a0022002a0032004a005a0072008801001a002200";
        let bookmark = "0000006d0a08424f4f4b4d41524b".to_owned() + &added[22..];
        assert_eq!(hex(&frame), bookmark);
        // The initial-events-end bookmark in PartialObjectMetadata: Go's envelope (protocorpus -golden).
        let frame = bytes(bookmark_frame("Pod", "v1", ContentVariant::PartialObjectMetadataProtobuf, 9, true).unwrap());
        let want = protobuf::envelope(
            "meta.k8s.io/v1",
            "PartialObjectMetadata",
            &protobuf::encode_partial_object_metadata(
                br#"{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}"#,
            )
            .unwrap(),
        );
        assert_eq!(frame, protobuf::watch_frame("BOOKMARK", &want));
        assert!(bookmark_frame("Widget", "example.com/v1", ContentVariant::Protobuf, 1, false).is_err());
    }

    #[test]
    fn protobuf_error_frames_carry_go_s_status() {
        let status = Status::new(http::StatusCode::GONE, crate::encode::status::StatusReason::Expired, "too old");
        // Go's bytes for the Status (protocorpus -golden; see encode/protobuf/tests.rs).
        let go = "6b3873000a0c0a027631120653746174757312260a060a0012001a0012074661696c7572651a07746f6f206f6c64220745787069726564309a031a002200";
        let frame = bytes(error_frame(ContentVariant::Protobuf, &status));
        assert_eq!(hex(&frame[..]), hex(&protobuf::watch_frame("ERROR", &hex_bytes(go))));
    }

    fn hex_bytes(h: &str) -> Vec<u8> {
        (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
    }
}
