//! `--cache-resources` names resolved as kubectl resolves a resource name:
//! the plural (`deployments`), the singular (`deployment`) or a short name
//! (`deploy`), with the group optional (`deployments.apps`). A name that
//! several groups serve goes to the core group if it is one of them, else
//! to the first group in the upstream's discovery order, as kubectl's
//! priority mapper does (`events` is the core group's, not events.k8s.io's).
//!
//! What cannot be resolved is said, not ignored: an unqualified name no
//! group serves, or a qualified one whose group is served without it, is a
//! start-up error naming it (it is a typo); a qualified name of a group the
//! upstream does not serve yet waits for it (a CRD installed later), with a
//! warning and a metric.

use std::collections::HashSet;

use crate::cache::resource_info::ResourceInfo;

/// A resource and its group, as `--cache-resources` names them: `pods`,
/// `endpointslices.discovery.k8s.io`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn parse(s: &str) -> Self {
        match s.split_once('.') {
            Some((resource, group)) => Self { group: group.to_owned(), resource: resource.to_owned() },
            None => Self { group: String::new(), resource: s.to_owned() },
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() { f.write_str(&self.resource) } else { write!(f, "{}.{}", self.resource, self.group) }
    }
}

/// One `--cache-resources` entry as written: `name`, `name.group` or
/// `name.version.group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceName {
    /// Plural, singular or short name.
    pub name: String,
    /// The group, when the entry names one (`""` is never written: the core
    /// group's resources are named without one).
    pub group: Option<String>,
}

impl ResourceName {
    /// Reads `name[.version].group` as kubectl does: a middle part that
    /// looks like a version (`v1`, `v1beta1`) is a version, and dropped.
    pub(crate) fn parse(entry: &str) -> Self {
        match entry.split_once('.') {
            None => Self { name: entry.to_owned(), group: None },
            Some((name, rest)) => {
                let group = match rest.split_once('.') {
                    Some((version, group)) if looks_like_version(version) => group,
                    _ => rest,
                };
                Self { name: name.to_owned(), group: Some(group.to_owned()) }
            }
        }
    }

    /// The name taken literally, as a plural in its group (the core group
    /// without one): what is cached until the upstream can be asked.
    pub(crate) fn literal(&self) -> GroupResource {
        GroupResource { group: self.group.clone().unwrap_or_default(), resource: self.name.clone() }
    }
}

impl std::fmt::Display for ResourceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.group {
            Some(group) => write!(f, "{}.{group}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// `v1`, `v2beta3`, `v1alpha1`: Kubernetes version names.
fn looks_like_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else { return false };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    match &rest[digits..] {
        "" => true,
        tail => ["alpha", "beta"].iter().any(|stage| {
            tail.strip_prefix(stage).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        }),
    }
}

/// What a name resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// The resource it names.
    Resource(GroupResource),
    /// Its group is not served (yet): kept literally, resolved again later.
    Pending,
}

/// Why a name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unresolvable {
    #[error("--cache-resources {0}: the server has no resource of that name (plural, singular or short name)")]
    Unknown(String),
    #[error("--cache-resources {0}: {1} cannot be both listed and watched, so it cannot be cached")]
    NotCacheable(String, GroupResource),
}

