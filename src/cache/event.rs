//! Watch events as the cache holds them, and the frames written to watchers.
//!
//! An event keeps the new state of its object and the previous one, so that
//! each watcher can see it through its own selectors: an object that starts
//! matching arrives as ADDED, one that stops matching as DELETED (its previous
//! state, stamped with this event's resourceVersion), one that matches before
//! and after as MODIFIED. A frame is a static per-type header, the object's
//! shared bytes and a static tail, handed to hyper as one [`Chunk`].

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::body::Chunk;
use crate::encode::status::Status;
use crate::negotiate::ContentVariant;

use super::object::CachedObject;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
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

/// One change to one object.
#[derive(Debug)]
pub(crate) struct CacheEvent {
    pub rv: u64,
    pub kind: EventType,
    /// The new state; for DELETED, the last state with the deletion's RV.
    pub object: Arc<CachedObject>,
    /// The state before this event, when the cache had one.
    pub prev: Option<Arc<CachedObject>>,
    /// `prev` stamped with `rv`, built the first time a watcher needs it.
    prev_stamped: OnceLock<Arc<CachedObject>>,
}

impl CacheEvent {
    pub(crate) fn new(kind: EventType, object: Arc<CachedObject>, prev: Option<Arc<CachedObject>>) -> Self {
        Self { rv: object.rv, kind, object, prev, prev_stamped: OnceLock::new() }
    }

    /// What a watcher whose filter is `matches` sees of this event, if anything.
    pub(crate) fn as_seen_by(&self, matches: impl Fn(&CachedObject) -> bool) -> Option<(EventType, &CachedObject)> {
        match self.kind {
            EventType::Added => matches(&self.object).then_some((EventType::Added, &*self.object)),
            EventType::Deleted => matches(&self.object).then_some((EventType::Deleted, &*self.object)),
            EventType::Modified => {
                let now = matches(&self.object);
                let before = self.prev.as_deref().is_some_and(&matches);
                match (before, now) {
                    (true, true) => Some((EventType::Modified, &*self.object)),
                    (false, true) => Some((EventType::Added, &*self.object)),
                    (true, false) => Some((EventType::Deleted, self.prev_stamped())),
                    (false, false) => None,
                }
            }
        }
    }

    /// The previous state stamped with this event's resourceVersion (memoized).
    pub(crate) fn prev_stamped(&self) -> &CachedObject {
        self.prev_stamped.get_or_init(|| {
            let prev = self.prev.as_ref().expect("a transition out of a selector has a previous state");
            Arc::new(prev.with_resource_version(self.rv))
        })
    }
}

/// The frame of an event of type `kind` about `object`, in `variant`.
pub(crate) fn event_frame(kind: EventType, object: &CachedObject, variant: ContentVariant) -> Chunk {
    Chunk::parts(kind.header(), object.encoded(variant), Bytes::from_static(TAIL))
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
    let (kind, api_version) = match variant {
        ContentVariant::Json => (kind, api_version),
        ContentVariant::PartialObjectMetadataJson => ("PartialObjectMetadata", "meta.k8s.io/v1"),
    };
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
    use super::*;
    use crate::cache::object::tests::cm;
    use bytes::Buf;

    fn text(mut chunk: Chunk) -> String {
        let bytes = chunk.copy_to_bytes(chunk.remaining());
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn labelled(o: &CachedObject) -> bool {
        o.labels.get("app").is_some_and(|v| v == "x")
    }

    #[test]
    fn frames_are_header_shared_object_and_newline() {
        let obj = cm("a", 5, "");
        let frame = text(event_frame(EventType::Added, &obj, ContentVariant::Json));
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
    fn selector_transitions_per_watcher() {
        let before = Arc::new(cm("a", 5, r#""app":"x""#));
        let after = Arc::new(cm("a", 9, r#""app":"y""#));
        let leaving = CacheEvent::new(EventType::Modified, after.clone(), Some(before.clone()));
        let (kind, obj) = leaving.as_seen_by(labelled).unwrap();
        assert_eq!(kind, EventType::Deleted);
        assert_eq!(obj.rv, 9, "DELETED on leaving carries the current RV");
        assert_eq!(obj.labels.get("app").unwrap(), "x", "and the previous state");
        assert!(obj.json().windows(17).any(|w| w == br#""resourceVersion""#));

        let entering = CacheEvent::new(EventType::Modified, before.clone(), Some(after.clone()));
        assert_eq!(entering.as_seen_by(labelled).unwrap().0, EventType::Added);
        let staying = CacheEvent::new(EventType::Modified, before.clone(), Some(before.clone()));
        assert_eq!(staying.as_seen_by(labelled).unwrap().0, EventType::Modified);
        let outside = CacheEvent::new(EventType::Modified, after.clone(), Some(after));
        assert!(outside.as_seen_by(labelled).is_none());
        let deleted = CacheEvent::new(EventType::Deleted, before, None);
        assert_eq!(deleted.as_seen_by(labelled).unwrap().0, EventType::Deleted);
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
