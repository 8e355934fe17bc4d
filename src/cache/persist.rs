//! Persistence of chosen resources (`--persist-dir`, `--persist-resources`),
//! so that a node-local watchmux that restarts while the API server is
//! away still has its caches.
//!
//! At start, each store in the directory whose resource is still chosen is
//! checked and loaded into a cache before the upstream is asked anything:
//! the cache is *unconfirmed* (`ResourceCache::is_unconfirmed`) until its
//! upstream watch, resumed from the stored version, answers. Reads that
//! need no freshness (`resourceVersion=0`, watches from a version the cache
//! holds) are served at once; consistent reads follow the usual proof, or
//! with `--serve-stale-when-upstream-unreachable` are answered from the
//! unconfirmed state while the upstream cannot be reached (`offline.rs`).
//!
//! A store that fails its check (redb's own, the format, every object
//! decoding under its own key) is moved aside, counted and logged, and its
//! resource starts cold: it is never served. A store whose resource is no
//! longer chosen, or whose `--cache-scope` changed, is deleted: what it
//! holds would be wrong, or (Secrets) no longer wanted on disk.
//!
//! - [`disk`]: one resource's redb file, committed batch by batch.
//! - [`feed`]: the thread that carries what the cache's writer applied to
//!   the disk, off the hot path.
//! - [`seal`]: encryption at rest (`--persist-encryption-key-file`).
//! - [`squeeze`]: objects deflated in stores that are not encrypted.

pub(crate) mod disk;
pub(crate) mod feed;
pub(crate) mod seal;
pub(crate) mod squeeze;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use self::disk::{DiskStore, Loaded};
use self::feed::Feed;
use self::seal::Sealer;
use super::catalog::resolve::GroupResource;
use super::resource::{CacheSettings, ResourceCache, Scope, Writer};
use super::resource_info::ResourceInfo;
use super::state::object::{CachedObject, ObjectShape};
use super::state::store::Objects;
use crate::error::error_chain;
use crate::metrics as m;

/// `--persist-*` and `--serve-stale-when-upstream-unreachable`.
#[derive(Debug, Clone, Default)]
pub struct PersistConfig {
    /// Where the stores live; `None`: nothing is persisted.
    pub dir: Option<PathBuf>,
    pub resources: PersistSelection,
    /// `--persist-encryption-key-file`: objects sealed with AES-256-GCM.
    pub encryption_key_file: Option<PathBuf>,
    /// Answer consistent reads from a cache the upstream has not confirmed
    /// while it cannot be reached (`offline.rs`).
    pub serve_stale_when_unreachable: bool,
}

/// Which cached resources are persisted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersistSelection {
    /// `*`: every cached resource but Secrets.
    pub all_but_secrets: bool,
    /// Named, as `resource[.group]`.
    pub named: HashSet<GroupResource>,
}

impl PersistSelection {
    /// Secrets only when named: `*` never writes them to disk.
    pub fn persists(&self, gr: &GroupResource) -> bool {
        self.named.contains(gr) || (self.all_but_secrets && !(gr.group.is_empty() && gr.resource == "secrets"))
    }
}

/// What a store says about its resource, so that it can be served before
/// discovery answers, and refused when the flags changed its meaning.
#[derive(Debug, Serialize, Deserialize)]
struct About {
    group: String,
    version: String,
    resource: String,
    singular: String,
    short_names: Vec<String>,
    kind: String,
    namespaced: bool,
    verbs: Vec<String>,
    custom_selectable: Option<Vec<String>>,
    /// The `--cache-scope` selectors the objects were cached under.
    scope: Vec<(String, String)>,
}

impl About {
    fn of(shape: &ObjectShape, scope: &Scope) -> Self {
        let i = &shape.info;
        Self {
            group: i.group.clone(),
            version: i.version.clone(),
            resource: i.resource.clone(),
            singular: i.singular.clone(),
            short_names: i.short_names.clone(),
            kind: i.kind.clone(),
            namespaced: i.namespaced,
            verbs: i.verbs.clone(),
            custom_selectable: shape.custom_selectable.clone(),
            scope: scope.query.clone(),
        }
    }

    fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("plain data"))
    }

    fn shape(&self) -> ObjectShape {
        let info = ResourceInfo {
            group: self.group.clone(),
            version: self.version.clone(),
            resource: self.resource.clone(),
            singular: self.singular.clone(),
            short_names: self.short_names.clone(),
            kind: self.kind.clone(),
            namespaced: self.namespaced,
            verbs: self.verbs.clone(),
        };
        ObjectShape::new(info, self.custom_selectable.clone())
    }

    fn group_resource(&self) -> GroupResource {
        GroupResource { group: self.group.clone(), resource: self.resource.clone() }
    }
}

