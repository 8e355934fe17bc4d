//! Discovery: which resources the upstream serves, with their kind, scope
//! and verbs, read from the upstream's discovery documents.
//!
//! Requests name group versions and resources; any string can stand there,
//! also in a request that is then refused. So nothing a request names is
//! fetched or kept unless the upstream lists it:
//!
//! - the index of served group versions (`/api` and `/apis`) is fetched
//!   first, and again on a miss at most once per [`REFRESH_INTERVAL`]
//!   (single-flight, so a flood of misses makes one request). It is asked
//!   for in the aggregated form (`apidiscovery.k8s.io/v2`, as kubectl and
//!   client-go ask since v1.30), which carries every group version's
//!   resources too: two requests for everything, where a node-local
//!   resolving `--cache-resources` by bare names read some thirty group
//!   versions one by one (each passed through a tier to kube-apiserver). An
//!   upstream that answers the plain form gets the lists fetched one by one;
//! - a group version's resource list (`/api/v1`, `/apis/{group}/{version}`)
//!   is fetched only for a group version the index lists, so the kept lists
//!   are bounded by what the upstream serves, and refreshed on a miss at most
//!   once per [`REFRESH_INTERVAL`], so custom resources created at run time
//!   are found. No negative entry is ever stored.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use http::{Request, header};
use serde::Deserialize;
use tokio::time::Instant;

use crate::body;
use crate::cache::resource_info::ResourceInfo;
use crate::upstream::{Upstream, bounded_read};

