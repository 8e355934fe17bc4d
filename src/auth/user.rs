//! The identity of a caller, as kube-apiserver's authenticators produce it:
//! name, uid, groups and extra. watchmux hands it on unchanged, to
//! SubjectAccessReviews and as impersonation headers, so the API server's
//! authorizers (RBAC, Node, webhooks) see the same caller either way.

use std::collections::BTreeMap;

/// The anonymous user and its group, as the API server names them.
pub(crate) const ANONYMOUS: &str = "system:anonymous";
pub(crate) const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The group the API server adds to every authenticated user.
pub(crate) const AUTHENTICATED: &str = "system:authenticated";
/// The extra key under which the API server records which credential was used.
pub(crate) const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// Who a request is from. Holds no credential: safe to log and to cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Sorted by key, so equal identities hash and compare equal.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub(crate) fn anonymous() -> Self {
        Self { name: ANONYMOUS.into(), groups: vec![UNAUTHENTICATED.into()], ..Self::default() }
    }

    /// Adds `system:authenticated` unless the user already has it (or is
    /// anonymous), as the API server does after authentication.
    pub(crate) fn with_authenticated_group(mut self) -> Self {
        if self.name != ANONYMOUS && !self.groups.iter().any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED) {
            self.groups.push(AUTHENTICATED.into());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticated_group_is_added_once_and_never_to_anonymous() {
        let u = UserInfo { name: "alice".into(), groups: vec!["dev".into()], ..Default::default() };
        let u = u.with_authenticated_group().with_authenticated_group();
        assert_eq!(u.groups, vec!["dev", AUTHENTICATED]);
        assert_eq!(UserInfo::anonymous().with_authenticated_group().groups, vec![UNAUTHENTICATED]);
    }
}
