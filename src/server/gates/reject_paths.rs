//! trusted-local's path filter, as `kubectl proxy --reject-paths`.
//!
//! In trusted-local mode every client acts with watchmux's credentials, so
//! what may be done through it is watchmux's rights, exec into any pod
//! included. `kubectl proxy`, the tool this mode imitates, refuses exec and
//! attach by default; so does watchmux (`--reject-paths`, the same default
//! and syntax: regular expressions matched, unanchored, against the
//! request's decoded path). Refused requests get `kubectl proxy`'s plain
//! 403 before anything else is done. Delegated mode authorizes every
//! request with the caller's own rights instead, and does not filter.

use std::sync::Arc;

use regex::RegexSet;

/// `kubectl proxy`'s default `--reject-paths` (kubectl's
/// `DefaultPathRejectRE`).
pub(crate) const DEFAULT_REJECT_PATHS: &str = r"^/api/.*/pods/.*/exec,^/api/.*/pods/.*/attach";

/// Paths trusted-local refuses. Shared, as [`super::hosts::AcceptHosts`].
#[derive(Debug, Clone)]
pub struct RejectPaths(Arc<RegexSet>);

#[derive(Debug, thiserror::Error)]
#[error("--reject-paths: {0}")]
pub struct RejectPathsError(#[source] regex::Error);

impl RejectPaths {
    /// The patterns, empty ones skipped (`--reject-paths=` refuses nothing).
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(patterns: I) -> Result<Self, RejectPathsError> {
        let patterns: Vec<String> =
            patterns.into_iter().map(|p| p.as_ref().trim().to_owned()).filter(|p| !p.is_empty()).collect();
        RegexSet::new(patterns).map(|set| Self(Arc::new(set))).map_err(RejectPathsError)
    }

    /// True when the request's path, decoded as Go's `URL.Path` (what
    /// `kubectl proxy` matches), is refused. A path that does not decode is
    /// the API server's 400 elsewhere, never a way around the filter.
    pub fn rejects(&self, raw_path: &str) -> bool {
        match crate::request::decode_path(raw_path) {
            Some(path) => self.0.is_match(&path),
            None => !self.0.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_and_attach_are_refused_by_default_as_by_kubectl_proxy() {
        let reject = RejectPaths::new(DEFAULT_REJECT_PATHS.split(',')).unwrap();
        for path in [
            "/api/v1/namespaces/a/pods/p/exec",
            "/api/v1/namespaces/a/pods/p/attach",
            // Decoded first, as Go's URL.Path: an escape is no way around it.
            "/api/v1/namespaces/a/pods/p/ex%65c",
            "/api/v1/namespaces/a/pods/p%2Fexec",
        ] {
            assert!(reject.rejects(path), "{path}");
        }
        for path in [
            "/api/v1/namespaces/a/pods/p/log",
            "/api/v1/namespaces/a/pods/p/portforward",
            "/api/v1/namespaces/a/pods",
            "/apis/apps/v1/namespaces/a/deployments/exec",
        ] {
            assert!(!reject.rejects(path), "{path}");
        }
        let none = RejectPaths::new([""]).unwrap();
        assert!(!none.rejects("/api/v1/namespaces/a/pods/p/exec"));
        assert!(RejectPaths::new(["("]).is_err());
    }
}
