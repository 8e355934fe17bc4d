//! Discovery: which resources the upstream serves, with their kind, scope
//! and verbs, read from `/api/v1` and `/apis/{group}/{version}` on demand.
//!
//! A group version is fetched the first time a request names it and kept.
//! A request naming a resource the kept list does not have refreshes it (at
//! most once per [`REFRESH_INTERVAL`]), so custom resources created at run
//! time are found.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use http::{Request, header};
use http_body_util::BodyExt;
use serde::Deserialize;
use tokio::time::Instant;

use super::resource_info::ResourceInfo;
use crate::body;
use crate::passthrough::error_chain;
use crate::upstream::Upstream;

/// How often a group version may be fetched again because of a miss.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("upstream discovery request failed: {0}")]
    Request(String),
    #[error("upstream discovery answered {0}")]
    Status(http::StatusCode),
    #[error("decoding discovery: {0}")]
    Decode(String),
}

#[derive(Deserialize)]
struct ApiResourceList {
    #[serde(default)]
    resources: Vec<ApiResource>,
}

#[derive(Deserialize)]
struct ApiResource {
    name: String,
    #[serde(default)]
    namespaced: bool,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    verbs: Vec<String>,
}

#[derive(Deserialize)]
struct ApiGroupList {
    #[serde(default)]
    groups: Vec<ApiGroup>,
}

#[derive(Deserialize)]
struct ApiGroup {
    name: String,
    #[serde(rename = "preferredVersion")]
    preferred_version: Option<GroupVersion>,
}

#[derive(Deserialize)]
struct GroupVersion {
    version: String,
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

pub struct Discovery {
    upstream: Arc<Upstream>,
    group_versions: DashMap<(String, String), Fetched>,
}

impl Discovery {
    pub fn new(upstream: Arc<Upstream>) -> Self {
        Self { upstream, group_versions: DashMap::new() }
    }

    /// The resource `resource` of `group`/`version`, if the upstream serves it.
    pub async fn resource(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Result<Option<ResourceInfo>, DiscoveryError> {
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

    /// The preferred version of `group` (`v1` for the core group).
    pub async fn preferred_version(&self, group: &str) -> Result<Option<String>, DiscoveryError> {
        if group.is_empty() {
            return Ok(Some("v1".into()));
        }
        let list: ApiGroupList = self.get_json("/apis").await?;
        Ok(list.groups.into_iter().find(|g| g.name == group).and_then(|g| g.preferred_version).map(|v| v.version))
    }

    /// Every group and its preferred version, the core group included.
    pub async fn all_preferred(&self) -> Result<Vec<(String, String)>, DiscoveryError> {
        let list: ApiGroupList = self.get_json("/apis").await?;
        let mut out = vec![(String::new(), "v1".to_owned())];
        out.extend(list.groups.into_iter().filter_map(|g| Some((g.name, g.preferred_version?.version))));
        Ok(out)
    }

    /// Every resource of one group version.
    pub async fn resources(&self, group: &str, version: &str) -> Result<Arc<Vec<ResourceInfo>>, DiscoveryError> {
        let key = (group.to_owned(), version.to_owned());
        if let Some(f) = self.group_versions.get(&key) {
            return Ok(f.resources.clone());
        }
        let resources = Arc::new(self.fetch_group_version(group, version).await?);
        self.group_versions.insert(key, Fetched { resources: resources.clone(), at: Instant::now() });
        Ok(resources)
    }

    /// The `selectableFields` of a custom resource's version, from its CRD;
    /// `None` when the resource is not defined by a CRD (an aggregated API).
    pub async fn custom_selectable_fields(&self, info: &ResourceInfo) -> Option<Vec<String>> {
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
        let resp = self.upstream.send(req).await.map_err(|e| DiscoveryError::Request(error_chain(&e)))?;
        if !resp.status().is_success() {
            return Err(DiscoveryError::Status(resp.status()));
        }
        let bytes = resp.into_body().collect().await.map_err(|e| DiscoveryError::Request(e.to_string()))?.to_bytes();
        serde_json::from_slice(&bytes).map_err(|e| DiscoveryError::Decode(e.to_string()))
    }
}