/// How often the index or a group version may be fetched again because of a miss.
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub(crate) enum DiscoveryError {
    #[error("upstream discovery request failed")]
    Request(#[source] crate::upstream::SendError),
    #[error("reading upstream discovery")]
    Read(#[source] bounded_read::ReadError),
    #[error("upstream discovery answered {0}")]
    Status(http::StatusCode),
    #[error("decoding discovery")]
    Decode(#[source] serde_json::Error),
}

#[derive(Deserialize)]
struct ApiResourceList {
    #[serde(default)]
    resources: Vec<ApiResource>,
}

#[derive(Deserialize)]
struct ApiResource {
    name: String,
    #[serde(default, rename = "singularName")]
    singular_name: String,
    #[serde(default, rename = "shortNames")]
    short_names: Vec<String>,
    #[serde(default)]
    namespaced: bool,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    verbs: Vec<String>,
}

#[derive(Deserialize)]
struct ApiGroup {
    name: String,
    #[serde(default)]
    versions: Vec<GroupVersion>,
    #[serde(rename = "preferredVersion")]
    preferred_version: Option<GroupVersion>,
}

#[derive(Deserialize)]
struct GroupVersion {
    version: String,
}

/// What `/api` and `/apis` are asked for: the aggregated form, else the plain one.
const INDEX_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

/// `/api` or `/apis` in the aggregated form: each group with its versions
/// (the preferred first) and their resources.
#[derive(Deserialize)]
struct GroupDiscoveryList {
    #[serde(default)]
    items: Vec<GroupDiscovery>,
}

#[derive(Deserialize)]
struct GroupDiscovery {
    #[serde(default)]
    metadata: GroupName,
    #[serde(default)]
    versions: Vec<VersionDiscovery>,
}

#[derive(Deserialize, Default)]
struct GroupName {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct VersionDiscovery {
    version: String,
    #[serde(default)]
    resources: Vec<ResourceDiscovery>,
}

#[derive(Deserialize)]
struct ResourceDiscovery {
    resource: String,
    #[serde(default, rename = "responseKind")]
    response_kind: Option<ResponseKind>,
    /// `Namespaced` or `Cluster`.
    #[serde(default)]
    scope: String,
    #[serde(default, rename = "singularResource")]
    singular_resource: String,
    #[serde(default, rename = "shortNames")]
    short_names: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
}

#[derive(Deserialize)]
struct ResponseKind {
    #[serde(default)]
    kind: String,
}

#[derive(Deserialize)]
struct Crd {
    spec: CrdSpec,
}

#[derive(Deserialize)]
struct CrdSpec {
    #[serde(default)]
    versions: Vec<CrdVersion>,
}

#[derive(Deserialize)]
struct CrdVersion {
    name: String,
    #[serde(default, rename = "selectableFields")]
    selectable_fields: Vec<SelectableField>,
}

#[derive(Deserialize)]
struct SelectableField {
    #[serde(rename = "jsonPath")]
    json_path: String,
}

struct Fetched {
    resources: Arc<Vec<ResourceInfo>>,
    at: Instant,
}

/// The group versions the upstream serves, and each group's preferred one.
#[derive(Debug, Default)]
struct Index {
    served: HashSet<(String, String)>,
    /// Every group (`""` for the core group) and its preferred version, in
    /// the upstream's order.
    preferred: Vec<(String, String)>,
    /// When it was fetched; `None` before the first fetch.
    at: Option<Instant>,
}

pub(crate) struct Discovery {
    upstream: Arc<Upstream>,
    index: parking_lot::RwLock<Arc<Index>>,
    /// Held while the index is fetched, so concurrent misses share one fetch.
    index_refresh: tokio::sync::Mutex<()>,
    /// Resource lists, only of group versions the index lists.
    group_versions: DashMap<(String, String), Fetched>,
}

impl Discovery {
    pub(crate) fn new(upstream: Arc<Upstream>) -> Self {
        Self {
            upstream,
            index: Default::default(),
            index_refresh: tokio::sync::Mutex::new(()),
            group_versions: DashMap::new(),
        }
    }

    /// The resource `resource` of `group`/`version`, if the upstream serves it.
    pub(crate) async fn resource(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Result<Option<ResourceInfo>, DiscoveryError> {
        if !self.serves(group, version).await? {
            return Ok(None);
        }
        let key = (group.to_owned(), version.to_owned());
        let cached = self.group_versions.get(&key).map(|f| (f.resources.clone(), f.at));
        if let Some((resources, at)) = &cached {
            if let Some(r) = resources.iter().find(|r| r.resource == resource) {
                return Ok(Some(r.clone()));
            }
            if at.elapsed() < REFRESH_INTERVAL {
                return Ok(None);
            }
        }
        let resources = Arc::new(self.fetch_group_version(group, version).await?);
        let found = resources.iter().find(|r| r.resource == resource).cloned();
        self.group_versions.insert(key, Fetched { resources, at: Instant::now() });
        Ok(found)
    }

    /// True when the upstream's index lists `group`/`version`; a miss
    /// refreshes the index unless it is younger than [`REFRESH_INTERVAL`].
    async fn serves(&self, group: &str, version: &str) -> Result<bool, DiscoveryError> {
        let key = (group.to_owned(), version.to_owned());
        let index = self.index.read().clone();
        if index.served.contains(&key) {
            return Ok(true);
        }
        if index.at.is_some_and(|at| at.elapsed() < REFRESH_INTERVAL) {
            return Ok(false);
        }
        Ok(self.refreshed_index(index.at).await?.served.contains(&key))
    }

    /// Fetches the index unless someone else did since `seen` was read.
    async fn refreshed_index(&self, seen: Option<Instant>) -> Result<Arc<Index>, DiscoveryError> {
        let _single = self.index_refresh.lock().await;
        let current = self.index.read().clone();
        if current.at != seen && current.at.is_some() {
            return Ok(current);
        }
        let (core, groups) = (self.get_index_form("/api").await?, self.get_index_form("/apis").await?);
        let index = match (core, groups) {
            (IndexForm::Aggregated(core), IndexForm::Aggregated(groups)) => self.aggregated_index(core, groups),
            (core, groups) => plain_index(core.plain()?, groups.plain()?),
        };
        // Resource lists of group versions no longer served are dropped.
        self.group_versions.retain(|k, _| index.served.contains(k));
        let index = Arc::new(index);
        *self.index.write() = index.clone();
        Ok(index)
    }

    /// The index from the aggregated form, and every group version's
    /// resource list with it.
    fn aggregated_index(&self, core: GroupDiscoveryList, groups: GroupDiscoveryList) -> Index {
        let now = Instant::now();
        let mut index = Index { at: Some(now), ..Index::default() };
        let core = core.items.into_iter().map(|g| (String::new(), g.versions));
        let groups = groups.items.into_iter().map(|g| (g.metadata.name, g.versions));
        for (group, versions) in core.chain(groups) {
            // Versions come in the group's order of preference.
            if let Some(v) = versions.first() {
                index.preferred.push((group.clone(), v.version.clone()));
            }
            for v in versions {
                let resources = v.resources.into_iter().map(|r| resource_info(&group, &v.version, r)).collect();
                let key = (group.clone(), v.version);
                index.served.insert(key.clone());
                self.group_versions.insert(key, Fetched { resources: Arc::new(resources), at: now });
            }
        }
        index
    }

    /// `/api` or `/apis`, in the form the upstream answered.
    async fn get_index_form(&self, path: &str) -> Result<IndexForm, DiscoveryError> {
        let req = Request::get(path).header(header::ACCEPT, INDEX_ACCEPT).body(body::empty()).expect("valid request");
        let resp = self.upstream.send(req).await.map_err(DiscoveryError::Request)?;
        if !resp.status().is_success() {
            return Err(DiscoveryError::Status(resp.status()));
        }
        let aggregated = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|t| t.to_str().ok())
            .is_some_and(|t| t.contains("as=APIGroupDiscoveryList"));
        let bytes = bounded_read::read_whole(resp.into_body(), bounded_read::DOCUMENT_BYTES)
            .await
            .map_err(DiscoveryError::Read)?;
        Ok(if aggregated {
            IndexForm::Aggregated(serde_json::from_slice(&bytes).map_err(DiscoveryError::Decode)?)
        } else {
            IndexForm::Plain(bytes)
        })
    }

    /// The index, fetched if it never was.
    async fn current_index(&self) -> Result<Arc<Index>, DiscoveryError> {
        let index = self.index.read().clone();
        if index.at.is_some() { Ok(index) } else { self.refreshed_index(None).await }
    }

    /// Forgets what was fetched about `group`/`version` (its resource list,
    /// and the index's age), so the next request asks the upstream again:
    /// a resource of it stopped being served.
    pub(crate) fn forget(&self, group: &str, version: &str) {
        self.group_versions.remove(&(group.to_owned(), version.to_owned()));
        let mut index = self.index.write();
        let mut fresh = Index { served: index.served.clone(), preferred: index.preferred.clone(), at: None };
        fresh.served.remove(&(group.to_owned(), version.to_owned()));
        *index = Arc::new(fresh);
    }

    /// The preferred version of `group` (`v1` for the core group).
    pub(crate) async fn preferred_version(&self, group: &str) -> Result<Option<String>, DiscoveryError> {
        let index = self.current_index().await?;
        Ok(index.preferred.iter().find(|(g, _)| g == group).map(|(_, v)| v.clone()))
    }

    /// Every group and its preferred version, the core group included.
    pub(crate) async fn all_preferred(&self) -> Result<Vec<(String, String)>, DiscoveryError> {
        Ok(self.current_index().await?.preferred.clone())
    }

    /// Every resource of one group version.
    pub(crate) async fn resources(&self, group: &str, version: &str) -> Result<Arc<Vec<ResourceInfo>>, DiscoveryError> {
        let key = (group.to_owned(), version.to_owned());
        if let Some(f) = self.group_versions.get(&key) {
            return Ok(f.resources.clone());
        }
        if !self.serves(group, version).await? {
            return Ok(Arc::new(Vec::new()));
        }
        let resources = Arc::new(self.fetch_group_version(group, version).await?);
        self.group_versions.insert(key, Fetched { resources: resources.clone(), at: Instant::now() });
        Ok(resources)
    }

    /// The `selectableFields` of a custom resource's version, from its CRD;
    /// `None` when the resource is not defined by a CRD (an aggregated API).
    pub(crate) async fn custom_selectable_fields(&self, info: &ResourceInfo) -> Option<Vec<String>> {
        let path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}.{}", info.resource, info.group);
        let crd: Crd = self.get_json(&path).await.ok()?;
        let version = crd.spec.versions.into_iter().find(|v| v.name == info.version)?;
        Some(version.selectable_fields.into_iter().map(|f| f.json_path.trim_start_matches('.').to_owned()).collect())
    }

    async fn fetch_group_version(&self, group: &str, version: &str) -> Result<Vec<ResourceInfo>, DiscoveryError> {
        let path = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
        let list: ApiResourceList = match self.get_json(&path).await {
            Ok(list) => list,
            Err(DiscoveryError::Status(s)) if s == http::StatusCode::NOT_FOUND => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(list
            .resources
            .into_iter()
            // `pods/status` and friends are subresources, not resources.
            .filter(|r| !r.name.contains('/'))
            .map(|r| ResourceInfo {
                group: group.to_owned(),
                version: version.to_owned(),
                // As kubectl: a server that lists no singular name has the
                // lower-cased kind for one.
                singular: if r.singular_name.is_empty() { r.kind.to_lowercase() } else { r.singular_name },
                short_names: r.short_names,
                resource: r.name,
                kind: r.kind,
                namespaced: r.namespaced,
                verbs: r.verbs,
            })
            .collect())
    }

    async fn get_json<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T, DiscoveryError> {
        let req =
            Request::get(path).header(header::ACCEPT, "application/json").body(body::empty()).expect("valid request");
        let resp = self.upstream.send(req).await.map_err(DiscoveryError::Request)?;
        if !resp.status().is_success() {
            return Err(DiscoveryError::Status(resp.status()));
        }
        let bytes = bounded_read::read_whole(resp.into_body(), bounded_read::DOCUMENT_BYTES)
            .await
            .map_err(DiscoveryError::Read)?;
        serde_json::from_slice(&bytes).map_err(DiscoveryError::Decode)
    }
}

/// `/api` or `/apis` as the upstream answered it.
enum IndexForm {
    Aggregated(GroupDiscoveryList),
    /// The plain form's bytes (`APIVersions`, `APIGroupList`).
    Plain(bytes::Bytes),
}

impl IndexForm {
    /// The plain form, decoded; an aggregated answer (when only one of the
    /// two was: a proxy in between) is read as its groups and versions.
    fn plain(self) -> Result<PlainIndex, DiscoveryError> {
        match self {
            Self::Plain(bytes) => serde_json::from_slice(&bytes).map_err(DiscoveryError::Decode),
            Self::Aggregated(list) => Ok(PlainIndex {
                versions: list
                    .items
                    .first()
                    .map(|g| g.versions.iter().map(|v| v.version.clone()).collect())
                    .unwrap_or_default(),
                groups: list
                    .items
                    .into_iter()
                    .map(|g| ApiGroup {
                        preferred_version: g.versions.first().map(|v| GroupVersion { version: v.version.clone() }),
                        versions: g.versions.into_iter().map(|v| GroupVersion { version: v.version }).collect(),
                        name: g.metadata.name,
                    })
                    .collect(),
            }),
        }
    }
}

/// The plain form: `/api`'s `versions` (APIVersions) or `/apis`'s `groups`
/// (APIGroupList), whichever the body holds.
#[derive(Deserialize)]
struct PlainIndex {
    #[serde(default)]
    versions: Vec<String>,
    #[serde(default)]
    groups: Vec<ApiGroup>,
}

/// The index from the plain forms of `/api` and `/apis`.
fn plain_index(core: PlainIndex, groups: PlainIndex) -> Index {
    let mut index = Index { at: Some(Instant::now()), ..Index::default() };
    for v in &core.versions {
        index.served.insert((String::new(), v.clone()));
    }
    // The core group's preferred version is its first.
    if let Some(v) = core.versions.first() {
        index.preferred.push((String::new(), v.clone()));
    }
    for g in groups.groups {
        for v in &g.versions {
            index.served.insert((g.name.clone(), v.version.clone()));
        }
        if let Some(p) = g.preferred_version {
            index.preferred.push((g.name, p.version));
        }
    }
    index
}

/// One resource of `group`/`version` as the aggregated form describes it.
fn resource_info(group: &str, version: &str, r: ResourceDiscovery) -> ResourceInfo {
    let kind = r.response_kind.map(|k| k.kind).unwrap_or_default();
    ResourceInfo {
        group: group.to_owned(),
        version: version.to_owned(),
        // As kubectl: no singular name is the lower-cased kind.
        singular: if r.singular_resource.is_empty() { kind.to_lowercase() } else { r.singular_resource },
        short_names: r.short_names,
        resource: r.resource,
        kind,
        namespaced: r.scope == "Namespaced",
        verbs: r.verbs,
    }
}

#[cfg(test)]
mod tests;