/// Resolves `name` against `served`: every resource of each group's
/// preferred version, in the upstream's discovery order (core group first).
/// `groups` are the groups the upstream serves.
pub(crate) fn resolve(
    name: &ResourceName,
    served: &[ResourceInfo],
    groups: &HashSet<String>,
) -> Result<Resolved, Unresolvable> {
    let lower = name.name.to_lowercase();
    let matches = |r: &&ResourceInfo| {
        name.group.as_ref().is_none_or(|g| *g == r.group)
            && (r.resource == lower || r.singular == lower || r.short_names.contains(&lower))
    };
    // Exact plural names first (a short name of one resource never hides
    // another's plural), then the core group, then discovery order.
    let candidates: Vec<&ResourceInfo> = served.iter().filter(matches).collect();
    let chosen = candidates
        .iter()
        .find(|r| r.resource == lower && r.group.is_empty())
        .or_else(|| candidates.iter().find(|r| r.resource == lower))
        .or_else(|| candidates.iter().find(|r| r.group.is_empty()))
        .or_else(|| candidates.first());
    match chosen {
        Some(r) => {
            let gr = GroupResource { group: r.group.clone(), resource: r.resource.clone() };
            if r.is_cacheable() {
                Ok(Resolved::Resource(gr))
            } else {
                Err(Unresolvable::NotCacheable(name.to_string(), gr))
            }
        }
        None => match &name.group {
            Some(group) if !groups.contains(group) => Ok(Resolved::Pending),
            _ => Err(Unresolvable::Unknown(name.to_string())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::resource_info::test_info;

    fn info(group: &str, resource: &str, kind: &str, short: &[&str]) -> ResourceInfo {
        let mut i = test_info(group, resource, kind, true);
        i.short_names = short.iter().map(|s| s.to_string()).collect();
        i
    }

    fn served() -> Vec<ResourceInfo> {
        let mut bindings = info("", "bindings", "Binding", &[]);
        bindings.verbs = vec!["create".into()];
        vec![
            info("", "pods", "Pod", &["po"]),
            info("", "events", "Event", &["ev"]),
            info("", "services", "Service", &["svc"]),
            bindings,
            info("apps", "deployments", "Deployment", &["deploy"]),
            info("events.k8s.io", "events", "Event", &["ev"]),
            info("discovery.k8s.io", "endpointslices", "EndpointSlice", &[]),
        ]
    }

    fn groups() -> HashSet<String> {
        ["", "apps", "events.k8s.io", "discovery.k8s.io"].map(String::from).into()
    }

    fn resolved(entry: &str) -> Result<Resolved, Unresolvable> {
        resolve(&ResourceName::parse(entry), &served(), &groups())
    }

    fn gr(group: &str, resource: &str) -> Resolved {
        Resolved::Resource(GroupResource { group: group.into(), resource: resource.into() })
    }

    #[test]
    fn resource_names_put_the_group_after_the_first_dot() {
        assert_eq!(GroupResource::parse("pods"), GroupResource { group: "".into(), resource: "pods".into() });
        let es = GroupResource::parse("endpointslices.discovery.k8s.io");
        assert_eq!((es.group.as_str(), es.resource.as_str()), ("discovery.k8s.io", "endpointslices"));
        assert_eq!(es.to_string(), "endpointslices.discovery.k8s.io");
    }

    #[test]
    fn plural_singular_short_and_qualified_names_resolve_as_kubectl_resolves_them() {
        for entry in ["deployments", "deployment", "deploy", "Deployments", "deployments.apps", "deployments.v1.apps"] {
            assert_eq!(resolved(entry), Ok(gr("apps", "deployments")), "{entry}");
        }
        assert_eq!(resolved("po"), Ok(gr("", "pods")));
        assert_eq!(resolved("endpointslices.discovery.k8s.io"), Ok(gr("discovery.k8s.io", "endpointslices")));
    }

    #[test]
    fn a_name_two_groups_serve_goes_to_the_core_group_unless_qualified() {
        assert_eq!(resolved("events"), Ok(gr("", "events")));
        assert_eq!(resolved("ev"), Ok(gr("", "events")));
        assert_eq!(resolved("events.events.k8s.io"), Ok(gr("events.k8s.io", "events")));
    }

    #[test]
    fn typos_are_refused_and_unserved_groups_wait() {
        assert_eq!(resolved("podz"), Err(Unresolvable::Unknown("podz".into())));
        assert_eq!(resolved("widgets.apps"), Err(Unresolvable::Unknown("widgets.apps".into())), "apps is served");
        assert_eq!(resolved("widgets.example.com"), Ok(Resolved::Pending), "a CRD installed later");
        assert!(matches!(resolved("bindings"), Err(Unresolvable::NotCacheable(..))));
    }

    #[test]
    fn versions_in_the_middle_are_dropped_but_dotted_groups_are_kept() {
        let parsed = ResourceName::parse("deployments.v1.apps");
        assert_eq!(parsed, ResourceName { name: "deployments".into(), group: Some("apps".into()) });
        let dotted = ResourceName::parse("endpointslices.discovery.k8s.io");
        assert_eq!(dotted.group.as_deref(), Some("discovery.k8s.io"));
        let beta = ResourceName::parse("flowschemas.v1beta3.flowcontrol.apiserver.k8s.io");
        assert_eq!(beta.group.as_deref(), Some("flowcontrol.apiserver.k8s.io"));
        assert!(!looks_like_version("vast") && !looks_like_version("v") && !looks_like_version("v1beta"));
        assert_eq!(ResourceName::parse("pods").literal(), GroupResource { group: "".into(), resource: "pods".into() });
    }
}