/// A cache loaded from disk, for the registry to start a reflector for,
/// resuming at `rv`.
pub(crate) struct Restored {
    pub writer: Writer,
    pub rv: u64,
}

/// The registry's side of persistence.
#[derive(Debug)]
pub(crate) struct Persistence {
    dir: PathBuf,
    selection: PersistSelection,
    sealer: Option<Arc<Sealer>>,
}

/// How a stored object's sealed bytes are bound to where they belong
/// (AES-GCM's associated data).
pub(crate) fn sealed_as(resource: &str, key: &super::state::object::ObjectKey) -> Vec<u8> {
    format!("{resource}|{}/{}", key.namespace, key.name).into_bytes()
}

impl Persistence {
    /// `None` without `--persist-dir`. The directory is made, or narrowed,
    /// to 0700.
    /// A key file that cannot be read is a start-up error.
    pub(crate) fn new(config: &PersistConfig) -> anyhow::Result<Option<Self>> {
        let Some(dir) = &config.dir else { return Ok(None) };
        disk::prepare_dir(dir)?;
        let sealer = match &config.encryption_key_file {
            Some(path) => Some(Arc::new(Sealer::from_file(path)?)),
            None => None,
        };
        Ok(Some(Self { dir: dir.clone(), selection: config.resources.clone(), sealer }))
    }

    pub(crate) fn persists(&self, gr: &GroupResource) -> bool {
        self.selection.persists(gr)
    }

    /// `pods.v1.core.redb`, `deployments.v1.apps.redb`.
    fn path_for(&self, info: &ResourceInfo) -> PathBuf {
        let group = if info.group.is_empty() { "core" } else { &info.group };
        self.dir.join(format!("{}.{}.{}.redb", info.resource, info.version, group))
    }

    /// Starts persisting a cache just made (before its first list): the
    /// list replaces whatever the store held. A store that cannot be opened
    /// is logged and the cache stays memory-only.
    pub(crate) fn attach(&self, writer: &mut Writer) {
        let cache = writer.cache().clone();
        let path = self.path_for(&cache.shape.info);
        match DiskStore::open(&path) {
            Ok(store) => {
                let about = About::of(&cache.shape, &cache.scope).encode();
                writer.persist_to(Box::new(Feed::start(cache, store, about, self.sealer.clone(), 0)));
            }
            Err(err) => {
                metrics::counter!(m::PERSIST_WRITE_ERRORS, "resource" => cache.label().to_owned()).increment(1);
                metrics::gauge!(m::PERSIST_DEGRADED, "resource" => cache.label().to_owned()).set(1.0);
                tracing::error!(resource = %cache.label(), error = %error_chain(&err), "cannot open the persist store; this cache is memory-only");
            }
        }
    }

