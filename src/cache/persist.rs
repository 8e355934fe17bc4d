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
//! unconfirmed state while the upstream cannot be reached (`stale_reads.rs`).
//!
//! A store that fails its check (it does not open, redb's own check, the
//! format, every object decoding under its own key, and when encrypted the
//! manifest's MAC and the ledger) is moved aside, counted and logged, and
//! its resource starts cold: it is never served. A store whose resource is
//! no longer chosen, or whose `--cache-scope` changed, is deleted: what it
//! holds would be wrong, or (Secrets) no longer wanted on disk.
//!
//! An encrypted store is authenticated as a whole (`manifest.rs`) and must
//! be the latest this directory's ledger recorded (`ledger.rs`): a file
//! copied back from earlier, or from another node, starts cold. A store in
//! clear trusts the disk, and says so at start.
//!
//! A persist directory that cannot be made or written (a read-only file
//! system) is not a failed start: nothing is persisted or restored, with a
//! loud warning and `watchmux_persist_degraded{resource="*"}`.
//!
//! - [`disk`]: one resource's redb file, committed batch by batch.
//! - [`feed`]: the thread that carries what the cache's writer applied to
//!   the disk, off the hot path.
//! - [`seal`]: encryption at rest (`--persist-encryption-key-file`).
//! - [`manifest`]: an encrypted store authenticated as a whole.
//! - [`ledger`]: the latest generation of each encrypted store.
//! - [`squeeze`]: objects deflated in stores that are not encrypted.

pub(crate) mod disk;
pub(crate) mod feed;
pub(crate) mod ledger;
pub(crate) mod manifest;
pub(crate) mod seal;
pub(crate) mod squeeze;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use self::disk::{DiskStore, Header, Loaded};
use self::feed::{Feed, Target};
use self::ledger::{Found, Ledger};
use self::seal::Sealer;
use super::catalog::resolve::GroupResource;
use super::resource::{CacheSettings, ResourceCache, Scope, Writer};
use super::resource_info::ResourceInfo;
use super::state::object::{CachedObject, ObjectShape};
use super::state::store::{Objects, ObjectsBuilder};
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
    /// while it cannot be reached (`stale_reads.rs`).
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
    /// The cluster the store's objects came from, as its header recorded
    /// (`Feed::set_cluster_identity`); `None` when not recorded.
    pub cluster_identity: Option<String>,
}

/// The registry's side of persistence.
#[derive(Debug)]
pub(crate) struct Persistence {
    dir: PathBuf,
    selection: PersistSelection,
    sealer: Option<Arc<Sealer>>,
    /// With `sealer`: the directory's ledger, and whether it was read.
    ledger: Option<(Arc<Ledger>, Found)>,
}

/// How a stored object's sealed bytes are bound to where they belong
/// (AES-GCM's associated data).
pub(crate) fn sealed_as(resource: &str, key: &super::state::object::ObjectKey) -> Vec<u8> {
    format!("{resource}|{}/{}", key.namespace, key.name).into_bytes()
}

