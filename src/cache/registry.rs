//! The registry: which resources are cached, and one cache per resource,
//! started on first use (or at start-up with `--cache-warm`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use dashmap::DashMap;
use tokio_util::sync::CancellationToken;

use super::catalog::discovery::{Discovery, DiscoveryError};
use super::catalog::resolve::{GroupResource, Resolved, ResourceName, Unresolvable, resolve};
use super::persist::{PersistConfig, Persistence};
use super::resource::{CacheSettings, ResourceCache, Scope, Writer};
use super::resource_info::ResourceInfo;
use super::state::object::ObjectShape;
use super::sync::cluster::ClusterIdentity;
use super::sync::reflector::{Exit, Reflector, ReflectorState};
use super::sync::schema_check::SchemaChecker;
use crate::error::error_chain;
use crate::upstream::Upstream;

/// `--cache-resources`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceSelection {
    /// Every listable and watchable resource, custom resources included (`*`).
    All,
    /// These, resolved against discovery as kubectl resolves names.
    Only(Vec<ResourceName>),
}

/// What to cache and how, from the flags.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub resources: ResourceSelection,
    pub disabled: HashSet<GroupResource>,
    pub scopes: HashMap<GroupResource, Scope>,
    pub warm: bool,
    pub settings: CacheSettings,
    /// Gzip for the answers the cache writes (`--compress-responses`).
    pub(crate) compression: crate::compress::ResponseCompression,
    /// `--persist-*`, `--serve-stale-when-upstream-unreachable`.
    pub persist: PersistConfig,
}

impl CacheConfig {
    /// The resources named, each taken literally (a plural in its group):
    /// what is cached until the names are resolved against discovery.
    fn literal_names(&self) -> HashSet<GroupResource> {
        match &self.resources {
            ResourceSelection::All => HashSet::new(),
            ResourceSelection::Only(names) => names.iter().map(ResourceName::literal).collect(),
        }
    }
}

/// How long start-up waits for discovery to check `--cache-resources`.
const NAMES_CHECK_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);
/// How soon names are resolved again after discovery failed.
const NAMES_RETRY_FAILED: std::time::Duration = std::time::Duration::from_secs(5);
/// How often names of groups not served yet are resolved again.
const NAMES_RETRY_PENDING: std::time::Duration = std::time::Duration::from_secs(60);

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
    /// Checks each cached kind's served schema against the protobuf table,
    /// for every reflector of this registry (and remembers what it read).
    schemas: Arc<SchemaChecker>,
    /// Which cluster the caches hold (`sync::cluster`), for every reflector.
    cluster: Arc<ClusterIdentity>,
    stop: CancellationToken,
    /// Set once `--cache-warm` has started every configured cache.
    warmed: std::sync::atomic::AtomicBool,
    /// The resources `--cache-resources` names, resolved (or taken literally
    /// until they can be); unused for `*`.
    enabled: parking_lot::RwLock<HashSet<GroupResource>>,
    /// `--persist-dir`: where chosen resources are kept across restarts.
    persistence: Option<Persistence>,
    /// Set when caches were loaded from disk at start.
    restored: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("caches", &self.caches.len()).finish_non_exhaustive()
    }
}

impl Registry {
    pub(crate) fn new(upstream: Arc<Upstream>, config: CacheConfig, stop: CancellationToken) -> anyhow::Result<Self> {
        let persistence = Persistence::new(&config.persist)?;
        Ok(Self {
            discovery: Arc::new(Discovery::new(upstream.clone())),
            upstream,
            caches: Arc::new(DashMap::new()),
            schemas: Arc::default(),
            cluster: Arc::default(),
            stop,
            warmed: Default::default(),
            enabled: parking_lot::RwLock::new(config.literal_names()),
            config,
            persistence,
            restored: Default::default(),
        })
    }

