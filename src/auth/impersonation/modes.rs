//! The API server's impersonation modes (kube-apiserver 1.36+, the
//! `ConstrainedImpersonation` feature, on by default), as lists of the
//! SubjectAccessReviews each mode needs.
//!
//! The API server tries, in order: `associated-node` (a service account
//! acting as the node its pod runs on), `arbitrary-node`, `serviceaccount`,
//! `user-info` (anyone else, with groups, uid and extras), and the legacy
//! mode last. A mode applies only to the identities its filter admits; an
//! applicable mode first needs `impersonate-on:<mode>:<verb>` on the request
//! itself, then `impersonate:<mode>` on each part of the wanted identity
//! (group `authentication.k8s.io`). The first mode whose checks all pass
//! decides the identity; if none does, the first failure is the answer.
//!
//! One difference, stricter or equal, never more permissive: the API server
//! first retries the mode that last worked for the same request shape, so
//! after a success its 403 may name that mode's check; watchmux always
//! reports the first failure in mode order.

use std::collections::BTreeMap;

use super::{Wanted, checks as legacy_checks, has_dns_subdomain_shape, is_dns_subdomain, resolve, service_account};
use crate::auth::reviews::{Attributes, ResourceAttributes};
use crate::auth::user::{AUTHENTICATED, UserInfo};

/// The extra key that ties a service account's token to the node its pod runs on.
const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";
/// What the associated-node mode sends instead of the requestor's extras.
const ASSOCIATED_NODE_KEYS: &str = "authentication.kubernetes.io/associated-node-keys";
/// From this many groups or extra values on, a wildcard review is tried first.
const MANY_CHECKS: usize = 4;
const GROUP: &str = "authentication.k8s.io";

/// One step of a mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The review must allow these attributes.
    Require(Attributes),
    /// Refused before any review, with this reason.
    Refuse(ResourceAttributes, String),
    /// Allowed at once if the first is; else each of the rest must be.
    WildcardOr(Attributes, Vec<Attributes>),
}

/// One mode that applies to a request: the reviews it needs, for whom, and
/// the identity it grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attempt {
    pub mode: &'static str,
    /// Whom the reviews are about: the requestor, or (associated-node) the
    /// requestor with its extras reduced to their keys.
    pub subject: UserInfo,
    pub steps: Vec<Step>,
    pub grants: UserInfo,
}

/// The modes that apply to `requestor` impersonating `wanted` for a request
/// with the attributes `request`, in the API server's order.
pub(crate) fn attempts(wanted: &Wanted, requestor: &UserInfo, request: &Attributes) -> Vec<Attempt> {
    let only_name = wanted.uid.is_empty() && wanted.groups.is_empty() && wanted.extra.is_empty();
    let node = node_name(&wanted.name);
    let sa = service_account(&wanted.name).is_some();
    let mut out = Vec::new();
    let impersonate_on =
        |mode: &str| Step::Require(request.with_verb(format!("impersonate-on:{mode}:{}", request.verb())));
    let node_identity = || UserInfo {
        name: wanted.name.clone(),
        groups: vec!["system:nodes".into(), AUTHENTICATED.into()],
        ..UserInfo::default()
    };

    if only_name
        && let Some(n) = node
        && service_account(&requestor.name).is_some()
        && requestor.extra.get(NODE_NAME_KEY).is_some_and(|v| v.len() == 1 && v[0] == n)
    {
        let keys: Vec<String> = requestor.extra.keys().cloned().collect();
        let subject =
            UserInfo { extra: BTreeMap::from([(ASSOCIATED_NODE_KEYS.to_owned(), keys)]), ..requestor.clone() };
        let check = constrained("impersonate:associated-node", "nodes", "", "*");
        out.push(Attempt {
            mode: "associated-node",
            subject,
            steps: vec![impersonate_on("associated-node"), Step::Require(check.into())],
            grants: node_identity(),
        });
    }
    if only_name && let Some(n) = node {
        let check = constrained("impersonate:arbitrary-node", "nodes", "", n);
        out.push(Attempt {
            mode: "arbitrary-node",
            subject: requestor.clone(),
            steps: vec![impersonate_on("arbitrary-node"), Step::Require(check.into())],
            grants: node_identity(),
        });
    }
    if only_name && let Some((namespace, name)) = service_account(&wanted.name) {
        let check = constrained("impersonate:serviceaccount", "serviceaccounts", namespace, name);
        out.push(Attempt {
            mode: "serviceaccount",
            subject: requestor.clone(),
            steps: vec![impersonate_on("serviceaccount"), Step::Require(check.into())],
            grants: resolve(wanted.clone()),
        });
    }
    if node.is_none() && !sa {
        let mut steps = vec![impersonate_on("user-info")];
        steps.extend(user_info_steps(wanted));
        out.push(Attempt { mode: "user-info", subject: requestor.clone(), steps, grants: resolve(wanted.clone()) });
    }
    out.push(Attempt {
        mode: "legacy",
        subject: requestor.clone(),
        steps: legacy_checks(wanted).into_iter().map(|c| Step::Require(c.into())).collect(),
        grants: resolve(wanted.clone()),
    });
    out
}

