//! The registry: which resources are cached, and one cache per resource,
//! started on first use (or at start-up with `--cache-warm`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use dashmap::DashMap;
use tokio_util::sync::CancellationToken;

use super::discovery::{Discovery, DiscoveryError};
use super::object::ObjectShape;
use super::reflector::{Exit, Reflector};
use super::resource::{CacheSettings, ResourceCache, Scope};
use super::resource_info::ResourceInfo;
use crate::upstream::Upstream;

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceSelection {
    /// Every listable and watchable resource, custom resources included (`*`).
    All,
    Only(HashSet<GroupResource>),
}

/// What to cache and how, from the flags.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub resources: ResourceSelection,
    pub disabled: HashSet<GroupResource>,
    pub scopes: HashMap<GroupResource, Scope>,
    pub warm: bool,
    pub settings: CacheSettings,
}

impl CacheConfig {
    pub fn is_enabled(&self, gr: &GroupResource) -> bool {
        !self.disabled.contains(gr)
            && match &self.resources {
                ResourceSelection::All => true,
                ResourceSelection::Only(set) => set.contains(gr),
            }
    }
}

/// Why a request for a resource is not served from a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotCached {
    /// Not in `--cache-resources`, or turned off.
    Disabled,
    /// The upstream does not serve it, or it cannot be listed and watched.
    NotCacheable,
    /// Discovery failed.
    Discovery,
}

type Gvr = (String, String, String);

pub(crate) struct Registry {
    upstream: Arc<Upstream>,
    discovery: Arc<Discovery>,
    config: CacheConfig,
    /// Shared with the reflectors' tasks, which remove their cache when the
    /// upstream stops serving its resource.
    caches: Arc<DashMap<Gvr, Arc<ResourceCache>>>,
    stop: CancellationToken,
    /// Set once `--cache-warm` has started every configured cache.
    warmed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("caches", &self.caches.len()).finish_non_exhaustive()
    }
}

impl Registry {
    pub(crate) fn new(upstream: Arc<Upstream>, config: CacheConfig, stop: CancellationToken) -> Self {
        Self {
            discovery: Arc::new(Discovery::new(upstream.clone())),
            upstream,
            config,
            caches: Arc::new(DashMap::new()),
            stop,
            warmed: Default::default(),
        }
    }

    pub(crate) fn upstream(&self) -> &Arc<Upstream> {
        &self.upstream
    }

    pub(crate) fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// The cache for a resource, started if needed.
    pub(crate) async fn cache_for(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Result<Arc<ResourceCache>, NotCached> {
        let gr = GroupResource { group: group.to_owned(), resource: resource.to_owned() };
        if !self.config.is_enabled(&gr) {
            return Err(NotCached::Disabled);
        }
        let key = (group.to_owned(), version.to_owned(), resource.to_owned());
        if let Some(cache) = self.caches.get(&key) {
            return Ok(cache.clone());
        }
        let info = match self.discovery.resource(group, version, resource).await {
            Ok(Some(info)) if info.is_cacheable() => info,
            Ok(_) => return Err(NotCached::NotCacheable),
            Err(err) => {
                tracing::debug!(error = %err, "discovery failed");
                return Err(NotCached::Discovery);
            }
        };
        Ok(self.start(info).await)
    }

    /// With `--cache-warm`: every configured cache started and synced. A
    /// configuration that caches nothing the upstream serves is ready as soon
    /// as that is known.
    pub(crate) fn warm_and_synced(&self) -> bool {
        self.warmed.load(std::sync::atomic::Ordering::Acquire) && self.all_synced()
    }

    /// True when every started cache has completed its initial list.
    pub(crate) fn all_synced(&self) -> bool {
        self.caches.iter().all(|c| c.is_ready())
    }

    /// Every started cache.
    pub(crate) fn caches(&self) -> Vec<Arc<ResourceCache>> {
        self.caches.iter().map(|c| c.value().clone()).collect()
    }

    async fn start(&self, info: ResourceInfo) -> Arc<ResourceCache> {
        let key = (info.group.clone(), info.version.clone(), info.resource.clone());
        let custom = if info.is_builtin_group() { None } else { self.discovery.custom_selectable_fields(&info).await };
        let gr = GroupResource { group: info.group.clone(), resource: info.resource.clone() };
        let scope = self.config.scopes.get(&gr).cloned().unwrap_or_default();
        let mut created = None;
        let cache = self
            .caches
            .entry(key.clone())
            .or_insert_with(|| {
                let writer = ResourceCache::create(ObjectShape::new(info, custom), scope, self.config.settings.clone());
                let cache = writer.cache().clone();
                created = Some(writer);
                cache
            })
            .clone();
        if let Some(writer) = created {
            tracing::info!(resource = %writer.label(), "starting cache");
            let reflector = Reflector::new(writer, self.upstream.clone());
            let (caches, discovery, stop) = (self.caches.clone(), self.discovery.clone(), self.stop.clone());
            let mine = cache.clone();
            tokio::spawn(async move {
                if reflector.run(stop).await == Exit::Gone {
                    // A deleted CRD or a version no longer served: forget the
                    // cache and what discovery said, so that requests find the
                    // API server's 404 and a re-created CRD gets a fresh cache
                    // with its current schema and selectable fields.
                    caches.remove_if(&key, |_, c| Arc::ptr_eq(c, &mine));
                    discovery.forget(&key.0, &key.1);
                }
            });
        }
        cache
    }

    /// Starts the configured caches now, retrying discovery with backoff
    /// until it succeeds (the upstream may be down when watchmux starts).
    pub(crate) async fn warm_until_done(&self) {
        let mut failures = 0u32;
        loop {
            match self.warm().await {
                Ok(()) => {
                    self.warmed.store(true, std::sync::atomic::Ordering::Release);
                    return;
                }
                Err(err) => {
                    let delay = super::reflector::backoff_delay(failures, &mut rand::rng());
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %err, retry_in = ?delay, "warming the caches failed");
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    /// Starts the configured caches now instead of on first use.
    pub(crate) async fn warm(&self) -> Result<(), DiscoveryError> {
        let targets: Vec<(String, String)> = match &self.config.resources {
            ResourceSelection::All => self.discovery.all_preferred().await?,
            ResourceSelection::Only(set) => {
                let mut out = Vec::new();
                for gr in set {
                    if let Some(v) = self.discovery.preferred_version(&gr.group).await? {
                        out.push((gr.group.clone(), v));
                    }
                }
                out.sort();
                out.dedup();
                out
            }
        };
        for (group, version) in targets {
            let resources = self.discovery.resources(&group, &version).await?;
            for info in resources.iter() {
                let gr = GroupResource { group: group.clone(), resource: info.resource.clone() };
                if info.is_cacheable() && self.config.is_enabled(&gr) {
                    self.start(info.clone()).await;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_put_the_group_after_the_first_dot() {
        assert_eq!(GroupResource::parse("pods"), GroupResource { group: "".into(), resource: "pods".into() });
        let es = GroupResource::parse("endpointslices.discovery.k8s.io");
        assert_eq!((es.group.as_str(), es.resource.as_str()), ("discovery.k8s.io", "endpointslices"));
        assert_eq!(es.to_string(), "endpointslices.discovery.k8s.io");
    }
}
