//! The forms the cache writes, and everything that differs between them:
//! the Content-Type, the `kind` and `apiVersion` written for objects and
//! lists, the empty-list quirk and the metric label. Each variant's rules
//! live here, in one type, so a new form (protobuf) is one more arm in each
//! method rather than a search through the encoders.

use std::borrow::Cow;

/// The media type of every response the cache writes today.
const JSON: &str = "application/json";

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
        }
    }

    /// The `kind` and `apiVersion` an object of the resource's `kind` and
    /// `api_version` is written with (a watch event's object, a bookmark).
    pub(crate) fn object_type<'a>(self, kind: &'a str, api_version: &'a str) -> (&'a str, &'a str) {
        match self {
            Self::Json => (kind, api_version),
            Self::PartialObjectMetadataJson => ("PartialObjectMetadata", META_V1),
        }
    }

    /// The `kind` and `apiVersion` of a list of the resource's `kind`.
    pub(crate) fn list_type(self, kind: &str, api_version: &str) -> (Cow<'static, str>, Cow<'static, str>) {
        match self {
            Self::Json => (format!("{kind}List").into(), api_version.to_owned().into()),
            Self::PartialObjectMetadataJson => ("PartialObjectMetadataList".into(), META_V1.into()),
        }
    }

    /// How an empty list's `items` is written: the API server's metadata
    /// lists have no items slice at all when empty (`null`), other lists an
    /// empty one.
    pub(crate) fn empty_items(self) -> &'static str {
        match self {
            Self::Json => "[]",
            Self::PartialObjectMetadataJson => "null",
        }
    }

    /// The `variant` label of `watchmux_cache_encodes_total`.
    pub(crate) fn metric_label(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::PartialObjectMetadataJson => "partial_object_metadata_json",
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
}