/// True when the modes that apply to `wanted` grant different identities:
/// a node named alone (the node modes grant `system:nodes`, the legacy mode
/// only what was asked). For every other identity each mode grants the same.
pub(crate) fn grants_depend_on_the_mode(wanted: &Wanted) -> bool {
    let only_name = wanted.uid.is_empty() && wanted.groups.is_empty() && wanted.extra.is_empty();
    only_name && node_name(&wanted.name).is_some()
}

/// The `impersonate:user-info` reviews of every part of the wanted identity,
/// with the API server's refusals that need no review.
fn user_info_steps(wanted: &Wanted) -> Vec<Step> {
    const VERB: &str = "impersonate:user-info";
    let mut steps = vec![Step::Require(constrained(VERB, "users", "", &wanted.name).into())];
    if !wanted.uid.is_empty() {
        steps.push(Step::Require(constrained(VERB, "uids", "", &wanted.uid).into()));
    }
    if !wanted.groups.is_empty() {
        if wanted.groups.iter().any(String::is_empty) {
            let reason = "impersonating the empty string group is not allowed";
            return with(steps, Step::Refuse(constrained(VERB, "groups", "", ""), reason.into()));
        }
        if wanted.groups.iter().any(|g| g == "system:masters") {
            let reason = "impersonating the system:masters group is not allowed";
            return with(steps, Step::Refuse(constrained(VERB, "groups", "", "system:masters"), reason.into()));
        }
        let each: Vec<Attributes> = wanted.groups.iter().map(|g| constrained(VERB, "groups", "", g).into()).collect();
        if wanted.groups.len() >= MANY_CHECKS {
            steps.push(Step::WildcardOr(constrained(VERB, "groups", "", "*").into(), each));
        } else {
            steps.extend(each.into_iter().map(Step::Require));
        }
    }
    if !wanted.extra.is_empty() {
        if let Err(reason) = validate_extra(&wanted.extra) {
            return with(steps, Step::Refuse(constrained(VERB, "userextras", "", ""), reason));
        }
        let each: Vec<Attributes> =
            wanted.extra.iter().flat_map(|(k, vs)| vs.iter().map(move |v| extra_check(VERB, k, v).into())).collect();
        let values: usize = wanted.extra.values().map(Vec::len).sum();
        if wanted.extra.len() >= MANY_CHECKS || values >= MANY_CHECKS {
            steps.push(Step::WildcardOr(extra_check(VERB, "*", "*").into(), each));
        } else {
            steps.extend(each.into_iter().map(Step::Require));
        }
    }
    steps
}

fn with(mut steps: Vec<Step>, last: Step) -> Vec<Step> {
    steps.push(last);
    steps
}

fn constrained(verb: &str, resource: &str, namespace: &str, name: &str) -> ResourceAttributes {
    ResourceAttributes {
        verb: verb.into(),
        group: GROUP.into(),
        version: "v1".into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        ..Default::default()
    }
}

fn extra_check(verb: &str, key: &str, value: &str) -> ResourceAttributes {
    ResourceAttributes { subresource: key.into(), ..constrained(verb, "userextras", "", value) }
}

