//! Why a read the cache could have answered passes through to the API
//! server: one typed reason per decision, whose [`Reason::as_str`] is the
//! `reason` label of `watchmux_cache_passthrough_total`. Passing through on
//! any doubt is the rule; each doubt has a name here.

use crate::negotiate::PassthroughReason;

/// Why a read passes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// Not a GET, list or watch of a resource (writes, subresources,
    /// non-resource paths): never the cache's, and not counted.
    NotARead,
    /// A person's client (curl, a browser) or `?pretty`: the API server
    /// indents its JSON for them.
    Pretty,
    /// A query parameter the cache does not implement.
    Parameters,
    /// A malformed parameter: the API server's own error is the answer.
    InvalidParameters,
    /// A resourceVersion that is not a number.
    InvalidResourceVersion,
    /// A legacy watch path naming an object and a field selector too.
    NameAndFieldSelector,
    /// The Accept header asks for what the cache does not produce.
    Negotiated(PassthroughReason),
    /// The resource is not in `--cache-resources` (or is turned off).
    NotCached,
    /// The upstream does not serve it, or it cannot be listed and watched.
    NotCacheable,
    /// Discovery failed.
    Discovery,
    /// The cache has not completed its initial list in time.
    NotReady,
    /// A selector the API server would refuse.
    InvalidSelector,
    /// A path the API server has no route for.
    NoRoute,
    /// Selectors outside a scoped cache's scope.
    OutsideScope,
    /// The caller was refused this read a little while ago: the API server
    /// decides again now, since rights can have been granted since (a node's
    /// pod bound to it a moment after its kubelet first asked).
    RecentlyDenied,
    /// A watch form the cache leaves to the API server.
    WatchParameters,
    /// A consistent read whose freshness could not be proven in time.
    ConsistentRead,
    /// A GET without a resourceVersion: the API server reads it from etcd,
    /// at about the cost of the cache's own proof of freshness.
    ConsistentGet,
    /// A GET with list-only parameters.
    GetParameters,
    /// A list form the cache leaves to the API server.
    ListParameters,
    /// A continue token the cache did not issue.
    Continue,
    /// The snapshot a continue token points to is no longer kept.
    SnapshotGone,
    /// An exact-version list the cache cannot serve.
    Exact,
    /// A resourceVersion the cache has not reached (another resource's
    /// write, a bookmark, a continue token): the API server answers at once
    /// if it has it, and with its own 504 if not (`freshness::reached`).
    AheadOfCache,
    /// The client takes protobuf and no JSON of the same form, and an object
    /// of the answer has no protobuf form (a custom resource, or one the
    /// encoder refuses).
    NoProtobufForm,
    /// An error answer to a PartialObjectMetadata protobuf request: the API
    /// server negotiates its error serializer without the `as=` clauses
    /// (JSON, or a 406 in JSON), which the cache leaves to it.
    MetadataProtobufError,
    /// A watch older than the cache's history that its backfill did not
    /// serve (`resource/backfill.rs`: a bound, a failure, or a transition
    /// the backfill cannot tell for its selectors).
    Backfill,
}

impl Reason {
    /// Every reason, for the metric's documentation and tests.
    #[cfg(test)]
    pub(crate) const ALL: &[Reason] = &[
        Reason::NotARead,
        Reason::Pretty,
        Reason::Parameters,
        Reason::InvalidParameters,
        Reason::InvalidResourceVersion,
        Reason::NameAndFieldSelector,
        Reason::Negotiated(PassthroughReason::Table),
        Reason::Negotiated(PassthroughReason::Protobuf),
        Reason::Negotiated(PassthroughReason::OtherMediaType),
        Reason::Negotiated(PassthroughReason::Cbor),
        Reason::Negotiated(PassthroughReason::NotAcceptable),
        Reason::NotCached,
        Reason::NotCacheable,
        Reason::Discovery,
        Reason::NotReady,
        Reason::InvalidSelector,
        Reason::NoRoute,
        Reason::OutsideScope,
        Reason::RecentlyDenied,
        Reason::WatchParameters,
        Reason::ConsistentRead,
        Reason::ConsistentGet,
        Reason::GetParameters,
        Reason::ListParameters,
        Reason::Continue,
        Reason::SnapshotGone,
        Reason::Exact,
        Reason::AheadOfCache,
        Reason::NoProtobufForm,
        Reason::MetadataProtobufError,
        Reason::Backfill,
    ];

    /// The metric label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::NotARead => "not_a_read",
            Self::Pretty => "pretty",
            Self::Parameters => "parameters",
            Self::InvalidParameters => "invalid_parameters",
            Self::InvalidResourceVersion => "invalid_resource_version",
            Self::NameAndFieldSelector => "name_and_field_selector",
            Self::Negotiated(r) => r.as_str(),
            Self::NotCached => "not_cached",
            Self::NotCacheable => "not_cacheable",
            Self::Discovery => "discovery",
            Self::NotReady => "not_ready",
            Self::InvalidSelector => "invalid_selector",
            Self::NoRoute => "no_route",
            Self::OutsideScope => "outside_scope",
            Self::RecentlyDenied => "recently_denied",
            Self::WatchParameters => "watch_parameters",
            Self::ConsistentRead => "consistent_read",
            Self::ConsistentGet => "consistent_get",
            Self::GetParameters => "get_parameters",
            Self::ListParameters => "list_parameters",
            Self::Continue => "continue",
            Self::SnapshotGone => "snapshot_gone",
            Self::Exact => "exact",
            Self::AheadOfCache => "ahead_of_cache",
            Self::NoProtobufForm => "no_protobuf_form",
            Self::MetadataProtobufError => "metadata_protobuf_error",
            Self::Backfill => "backfill",
        }
    }

    /// Whether the pass-through is counted: reads only.
    pub(crate) fn is_counted(self) -> bool {
        self != Self::NotARead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_label() {
        let mut labels: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        labels.sort();
        let before = labels.len();
        labels.dedup();
        assert_eq!(labels.len(), before, "two reasons share a label");
        assert!(labels.iter().all(|l| l.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
    }
}
