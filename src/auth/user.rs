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

    /// True when `other` is the same principal to the API server's
    /// authorizers: the same name, uid, groups (in any order) and extras,
    /// except which credential proved it (`credential-id`: a renewed
    /// certificate with the same subject is the same identity). A name alone
    /// is not enough: `CN=system:node:n1, O=tenants` is not the node.
    pub(crate) fn is_same_principal(&self, other: &UserInfo) -> bool {
        fn sorted(groups: &[String]) -> Vec<&str> {
            let mut g: Vec<&str> = groups.iter().map(String::as_str).collect();
            g.sort_unstable();
            g.dedup();
            g
        }
        fn extras(u: &UserInfo) -> impl Iterator<Item = (&String, &Vec<String>)> {
            u.extra.iter().filter(|(k, _)| k.as_str() != CREDENTIAL_ID)
        }
        self.name == other.name
            && self.uid == other.uid
            && sorted(&self.groups) == sorted(&other.groups)
            && extras(self).eq(extras(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(groups: &[&str]) -> UserInfo {
        let groups = groups.iter().map(|g| (*g).to_owned()).collect();
        UserInfo { name: "system:node:n1".into(), groups, ..Default::default() }
    }

    #[test]
    fn the_same_principal_needs_the_whole_identity() {
        let own = node(&["system:nodes", AUTHENTICATED]);
        assert!(own.is_same_principal(&node(&[AUTHENTICATED, "system:nodes"])));
        // The same name in other groups is someone else to the authorizers.
        assert!(!own.is_same_principal(&node(&["tenants", AUTHENTICATED])));
        assert!(!own.is_same_principal(&node(&["system:nodes", "tenants", AUTHENTICATED])));
        assert!(!own.is_same_principal(&node(&[AUTHENTICATED])));
        assert!(!own.is_same_principal(&UserInfo { uid: "u".into(), ..own.clone() }));
        // Which certificate proved it does not matter; other extras do.
        let with = |key: &str, value: &str| UserInfo {
            extra: [(key.to_owned(), vec![value.to_owned()])].into(),
            ..own.clone()
        };
        assert!(with(CREDENTIAL_ID, "X509SHA256=aa").is_same_principal(&with(CREDENTIAL_ID, "X509SHA256=bb")));
        assert!(!own.is_same_principal(&with("authentication.kubernetes.io/pod-name", "p")));
    }

    #[test]
    fn authenticated_group_is_added_once_and_never_to_anonymous() {
        let u = UserInfo { name: "alice".into(), groups: vec!["dev".into()], ..Default::default() };
        let u = u.with_authenticated_group().with_authenticated_group();
        assert_eq!(u.groups, vec!["dev", AUTHENTICATED]);
        assert_eq!(UserInfo::anonymous().with_authenticated_group().groups, vec![UNAUTHENTICATED]);
    }
}