    /// Every store in the directory that can be served, loaded into a cache
    /// of its own (with its feed attached); the others moved aside or
    /// deleted, as the module says. A store sealed with another key than the
    /// one given (or with none given) is an error: the operator decides.
    pub(crate) fn restore_all(
        &self,
        settings: &CacheSettings,
        scopes: &HashMap<GroupResource, Scope>,
    ) -> anyhow::Result<Vec<Restored>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) => {
                tracing::error!(dir = %self.dir.display(), error = %err, "cannot read the persist directory; starting cold");
                return Ok(Vec::new());
            }
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "redb"))
            .collect();
        paths.sort();
        let mut restored = Vec::new();
        for path in paths {
            restored.extend(self.restore(&path, settings, scopes)?);
        }
        Ok(restored)
    }

    fn restore(
        &self,
        path: &Path,
        settings: &CacheSettings,
        scopes: &HashMap<GroupResource, Scope>,
    ) -> anyhow::Result<Option<Restored>> {
        let started = Instant::now();
        let (store, loaded) = match DiskStore::open(path).and_then(|s| s.load().map(|l| (s, l))) {
            Ok((store, Some(loaded))) => (store, loaded),
            Ok((store, None)) => {
                drop(store);
                remove(path, "it holds nothing");
                return Ok(None);
            }
            Err(err) => return Ok(move_aside(path, None, &error_chain(&err))),
        };
        let about: About = match serde_json::from_slice(&loaded.about) {
            Ok(about) => about,
            Err(err) => return Ok(move_aside(path, None, &format!("its resource cannot be read: {err}"))),
        };
        let gr = about.group_resource();
        if !self.selection.persists(&gr) {
            drop(store);
            remove(path, "its resource is not in --persist-resources any more");
            return Ok(None);
        }
        let scope = scopes.get(&gr).cloned().unwrap_or_default();
        if scope.query != about.scope {
            drop(store);
            remove(path, "its resource's --cache-scope changed");
            return Ok(None);
        }
        let shape = about.shape();
        let label = shape.info.qualified_resource();
        if self.path_for(&shape.info) != path {
            return Ok(move_aside(path, Some(&label), "its name does not match the resource it holds"));
        }
        match (&loaded.key_check, &self.sealer) {
            (Some(check), Some(sealer)) if !sealer.is_key_of(check) => anyhow::bail!(
                "{}: sealed with another key than --persist-encryption-key-file; give the key it was written with, or remove the file to start {label} cold",
                path.display()
            ),
            (Some(_), None) => anyhow::bail!(
                "{}: encrypted, and no --persist-encryption-key-file is given; give its key, or remove the file to start {label} cold",
                path.display()
            ),
            (None, Some(_)) => {
                drop(store);
                remove(path, "it is stored in clear and --persist-encryption-key-file is given");
                return Ok(None);
            }
            _ => {}
        }
        let (rv, count) = (loaded.rv, loaded.objects.len());
        let objects = match decode_all(loaded, &shape, &label, self.sealer.as_deref()) {
            Ok(objects) => objects,
            Err(why) => return Ok(move_aside(path, Some(&label), &why)),
        };
        let mut writer = ResourceCache::create(shape, scope, settings.clone());
        writer.restore(objects, rv);
        let about = About::of(&writer.cache().shape, &writer.cache().scope).encode();
        writer.persist_to(Box::new(Feed::start(writer.cache().clone(), store, about, self.sealer.clone(), rv)));
        let took = started.elapsed();
        metrics::gauge!(m::PERSIST_LOAD_DURATION, "resource" => label.clone()).set(took.as_secs_f64());
        tracing::info!(resource = %label, objects = count, rv, took = ?took, "cache loaded from disk; unconfirmed until the upstream answers");
        Ok(Some(Restored { writer, rv }))
    }
}

/// Every stored object decoded as the cache holds it, each under the key it
/// was stored with: anything else is a store not to be trusted.
fn decode_all(loaded: Loaded, shape: &ObjectShape, label: &str, sealer: Option<&Sealer>) -> Result<Objects, String> {
    let mut objects = Objects::new();
    for (key, stored) in loaded.objects {
        let json = match sealer {
            Some(sealer) => sealer
                .open(&sealed_as(label, &key), &stored)
                .map_err(|_| format!("object {key:?} does not open with the key (altered)"))?,
            None => squeeze::unpack(stored).map_err(|why| format!("object {key:?} {why}"))?,
        };
        let object = CachedObject::decode(json, shape).map_err(|e| format!("object {key:?} does not decode: {e}"))?;
        if object.key != key {
            return Err(format!("object stored as {key:?} is {:?}", object.key));
        }
        if object.rv > loaded.rv {
            return Err(format!("object {key:?} is at {}, after the store's version {}", object.rv, loaded.rv));
        }
        objects.insert(key, Arc::new(object));
    }
    Ok(objects)
}

fn move_aside(path: &Path, label: Option<&str>, why: &str) -> Option<Restored> {
    let resource = label.map_or_else(|| path.display().to_string(), str::to_owned);
    metrics::counter!(m::PERSIST_STORES_MOVED_ASIDE, "resource" => resource.clone()).increment(1);
    match disk::move_aside(path) {
        Ok(to) => {
            tracing::error!(resource = %resource, why, moved_to = %to.display(), "persist store fails its check; moved aside, starting cold")
        }
        Err(err) => {
            tracing::error!(resource = %resource, why, error = %err, "persist store fails its check and cannot be moved aside; starting cold");
            let _ = std::fs::remove_file(path);
        }
    }
    None
}

fn remove(path: &Path, why: &str) {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::info!(path = %path.display(), why, "persist store removed"),
        Err(err) => tracing::warn!(path = %path.display(), why, error = %err, "cannot remove a persist store"),
    }
}

#[cfg(test)]
mod tests;
