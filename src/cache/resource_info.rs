//! What the cache knows about one resource from discovery: its group,
//! version, kind, scope and verbs, and the paths and names derived from them.

/// One resource of the API, as `/api/v1` or `/apis/{group}/{version}` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceInfo {
    /// `""` for the core group.
    pub group: String,
    pub version: String,
    /// Plural resource name, e.g. `pods`.
    pub resource: String,
    /// Singular name, e.g. `pod` (what kubectl also accepts).
    pub singular: String,
    /// Short names, e.g. `po`.
    pub short_names: Vec<String>,
    pub kind: String,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

impl ResourceInfo {
    /// `v1` or `apps/v1`, the `apiVersion` of the resource's objects.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// `configmaps` or `deployments.apps`, as the API server names a resource in messages.
    pub(crate) fn qualified_resource(&self) -> String {
        if self.group.is_empty() { self.resource.clone() } else { format!("{}.{}", self.resource, self.group) }
    }

    /// Only resources that can be listed and watched can be cached.
    pub(crate) fn is_cacheable(&self) -> bool {
        self.verbs.iter().any(|v| v == "list") && self.verbs.iter().any(|v| v == "watch")
    }

    /// The collection path, cluster-wide or in one namespace.
    pub(crate) fn collection_path(&self, namespace: Option<&str>) -> String {
        let prefix = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) if self.namespaced => format!("{prefix}/namespaces/{ns}/{}", self.resource),
            _ => format!("{prefix}/{}", self.resource),
        }
    }

    /// True for the API server's own built-in groups, whose typed lists carry
    /// items without `kind` and `apiVersion`. Custom resources (and aggregated
    /// APIs served as unstructured) keep them on every item.
    pub(crate) fn is_builtin_group(&self) -> bool {
        const BUILTIN: &[&str] = &[
            "",
            "admissionregistration.k8s.io",
            "apiextensions.k8s.io",
            "apiregistration.k8s.io",
            "apps",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "autoscaling",
            "batch",
            "certificates.k8s.io",
            "coordination.k8s.io",
            "discovery.k8s.io",
            "events.k8s.io",
            "flowcontrol.apiserver.k8s.io",
            "internal.apiserver.k8s.io",
            "networking.k8s.io",
            "node.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "resource.k8s.io",
            "scheduling.k8s.io",
            "storage.k8s.io",
            "storagemigration.k8s.io",
        ];
        BUILTIN.contains(&self.group.as_str())
    }
}

#[cfg(test)]
pub(crate) fn test_info(group: &str, resource: &str, kind: &str, namespaced: bool) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        singular: kind.to_lowercase(),
        short_names: Vec::new(),
        kind: kind.into(),
        namespaced,
        verbs: ["get", "list", "watch"].map(String::from).to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names() {
        let cm = test_info("", "configmaps", "ConfigMap", true);
        assert_eq!(cm.collection_path(Some("ns")), "/api/v1/namespaces/ns/configmaps");
        assert_eq!(cm.collection_path(None), "/api/v1/configmaps");
        assert_eq!(cm.api_version(), "v1");
        assert_eq!(cm.qualified_resource(), "configmaps");
        let d = test_info("apps", "deployments", "Deployment", true);
        assert_eq!(d.collection_path(Some("x")), "/apis/apps/v1/namespaces/x/deployments");
        assert_eq!(d.qualified_resource(), "deployments.apps");
        let n = test_info("", "nodes", "Node", false);
        assert_eq!(n.collection_path(Some("ignored")), "/api/v1/nodes");
    }
}