    /// At start-up, before the upstream is asked anything: every persisted
    /// resource that loads is a ready (unconfirmed) cache, whose reflector
    /// resumes the upstream watch from the stored version.
    pub(crate) fn restore_persisted(&self) -> anyhow::Result<()> {
        let Some(persistence) = &self.persistence else { return Ok(()) };
        for restored in persistence.restore_all(&self.config.settings, &self.config.scopes)? {
            let info = &restored.writer.cache().shape.info;
            let key = (info.group.clone(), info.version.clone(), info.resource.clone());
            self.caches.insert(key.clone(), restored.writer.cache().clone());
            self.restored.store(true, std::sync::atomic::Ordering::Release);
            // The reflector resumes only once the upstream's current version
            // is not below `restored.rv` and its identity is the one the
            // store recorded (else: another cluster, and the store is
            // replaced by a new start). Stores written by one watchmux share
            // one identity; the first recorded stands for all.
            self.cluster.seed(restored.cluster_identity.clone());
            self.run_cache(key, restored.writer, ReflectorState::Watching { rv: restored.rv });
        }
        Ok(())
    }

    /// Whether `--cache-warm` asks for every configured cache at start-up.
    pub(crate) fn warms(&self) -> bool {
        self.config.warm
    }

    /// Whether `gr` is cached: named by `--cache-resources` (or `*`) and
    /// not turned off by `--watch-cache-sizes`.
    pub(crate) fn is_enabled(&self, gr: &GroupResource) -> bool {
        !self.config.disabled.contains(gr)
            && match &self.config.resources {
                ResourceSelection::All => true,
                ResourceSelection::Only(_) => self.enabled.read().contains(gr),
            }
    }

