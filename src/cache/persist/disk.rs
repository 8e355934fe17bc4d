//! One persisted resource on disk: a redb file holding every object's bytes
//! (exactly as the cache holds them, so loading decodes but never
//! re-encodes) and the resourceVersion they are current at.
//!
//! Why redb: a copy-on-write B-tree whose commit flips between two
//! checksummed roots, so a crash at any instant (kill -9, power loss) leaves
//! the last committed transaction or the one before it, never a mix; pure
//! Rust (no C toolchain, a few seconds to build on two cores); one file, no
//! WAL to checkpoint. Each batch is one write transaction, and the version
//! is written in that same transaction, so objects and version always
//! belong together. The format is redb's, never a home-made one.
//!
//! This module knows nothing of caches or tasks: it writes batches and
//! reads back what the last commit left. The task that feeds it is
//! `persist/feed.rs`.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[cfg(test)]
use std::sync::Arc;

use bytes::Bytes;
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::cache::state::object::ObjectKey;

/// (namespace, name) → the object's JSON, as a watch event carries it.
const OBJECTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("objects");
/// `rv` (u64, big-endian), `about` (the resource, JSON), `format`, and with
/// encryption at rest `key_check` (`seal.rs`).
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// Bumped when what is stored changes meaning: a file of another format is
/// moved aside, not misread. Format 2 may hold deflated objects
/// (`squeeze.rs`); format 1 held JSON only, which format 2 still reads, so
/// a store written before an upgrade loads (and is rewritten as its objects
/// change; every commit writes the format).
const FORMAT: &[u8] = b"watchmux-persist-2";
/// Formats this one reads.
const READABLE: [&[u8]; 2] = [FORMAT, b"watchmux-persist-1"];

#[derive(Debug, thiserror::Error)]
pub(crate) enum DiskError {
    #[error("preparing the persist directory {path}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("opening {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    #[error("{path} fails its integrity check: {why}")]
    Integrity { path: PathBuf, why: String },
}

/// What the last commit left in a file.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub rv: u64,
    /// What the writer said about the resource (`persist::About`, JSON).
    pub about: Bytes,
    /// A value sealed with the store's key, when its objects are encrypted.
    pub key_check: Option<Bytes>,
    pub objects: Vec<(ObjectKey, Bytes)>,
}

/// One write transaction.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The version the objects are current at after this batch.
    pub rv: u64,
    /// Replaces everything stored (a list, or a writer that fell behind).
    pub whole: bool,
    /// Written with every whole batch.
    pub about: Option<Bytes>,
    /// Written with `about`, when objects are encrypted.
    pub key_check: Option<Bytes>,
    /// New bytes for a key (`Some`), or its deletion (`None`).
    pub changes: Vec<(ObjectKey, Option<Bytes>)>,
}

/// One resource's file.
pub(crate) struct DiskStore {
    db: Database,
    path: PathBuf,
    /// Tests: commits fail while set (a full disk), and count.
    #[cfg(test)]
    pub(crate) fault: Arc<Fault>,
}

/// A full disk, on demand (tests).
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Fault {
    pub failing: std::sync::atomic::AtomicBool,
    pub failed: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore").field("path", &self.path).finish_non_exhaustive()
    }
}

/// Makes `dir` (and its parents) if needed and leaves it the process
/// user's only (0700), whatever it was: it holds cluster objects.
pub(crate) fn prepare_dir(dir: &Path) -> Result<(), DiskError> {
    let err = |source| DiskError::Dir { path: dir.to_owned(), source };
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(err)
}

