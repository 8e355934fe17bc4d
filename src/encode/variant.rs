//! The forms the cache writes, and everything that differs between them:
//! the Content-Type, the `kind` and `apiVersion` written for objects and
//! lists, the empty-list quirk and the metric label. Each variant's rules
//! live here, in one type, so a new form is one more arm in each method
//! rather than a search through the encoders.

use std::borrow::Cow;

/// The media type of JSON responses (watches too: see [`ContentVariant::content_type`]).
const JSON: &str = "application/json";
/// The media type of protobuf GET and LIST responses.
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The media type of protobuf watches: `serveWatchHandler` appends `;stream=watch` to every media
/// type but JSON.
const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// `meta.k8s.io/v1`, the group version of PartialObjectMetadata.
const META_V1: &str = "meta.k8s.io/v1";

/// A representation the cache can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ContentVariant {
    /// The object as stored, with the resource's own `kind` and `apiVersion`.
    Json,
    /// `meta.k8s.io/v1` `PartialObjectMetadata` (GET and every WATCH event object, bookmarks too)
    /// or `PartialObjectMetadataList` (LIST).
    PartialObjectMetadataJson,
    /// The object as kube-apiserver's protobuf serializer writes it: the `k8s\0` + `Unknown`
    /// envelope (GET, watch events), bare messages as list items. Built-in kinds only: the
    /// encoder's table has no custom resources.
    Protobuf,
    /// `PartialObjectMetadata[List]` in protobuf: every kind, custom resources included.
    PartialObjectMetadataProtobuf,
}

/// The kind of read a request is, and so the shape of its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// One named object.
    Get,
    /// A collection.
    List,
    /// `?watch=true`, a watch-list, or the legacy `/watch/` paths.
    Watch,
}

impl ContentVariant {
    /// The Content-Type header of a response in this variant for this endpoint, exactly as
    /// kube-apiserver sends it. It never echoes the request's parameters: the handlers write the
    /// serializer's bare media type, and a JSON watch keeps it without `;stream=watch`
    /// (k8s.io/apiserver `handlers/watch.go`, `serveWatchHandler`).
    pub(crate) fn content_type(self, endpoint: Endpoint) -> &'static str {
        match (self, endpoint) {
            (Self::Json, Endpoint::Get | Endpoint::List | Endpoint::Watch) => JSON,
            (Self::PartialObjectMetadataJson, Endpoint::Get | Endpoint::List | Endpoint::Watch) => JSON,
            (Self::Protobuf | Self::PartialObjectMetadataProtobuf, Endpoint::Get | Endpoint::List) => PROTOBUF,
            (Self::Protobuf | Self::PartialObjectMetadataProtobuf, Endpoint::Watch) => PROTOBUF_WATCH,
        }
    }

    /// The `kind` and `apiVersion` an object of the resource's `kind` and
    /// `api_version` is written with (a watch event's object, a bookmark).
    pub(crate) fn object_type<'a>(self, kind: &'a str, api_version: &'a str) -> (&'a str, &'a str) {
        match self {
            Self::Json | Self::Protobuf => (kind, api_version),
            Self::PartialObjectMetadataJson | Self::PartialObjectMetadataProtobuf => ("PartialObjectMetadata", META_V1),
        }
    }

    /// The `kind` and `apiVersion` of a list of the resource's `kind`.
    pub(crate) fn list_type(self, kind: &str, api_version: &str) -> (Cow<'static, str>, Cow<'static, str>) {
        match self {
            Self::Json | Self::Protobuf => (format!("{kind}List").into(), api_version.to_owned().into()),
            Self::PartialObjectMetadataJson | Self::PartialObjectMetadataProtobuf => {
                ("PartialObjectMetadataList".into(), META_V1.into())
            }
        }
    }

    /// How an empty list's `items` is written: the API server's metadata
    /// lists have no items slice at all when empty (`null`), other lists an
    /// empty one. Protobuf writes no items either way.
    pub(crate) fn empty_items(self) -> &'static str {
        match self {
            Self::Json => "[]",
            Self::PartialObjectMetadataJson => "null",
            Self::Protobuf | Self::PartialObjectMetadataProtobuf => "",
        }
    }

    /// Whether the bodies are protobuf.
    pub(crate) fn is_protobuf(self) -> bool {
        matches!(self, Self::Protobuf | Self::PartialObjectMetadataProtobuf)
    }

    /// The JSON variant of the same form (itself for JSON variants).
    #[cfg(test)]
    pub(crate) fn as_json(self) -> Self {
        match self {
            Self::Json | Self::Protobuf => Self::Json,
            Self::PartialObjectMetadataJson | Self::PartialObjectMetadataProtobuf => Self::PartialObjectMetadataJson,
        }
    }

    /// The `variant` label of `watchmux_cache_encodes_total`.
    pub(crate) fn metric_label(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::PartialObjectMetadataJson => "partial_object_metadata_json",
            Self::Protobuf => "protobuf",
            Self::PartialObjectMetadataProtobuf => "partial_object_metadata_protobuf",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_variants_name_the_meta_types_and_json_the_resources_own() {
        assert_eq!(ContentVariant::Json.object_type("Pod", "v1"), ("Pod", "v1"));
        assert_eq!(
            ContentVariant::PartialObjectMetadataJson.object_type("Pod", "v1"),
            ("PartialObjectMetadata", "meta.k8s.io/v1")
        );
        let (kind, version) = ContentVariant::Json.list_type("Deployment", "apps/v1");
        assert_eq!((&*kind, &*version), ("DeploymentList", "apps/v1"));
        let (kind, version) = ContentVariant::PartialObjectMetadataJson.list_type("Deployment", "apps/v1");
        assert_eq!((&*kind, &*version), ("PartialObjectMetadataList", "meta.k8s.io/v1"));
        assert_eq!(ContentVariant::Json.empty_items(), "[]");
        assert_eq!(ContentVariant::PartialObjectMetadataJson.empty_items(), "null");
    }

    #[test]
    fn protobuf_watches_say_stream_watch_and_json_watches_do_not() {
        use Endpoint::{Get, List, Watch};
        for variant in [ContentVariant::Protobuf, ContentVariant::PartialObjectMetadataProtobuf] {
            assert_eq!(variant.content_type(Get), "application/vnd.kubernetes.protobuf");
            assert_eq!(variant.content_type(List), "application/vnd.kubernetes.protobuf");
            assert_eq!(variant.content_type(Watch), "application/vnd.kubernetes.protobuf;stream=watch");
            assert!(variant.is_protobuf());
        }
        assert_eq!(ContentVariant::Json.content_type(Watch), "application/json");
        assert_eq!(ContentVariant::Protobuf.as_json(), ContentVariant::Json);
        assert_eq!(ContentVariant::PartialObjectMetadataProtobuf.as_json(), ContentVariant::PartialObjectMetadataJson);
        let (kind, version) = ContentVariant::PartialObjectMetadataProtobuf.list_type("Pod", "v1");
        assert_eq!((&*kind, &*version), ("PartialObjectMetadataList", "meta.k8s.io/v1"));
    }
}