/// `system:node:<name>` with a valid node name, as the API server's
/// isNodeUsername reads it.
fn node_name(user: &str) -> Option<&str> {
    user.strip_prefix("system:node:").filter(|n| is_dns_subdomain(n))
}

/// The API server's checks of impersonated extras in constrained modes
/// (`validateExtra`): a non-empty key that is a domain-prefixed path
/// (`IsDomainPrefixedPath`), lower case, with non-empty values.
fn validate_extra(extra: &BTreeMap<String, Vec<String>>) -> Result<(), String> {
    for (key, values) in extra {
        if key.is_empty() {
            return Err("impersonating the empty string key in extra is not allowed".into());
        }
        if let Err(invalid) = domain_prefixed_path(key) {
            return Err(format!("impersonating an invalid key in extra is not allowed: {invalid}"));
        }
        if key.to_lowercase() != *key {
            return Err(format!("impersonating a non-lowercase key in extra is not allowed: {}", go_quote(key)));
        }
        if values.is_empty() {
            return Err("impersonating empty values in extra is not allowed".into());
        }
        if values.iter().any(String::is_empty) {
            return Err("impersonating the empty string value in extra is not allowed".into());
        }
    }
    Ok(())
}

/// apimachinery's `IsDomainPrefixedPath` for the field `extra.key`, with its
/// aggregated message: the part before the first `/` a DNS subdomain (a
/// single label such as `acme` is one), the part after it non-empty and of
/// the characters of an HTTP path.
fn domain_prefixed_path(key: &str) -> Result<(), String> {
    const FIELD: &str = "extra.key";
    let Some((host, path)) = key.split_once('/').filter(|(h, p)| !h.is_empty() && !p.is_empty()) else {
        return Err(format!(
            "{FIELD}: Invalid value: {}: must be a domain-prefixed path (such as \"acme.io/foo\")",
            go_quote(key)
        ));
    };
    let mut errors = Vec::new();
    if host.len() > 253 {
        errors.push(format!("{FIELD}: Invalid value: {}: must be no more than 253 characters", go_quote(host)));
    }
    if !has_dns_subdomain_shape(host) {
        errors.push(format!(
            "{FIELD}: Invalid value: {}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', \
             regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            go_quote(host)
        ));
    }
    let path_char = |c: u8| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&c);
    if !path.bytes().all(path_char) {
        errors.push(format!(
            "{FIELD}: Invalid value: {}: Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
            go_quote(path)
        ));
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

/// A string as Go's `%q` prints it, for the printable ASCII it is almost
/// always made of (other characters are escaped as Rust escapes them).
fn go_quote(s: &str) -> String {
    format!("{s:?}")
}

#[cfg(test)]
mod tests {
    use super::super::is_dns_label;
    use super::*;
    use crate::auth::reviews::NonResourceAttributes;

    fn list_pods() -> Attributes {
        ResourceAttributes {
            verb: "list".into(),
            version: "v1".into(),
            resource: "pods".into(),
            namespace: "n".into(),
            ..Default::default()
        }
        .into()
    }

    fn bob() -> UserInfo {
        UserInfo { name: "bob".into(), groups: vec![AUTHENTICATED.into()], ..Default::default() }
    }

    fn modes(wanted: &Wanted, requestor: &UserInfo) -> Vec<&'static str> {
        attempts(wanted, requestor, &list_pods()).iter().map(|a| a.mode).collect()
    }

    fn named(name: &str) -> Wanted {
        Wanted { name: name.into(), ..Default::default() }
    }

    #[test]
    fn modes_apply_by_the_wanted_identity_in_the_api_servers_order() {
        assert_eq!(modes(&named("alice"), &bob()), ["user-info", "legacy"]);
        assert_eq!(modes(&named("system:node:n1"), &bob()), ["arbitrary-node", "legacy"]);
        assert_eq!(modes(&named("system:serviceaccount:ns:sa"), &bob()), ["serviceaccount", "legacy"]);
        // A node name that is no DNS subdomain is a plain user.
        assert_eq!(modes(&named("system:node:Bad_Node"), &bob()), ["user-info", "legacy"]);
        // With groups a node is no constrained node: only legacy applies.
        let node_with_groups = Wanted { groups: vec!["g".into()], ..named("system:node:n1") };
        assert_eq!(modes(&node_with_groups, &bob()), ["legacy"]);
        // A service account on node n1 may act as n1 by association.
        let sa = UserInfo {
            name: "system:serviceaccount:kube-system:agent".into(),
            extra: BTreeMap::from([(NODE_NAME_KEY.into(), vec!["n1".into()]), ("x.io/y".into(), vec!["z".into()])]),
            ..Default::default()
        };
        assert_eq!(modes(&named("system:node:n1"), &sa), ["associated-node", "arbitrary-node", "legacy"]);
        assert_eq!(modes(&named("system:node:n2"), &sa), ["arbitrary-node", "legacy"]);
        let associated = &attempts(&named("system:node:n1"), &sa, &list_pods())[0];
        assert_eq!(associated.subject.extra[ASSOCIATED_NODE_KEYS], [NODE_NAME_KEY, "x.io/y"]);
        assert_eq!(
            associated.steps[1],
            Step::Require(constrained("impersonate:associated-node", "nodes", "", "*").into())
        );
    }

    #[test]
    fn each_constrained_mode_first_needs_impersonate_on_the_request_itself() {
        for wanted in [named("alice"), named("system:node:n1"), named("system:serviceaccount:ns:sa")] {
            let first = &attempts(&wanted, &bob(), &list_pods())[0];
            let Step::Require(Attributes::Resource(r)) = &first.steps[0] else { panic!("{first:?}") };
            assert_eq!(r.verb, format!("impersonate-on:{}:list", first.mode));
            assert_eq!((r.resource.as_str(), r.namespace.as_str()), ("pods", "n"));
        }
        let path = Attributes::NonResource(NonResourceAttributes { path: "/version".into(), verb: "get".into() });
        let first = &attempts(&named("alice"), &bob(), &path)[0];
        assert_eq!(
            first.steps[0],
            Step::Require(Attributes::NonResource(NonResourceAttributes {
                path: "/version".into(),
                verb: "impersonate-on:user-info:get".into()
            }))
        );
    }

    #[test]
    fn node_and_service_account_modes_grant_fixed_groups() {
        let node = &attempts(&named("system:node:n1"), &bob(), &list_pods())[0];
        assert_eq!(node.grants.groups, ["system:nodes", AUTHENTICATED]);
        assert_eq!(node.steps[1], Step::Require(constrained("impersonate:arbitrary-node", "nodes", "", "n1").into()));
        let sa = &attempts(&named("system:serviceaccount:ns:sa"), &bob(), &list_pods())[0];
        assert_eq!(sa.grants.groups, ["system:serviceaccounts", "system:serviceaccounts:ns", AUTHENTICATED]);
        assert_eq!(
            sa.steps[1],
            Step::Require(constrained("impersonate:serviceaccount", "serviceaccounts", "ns", "sa").into())
        );
    }

    #[test]
    fn user_info_refuses_system_masters_and_bad_extras_and_uses_wildcards_for_many() {
        let masters = Wanted { groups: vec!["dev".into(), "system:masters".into()], ..named("alice") };
        let steps = &attempts(&masters, &bob(), &list_pods())[0].steps;
        assert!(
            matches!(steps.last(), Some(Step::Refuse(r, why)) if r.name == "system:masters" && why.contains("system:masters group"))
        );
        let many = Wanted { groups: (0..4).map(|i| format!("g{i}")).collect(), ..named("alice") };
        let steps = &attempts(&many, &bob(), &list_pods())[0].steps;
        assert!(
            matches!(steps.last(), Some(Step::WildcardOr(Attributes::Resource(w), each)) if w.name == "*" && each.len() == 4)
        );
        let bad_key = Wanted { extra: BTreeMap::from([("scopes".into(), vec!["x".into()])]), ..named("alice") };
        let steps = &attempts(&bad_key, &bob(), &list_pods())[0].steps;
        assert!(
            matches!(steps.last(), Some(Step::Refuse(r, why)) if r.resource == "userextras" && why.contains("domain-prefixed"))
        );
        let good = Wanted { extra: BTreeMap::from([("acme.io/scope".into(), vec!["x".into()])]), ..named("alice") };
        let steps = &attempts(&good, &bob(), &list_pods())[0].steps;
        let expected = extra_check("impersonate:user-info", "acme.io/scope", "x");
        assert_eq!(steps.last(), Some(&Step::Require(expected.into())));
        // Legacy mode keeps its own, unconstrained checks.
        let legacy = attempts(&masters, &bob(), &list_pods()).pop().unwrap();
        assert_eq!(legacy.mode, "legacy");
        assert!(
            legacy.steps.iter().all(|s| matches!(s, Step::Require(Attributes::Resource(r)) if r.verb == "impersonate"))
        );
    }

    #[test]
    fn extra_keys_are_validated_as_the_api_server_validates_them() {
        let check = |key: &str| validate_extra(&BTreeMap::from([(key.to_owned(), vec!["v".to_owned()])]));
        // A single-label domain is a domain; the path half has its own charset.
        for ok in ["acme/foo", "acme.io/foo", "a.b/c/d", "x/a:b;c=d", "x/%2f"] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            check("acme.io/foo bar").unwrap_err(),
            "impersonating an invalid key in extra is not allowed: extra.key: Invalid value: \"foo bar\": Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')"
        );
        assert_eq!(
            check("scopes").unwrap_err(),
            "impersonating an invalid key in extra is not allowed: extra.key: Invalid value: \"scopes\": must be a domain-prefixed path (such as \"acme.io/foo\")"
        );
        assert!(
            check("Acme.io/foo").unwrap_err().contains("Invalid value: \"Acme.io\": a lowercase RFC 1123 subdomain")
        );
        assert!(check("/foo").unwrap_err().contains("must be a domain-prefixed path"));
        assert!(check("acme.io/").unwrap_err().contains("must be a domain-prefixed path"));
        // Upper case in the path half passes the path check, then fails the case check.
        assert_eq!(
            check("acme.io/Foo").unwrap_err(),
            "impersonating a non-lowercase key in extra is not allowed: \"acme.io/Foo\""
        );
        // Both halves wrong: both errors, aggregated.
        let both = check("A_B/a b").unwrap_err();
        assert!(both.contains(": [extra.key: Invalid value: \"A_B\"") && both.ends_with("]"), "{both}");
        let long_host = format!("{}/x", "a".repeat(254));
        assert!(check(&long_host).unwrap_err().contains("must be no more than 253 characters"));
    }

    #[test]
    fn only_a_node_named_alone_gets_different_identities_by_mode() {
        assert!(grants_depend_on_the_mode(&named("system:node:n1")));
        let with_group = Wanted { groups: vec!["g".into()], ..named("system:node:n1") };
        for wanted in [named("alice"), named("system:serviceaccount:ns:sa"), with_group] {
            assert!(!grants_depend_on_the_mode(&wanted), "{wanted:?}");
            // ...because every mode that applies grants the same identity.
            let grants: Vec<_> = attempts(&wanted, &bob(), &list_pods()).into_iter().map(|a| a.grants).collect();
            assert!(grants.windows(2).all(|w| w[0] == w[1]), "{grants:?}");
        }
        let node: Vec<_> =
            attempts(&named("system:node:n1"), &bob(), &list_pods()).into_iter().map(|a| a.grants).collect();
        assert_ne!(node[0], node[1]);
    }

    #[test]
    fn long_node_names_are_nodes_not_users() {
        let long = format!("system:node:{}", "n".repeat(70));
        assert_eq!(modes(&named(&long), &bob()), ["arbitrary-node", "legacy"]);
        let long_sa = format!("system:serviceaccount:ns:{}", "s".repeat(70));
        assert_eq!(modes(&named(&long_sa), &bob()), ["serviceaccount", "legacy"]);
    }

    #[test]
    fn dns_helpers() {
        assert!(is_dns_label("a-1") && !is_dns_label("A") && !is_dns_label("-a"));
        assert!(is_dns_subdomain("a.b-c") && !is_dns_subdomain("a..b") && !is_dns_subdomain(""));
    }
}