impl DiskStore {
    /// Opens `path`, making an empty store (mode 0600) if there is none.
    /// redb checks the file's commit checksums as it opens it, and recovers
    /// the last good commit after a crash.
    pub(crate) fn open(path: &Path) -> Result<Self, DiskError> {
        let open_err = |source: redb::Error| DiskError::Open { path: path.to_owned(), source: Box::new(source) };
        let io_err = |e: std::io::Error| open_err(redb::Error::Io(e));
        // Made 0600 before redb writes a byte; an existing file is narrowed too.
        fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path).map_err(io_err)?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io_err)?;
        let db = Database::create(path).map_err(|e| open_err(e.into()))?;
        Ok(Self {
            db,
            path: path.to_owned(),
            #[cfg(test)]
            fault: Arc::default(),
        })
    }

    /// What the last commit left, or `None` for a store never written.
    /// A store of another format, or without a version, fails its check.
    pub(crate) fn load(&self) -> Result<Option<Loaded>, DiskError> {
        let read_err = |source: redb::Error| DiskError::Read { path: self.path.clone(), source: Box::new(source) };
        let bad = |why: &str| DiskError::Integrity { path: self.path.clone(), why: why.to_owned() };
        let txn = self.db.begin_read().map_err(|e| read_err(e.into()))?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(read_err(e.into())),
        };
        let get = |key: &str| -> Result<Option<Vec<u8>>, DiskError> {
            Ok(meta.get(key).map_err(|e| read_err(e.into()))?.map(|v| v.value().to_vec()))
        };
        if !get("format")?.is_some_and(|f| READABLE.contains(&f.as_slice())) {
            return Err(bad("not a watchmux store of this format"));
        }
        let rv = get("rv")?.and_then(|v| <[u8; 8]>::try_from(v).ok()).map(u64::from_be_bytes);
        let (Some(rv), Some(about)) = (rv, get("about")?) else { return Err(bad("no version or no resource")) };
        let key_check = get("key_check")?.map(Bytes::from);
        let table = txn.open_table(OBJECTS).map_err(|e| read_err(e.into()))?;
        let mut objects = Vec::with_capacity(table.len().map_err(|e| read_err(e.into()))? as usize);
        for entry in table.iter().map_err(|e| read_err(e.into()))? {
            let (key, value) = entry.map_err(|e| read_err(e.into()))?;
            let (namespace, name) = key.value();
            objects.push((
                ObjectKey { namespace: namespace.to_owned(), name: name.to_owned() },
                Bytes::copy_from_slice(value.value()),
            ));
        }
        Ok(Some(Loaded { rv, about: Bytes::from(about), key_check, objects }))
    }

    /// Commits `batch` in one durable transaction (fsync before it
    /// returns): afterwards a crash loads this batch's state or a later one.
    pub(crate) fn commit(&self, batch: &Batch) -> Result<(), DiskError> {
        let write_err = |source: redb::Error| DiskError::Write { path: self.path.clone(), source: Box::new(source) };
        #[cfg(test)]
        if self.fault.failing.load(std::sync::atomic::Ordering::Acquire) {
            self.fault.failed.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            return Err(write_err(redb::Error::Io(std::io::Error::other("no space left on device (injected)"))));
        }
        let mut txn = self.db.begin_write().map_err(|e| write_err(e.into()))?;
        txn.set_durability(Durability::Immediate);
        if batch.whole {
            match txn.delete_table(OBJECTS) {
                Ok(_) => {}
                Err(e) => return Err(write_err(e.into())),
            }
        }
        {
            let mut objects = txn.open_table(OBJECTS).map_err(|e| write_err(e.into()))?;
            for (key, bytes) in &batch.changes {
                let k = (key.namespace.as_str(), key.name.as_str());
                match bytes {
                    Some(bytes) => objects.insert(k, &bytes[..]).map(drop),
                    None => objects.remove(k).map(drop),
                }
                .map_err(|e| write_err(e.into()))?;
            }
            let mut meta = txn.open_table(META).map_err(|e| write_err(e.into()))?;
            meta.insert("format", FORMAT).map_err(|e| write_err(e.into()))?;
            meta.insert("rv", &batch.rv.to_be_bytes()[..]).map_err(|e| write_err(e.into()))?;
            if let Some(about) = &batch.about {
                meta.insert("about", &about[..]).map_err(|e| write_err(e.into()))?;
            }
            if let Some(check) = &batch.key_check {
                meta.insert("key_check", &check[..]).map_err(|e| write_err(e.into()))?;
            }
        }
        txn.commit().map_err(|e| write_err(e.into()))
    }
}

