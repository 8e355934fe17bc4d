//! Who a request that passes through is upstream: the decision delegated
//! auth makes for each request ([`super::Delegated::upstream_identity`]),
//! which the pass-through then writes into the request's headers, last.

use http::HeaderValue;

use crate::upstream::UpstreamCredential;

use super::Caller;

/// The identity a request goes upstream with.
#[derive(Debug, Clone)]
pub(crate) enum UpstreamIdentity {
    /// watchmux's own credentials (trusted-local: every client is watchmux).
    /// A client's `Impersonate-*` headers stay: the API server checks
    /// watchmux's own right to impersonate, as for any client of it.
    Watchmux,
    /// watchmux's credentials, impersonating the authenticated caller
    /// (delegated mode with impersonation rights).
    Impersonate(Caller),
    /// The client's own `Authorization` header, sent on a connection that
    /// carries no client certificate of watchmux's (delegated mode without
    /// impersonation rights: a node-local watchmux holding node credentials).
    /// The client's own `Impersonate-*` headers stay, for the API server to
    /// judge against the client's own identity, as it would directly.
    ClientCredentials(HeaderValue),
    /// No credentials at all: the API server sees an anonymous request, as
    /// it would from the client directly (impersonation headers included).
    Anonymous,
}

impl UpstreamIdentity {
    /// The credentials the upstream client must attach for this identity.
    pub(crate) fn credential(&self) -> UpstreamCredential {
        match self {
            Self::Watchmux | Self::Impersonate(_) => UpstreamCredential::Watchmux,
            Self::ClientCredentials(value) => UpstreamCredential::Header(value.clone()),
            Self::Anonymous => UpstreamCredential::None,
        }
    }
}