    /// At start-up: resolves the `--cache-resources` names, and refuses to
    /// start on one the upstream does not have (a typo caches nothing and
    /// says nothing otherwise). Names of groups not served yet are waited
    /// for, with a warning. When the upstream cannot be asked within
    /// [`NAMES_CHECK_BUDGET`], starts with the names taken literally and
    /// checks in the background (a refusal is then an error in the log).
    /// Every name already a cache loaded from disk: the check runs in the
    /// background at once, without the wait. Those resources were served
    /// when their stores were written, and a node restarting while the
    /// upstream is away must serve them now, not after the budget.
    pub(crate) async fn check_names(self: &Arc<Self>) -> anyhow::Result<()> {
        let names = match &self.config.resources {
            ResourceSelection::Only(names) if !names.is_empty() => names,
            _ => return Ok(()),
        };
        if self.all_restored(names) {
            tracing::info!(
                "--cache-resources are all loaded from disk: checking them against discovery in the background"
            );
            tokio::spawn(self.clone().keep_resolving());
            return Ok(());
        }
        match tokio::time::timeout(NAMES_CHECK_BUDGET, self.resolve_names()).await {
            Ok(Ok((refused, pending))) => {
                if !refused.is_empty() {
                    let why: Vec<String> = refused.iter().map(ToString::to_string).collect();
                    anyhow::bail!("{}", why.join("; "));
                }
                if !pending.is_empty() {
                    tracing::warn!(names = %pending.join(","), "--cache-resources names of API groups the upstream does not serve yet: cached once they appear");
                    tokio::spawn(self.clone().keep_resolving());
                }
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %error_chain(&err), "cannot check --cache-resources until the upstream answers discovery; checking in the background");
                tokio::spawn(self.clone().keep_resolving());
            }
            Err(_) => {
                tracing::warn!(budget = ?NAMES_CHECK_BUDGET, "cannot check --cache-resources until the upstream answers discovery; checking in the background");
                tokio::spawn(self.clone().keep_resolving());
            }
        }
        Ok(())
    }

    /// Whether each of `names`, read literally, is a cache restored from disk.
    fn all_restored(&self, names: &[ResourceName]) -> bool {
        if !self.restored.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        names.iter().all(|name| {
            let gr = name.literal();
            self.caches.iter().any(|c| c.key().0 == gr.group && c.key().2 == gr.resource)
        })
    }

    /// Resolves the names again until none is pending (every 5 s while
    /// discovery fails, every minute while a group is not served yet),
    /// logging what is refused.
    async fn keep_resolving(self: Arc<Self>) {
        let mut delay = NAMES_RETRY_FAILED;
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            match self.resolve_names().await {
                Ok((refused, pending)) => {
                    for why in &refused {
                        tracing::error!("{why}: not cached");
                    }
                    if pending.is_empty() {
                        tracing::info!("--cache-resources resolved");
                        return;
                    }
                    delay = NAMES_RETRY_PENDING;
                }
                Err(_) => delay = NAMES_RETRY_FAILED,
            }
        }
    }

    /// Resolves the `--cache-resources` names against discovery (see
    /// [`super::catalog::resolve`]). Returns the names refused; names of groups not
    /// served yet stay literal, counted in a gauge, and are returned as
    /// pending.
    pub(crate) async fn resolve_names(&self) -> Result<(Vec<Unresolvable>, Vec<String>), DiscoveryError> {
        let ResourceSelection::Only(names) = &self.config.resources else { return Ok((Vec::new(), Vec::new())) };
        let mut served = Vec::new();
        let mut groups = HashSet::new();
        for (group, version) in self.discovery.all_preferred().await? {
            served.extend(self.discovery.resources(&group, &version).await?.iter().cloned());
            groups.insert(group);
        }
        let (mut enabled, mut refused, mut pending) = (HashSet::new(), Vec::new(), Vec::new());
        for name in names {
            match resolve(name, &served, &groups) {
                Ok(Resolved::Resource(gr)) => {
                    enabled.insert(gr);
                }
                Ok(Resolved::Pending) => {
                    enabled.insert(name.literal());
                    pending.push(name.to_string());
                }
                Err(why) => refused.push(why),
            }
        }
        metrics::gauge!(crate::metrics::CACHE_RESOURCES_UNRESOLVED).set(pending.len() as f64);
        *self.enabled.write() = enabled;
        Ok((refused, pending))
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
        if !self.is_enabled(&gr) {
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
                tracing::debug!(error = %error_chain(&err), "discovery failed");
                return Err(NotCached::Discovery);
            }
        };
        Ok(self.start(info).await)
    }

    /// With `--cache-warm`: every configured cache started and synced. A
    /// configuration that caches nothing the upstream serves is ready as soon
    /// as that is known. Caches loaded from disk count as warm: they answer
    /// at once, and warming (which needs discovery) cannot finish while the
    /// upstream is away, exactly when they matter.
    pub(crate) fn warm_and_synced(&self) -> bool {
        let ordering = std::sync::atomic::Ordering::Acquire;
        (self.warmed.load(ordering) || self.restored.load(ordering)) && self.all_synced()
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
        if let Some(mut writer) = created {
            tracing::info!(resource = %writer.cache().label(), "starting cache");
            if let Some(persistence) = self.persistence.as_ref().filter(|p| p.persists(&gr)) {
                persistence.attach(&mut writer);
            }
            self.run_cache(key, writer, ReflectorState::Listing);
        }
        cache
    }

    /// Runs a new cache's reflector from `first` and its consistency check.
    fn run_cache(&self, key: Gvr, writer: Writer, first: ReflectorState) {
        let cache = writer.cache().clone();
        let reflector =
            Reflector::new(writer, self.upstream.clone(), self.schemas.clone()).with_cluster(self.cluster.clone());
        let period = self.config.settings.consistency_check_period;
        tokio::spawn(super::consistency_check::run(cache.clone(), self.upstream.clone(), period, self.stop.clone()));
        let (caches, discovery, stop) = (self.caches.clone(), self.discovery.clone(), self.stop.clone());
        tokio::spawn(async move {
            if reflector.run_from(first, stop).await == Exit::Gone {
                // A deleted CRD or a version no longer served: forget the
                // cache and what discovery said, so that requests find the
                // API server's 404 and a re-created CRD gets a fresh cache
                // with its current schema and selectable fields.
                caches.remove_if(&key, |_, c| Arc::ptr_eq(c, &cache));
                discovery.forget(&key.0, &key.1);
            }
        });
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
                    let delay = super::sync::reflector::backoff_delay(failures, &mut rand::rng());
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %error_chain(&err), retry_in = ?delay, "warming the caches failed");
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
            ResourceSelection::Only(_) => {
                let groups: HashSet<String> = self.enabled.read().iter().map(|gr| gr.group.clone()).collect();
                let mut out = Vec::new();
                for group in groups {
                    if let Some(v) = self.discovery.preferred_version(&group).await? {
                        out.push((group, v));
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
                if info.is_cacheable() && self.is_enabled(&gr) {
                    self.start(info.clone()).await;
                }
            }
        }
        Ok(())
    }
}