/// A file at least this large whose allocated pages fill less than
/// 1/[`COMPACT_WHEN_FILE_OVER_PAGES`] of it is compacted (`compact_if_loose`).
const COMPACT_MIN_FILE: u64 = 4 << 20;
/// File size over the bytes of its allocated pages that asks for compaction.
/// redb's copy-on-write commits leave the old pages free inside the file,
/// and a batch that rewrites most objects needs old and new side by side,
/// so the file keeps its high-water mark until compacted.
const COMPACT_WHEN_FILE_OVER_PAGES: f64 = 1.25;
/// Compaction passes at most (each moves what it can to lower pages, then
/// the file is truncated).
const COMPACT_PASSES: usize = 8;

/// What a compaction did: the file's length before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compacted {
    pub before: u64,
    pub after: u64,
}

impl DiskStore {
    /// Compacts the file when its free pages are more than a quarter of what
    /// its live pages take (and it is a few MiB at least); `None` when it
    /// was tight enough. Run by the store's own thread between commits: no
    /// read transaction is open then (reads happen once, at start).
    pub(crate) fn compact_if_loose(&mut self) -> Result<Option<Compacted>, DiskError> {
        let err = |source: redb::Error| DiskError::Write { path: self.path.clone(), source: Box::new(source) };
        let before = fs::metadata(&self.path).map_err(|e| err(redb::Error::Io(e)))?.len();
        if before < COMPACT_MIN_FILE {
            return Ok(None);
        }
        let txn = self.db.begin_write().map_err(|e| err(e.into()))?;
        let stats = txn.stats().map_err(|e| err(e.into()));
        txn.abort().map_err(|e| err(e.into()))?;
        let stats = stats?;
        let allocated = stats.allocated_pages() * stats.page_size() as u64;
        if (before as f64) < allocated as f64 * COMPACT_WHEN_FILE_OVER_PAGES {
            return Ok(None);
        }
        for _ in 0..COMPACT_PASSES {
            if !self.db.compact().map_err(|e| err(e.into()))? {
                break;
            }
        }
        let after = fs::metadata(&self.path).map_err(|e| err(redb::Error::Io(e)))?.len();
        Ok(Some(Compacted { before, after }))
    }
}

#[cfg(test)]
impl DiskStore {
    /// Compacts the file (measurements).
    pub(crate) fn compact(&mut self) -> bool {
        self.db.compact().expect("compacting")
    }

    /// Where the file's bytes go, by redb's count (measurements).
    pub(crate) fn stats(&self) -> String {
        let txn = self.db.begin_write().expect("a write transaction");
        let s = txn.stats().expect("stats");
        let line = format!(
            "allocated_pages={} leaf_pages={} branch_pages={} stored_bytes={} metadata_bytes={} fragmented_bytes={} page_size={}",
            s.allocated_pages(),
            s.leaf_pages(),
            s.branch_pages(),
            s.stored_bytes(),
            s.metadata_bytes(),
            s.fragmented_bytes(),
            s.page_size()
        );
        txn.abort().expect("abort");
        line
    }
}

/// Moves a store that failed its check out of the way (`<name>.bad-<unix
/// seconds>`, kept for a post-mortem), so the resource starts cold and the
/// bad file is never read again. Returns where it went.
pub(crate) fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut aside = path.as_os_str().to_owned();
    aside.push(format!(".bad-{secs}"));
    let aside = PathBuf::from(aside);
    fs::rename(path, &aside)?;
    Ok(aside)
}

#[cfg(test)]
mod tests;