impl Persistence {
    /// `None` without `--persist-dir`, or when the directory cannot be
    /// made or written (a read-only file system): then nothing is persisted
    /// or restored, with a loud warning and the degraded gauge, rather than
    /// a failed start. The directory is made, or narrowed, to 0700.
    /// A key file that cannot be read is a start-up error.
    pub(crate) fn new(config: &PersistConfig) -> anyhow::Result<Option<Self>> {
        let Some(dir) = &config.dir else { return Ok(None) };
        let sealer = match &config.encryption_key_file {
            Some(path) => Some(Arc::new(Sealer::from_file(path)?)),
            None => None,
        };
        if let Err(err) = disk::prepare_dir(dir) {
            metrics::gauge!(m::PERSIST_DEGRADED, "resource" => "*").set(1.0);
            tracing::error!(dir = %dir.display(), error = %error_chain(&err), "the persist directory cannot be made or written (a read-only file system?): serving from memory only, nothing is persisted or restored");
            return Ok(None);
        }
        metrics::gauge!(m::PERSIST_DEGRADED, "resource" => "*").set(0.0);
        let ledger = sealer.as_ref().map(|sealer| {
            let (ledger, found) = Ledger::open(dir, sealer.clone());
            if let Found::Unreadable(why) = &found {
                tracing::warn!(dir = %dir.display(), why, "the persist ledger cannot be read: no encrypted store can be proven the latest, and they start cold");
            }
            (Arc::new(ledger), found)
        });
        if sealer.is_none() {
            tracing::warn!(dir = %dir.display(), "persisted caches are not encrypted, and so not authenticated: they trust the disk (whoever can write the directory decides what is served while the upstream is away; a store copied back from earlier is not detected); --persist-encryption-key-file seals and authenticates them");
        }
        Ok(Some(Self { dir: dir.clone(), selection: config.resources.clone(), sealer, ledger }))
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
    /// for what it holds is moved aside and made anew; one the file system
    /// refuses (full, read-only) is logged, the cache is memory-only
    /// meanwhile (degraded), and its feed opens the store once it can.
    pub(crate) fn attach(&self, writer: &mut Writer) {
        let cache = writer.cache().clone();
        let path = self.path_for(&cache.shape.info);
        let opened = match DiskStore::open_with(&path, self.sealer.clone()) {
            Err(err) if !err.is_io() => {
                move_aside(&path, Some(cache.label()), &error_chain(&err));
                DiskStore::open_with(&path, self.sealer.clone())
            }
            other => other,
        };
        let store = opened.unwrap_or_else(|err| {
            metrics::counter!(m::PERSIST_WRITE_ERRORS, "resource" => cache.label().to_owned()).increment(1);
            tracing::error!(resource = %cache.label(), error = %error_chain(&err), "cannot open the persist store; this cache is memory-only until it can (retried every 10 s)");
            DiskStore::closed(&path, self.sealer.clone())
        });
        let header = self.header(&cache);
        let generation = self.last_generation(&path);
        let target =
            Target { store, header, sealer: self.sealer.clone(), ledger: self.ledger(), written_rv: 0, generation };
        writer.persist_to(Box::new(Feed::start(cache, target)));
    }

    /// What a store of `cache` says besides its objects.
    fn header(&self, cache: &ResourceCache) -> Header {
        Header {
            about: About::of(&cache.shape, &cache.scope).encode(),
            key_check: self.sealer.as_ref().map(|s| s.key_check()),
            cluster_identity: None,
            ledger_id: self.ledger().map(|l| l.id()),
        }
    }

    fn ledger(&self) -> Option<Arc<Ledger>> {
        self.ledger.as_ref().map(|(l, _)| l.clone())
    }

    /// The generation the ledger last recorded for the store at `path`: a
    /// store made anew goes on from it, so that it is never taken for a
    /// rolled-back one.
    fn last_generation(&self, path: &Path) -> u64 {
        self.ledger.as_ref().map_or(0, |(l, _)| l.generation(&file_name(path)))
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
        // A new ledger (none, or one that did not open) is written once the
        // stores were looked at (not before: a wrong key stops the start
        // above, and the ledger it could not open stays for the right one).
        if let Some((ledger, found)) = &self.ledger
            && *found != Found::Read
            && let Err(err) = ledger.save()
        {
            tracing::warn!(dir = %self.dir.display(), error = %err, "cannot write the persist ledger");
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
        let (store, loaded) =
            match DiskStore::open_with(path, self.sealer.clone()).and_then(|s| s.load().map(|l| (s, l))) {
                Ok((store, Some(loaded))) => (store, loaded),
                Ok((store, None)) => {
                    drop(store);
                    remove(path, "it holds nothing");
                    return Ok(None);
                }
                Err(err) => return Ok(move_aside(path, None, &error_chain(&err))),
            };
        let about: About = match serde_json::from_slice(&loaded.header.about) {
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
        match (&loaded.header.key_check, &self.sealer) {
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
        if let Some(sealer) = &self.sealer {
            if let Err(why) = sealer.manifest().verify(&loaded.meta, &loaded.objects) {
                return Ok(move_aside(path, Some(&label), &why));
            }
            if let Some(why) = self.not_latest(path, &loaded) {
                metrics::counter!(m::PERSIST_ROLLBACKS_REFUSED, "resource" => label.clone()).increment(1);
                return Ok(move_aside(path, Some(&label), &why));
            }
        }
        let (rv, count, generation) = (loaded.rv, loaded.objects.len(), loaded.generation);
        let cluster_identity = loaded.header.cluster_identity.clone();
        let objects = match decode_all(loaded, &shape, &label, self.sealer.as_deref()) {
            Ok(objects) => objects,
            Err(why) => return Ok(move_aside(path, Some(&label), &why)),
        };
        let mut writer = ResourceCache::create(shape, scope, settings.clone());
        writer.restore(objects, rv);
        let mut header = self.header(writer.cache());
        header.cluster_identity.clone_from(&cluster_identity);
        let target =
            Target { store, header, sealer: self.sealer.clone(), ledger: self.ledger(), written_rv: rv, generation };
        writer.persist_to(Box::new(Feed::start(writer.cache().clone(), target)));
        let took = started.elapsed();
        metrics::gauge!(m::PERSIST_LOAD_DURATION, "resource" => label.clone()).set(took.as_secs_f64());
        tracing::info!(resource = %label, objects = count, rv, took = ?took, "cache loaded from disk; unconfirmed until the upstream answers");
        Ok(Some(Restored { writer, rv, cluster_identity }))
    }

    /// Why an encrypted store (its MAC checked) is not the latest this
    /// directory committed, if it is not: written under another ledger (another
    /// node's directory, or this one's ledger lost), or older than the
    /// generation the ledger recorded (a file copied back).
    fn not_latest(&self, path: &Path, loaded: &Loaded) -> Option<String> {
        let (ledger, found) = self.ledger.as_ref()?;
        if loaded.header.ledger_id.as_deref() != Some(ledger.id().as_str()) {
            return Some(match found {
                Found::Read => {
                    "it was written under another ledger (another node's directory?): it cannot be proven the latest"
                        .to_owned()
                }
                Found::Missing | Found::Unreadable(_) => {
                    "the persist ledger is missing or unreadable: the store cannot be proven the latest".to_owned()
                }
            });
        }
        let last = ledger.generation(&file_name(path));
        (loaded.generation < last).then(|| {
            format!(
                "rolled back: it is at generation {}, and this node committed generation {last} (an older copy of the file?)",
                loaded.generation
            )
        })
    }
}

/// A store's name in the ledger: its file name.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// Every stored object decoded as the cache holds it, each under the key it
/// was stored with: anything else is a store not to be trusted.
fn decode_all(loaded: Loaded, shape: &ObjectShape, label: &str, sealer: Option<&Sealer>) -> Result<Objects, String> {
    let mut objects = ObjectsBuilder::new();
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
        objects.insert(Arc::new(object));
    }
    Ok(objects.finish())
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
