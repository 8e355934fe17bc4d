//! One persisted resource on disk: a redb file holding every object's bytes
//! (exactly as the cache holds them, so loading decodes but never
//! re-encodes) and the resourceVersion they are current at.
//!
//! A store that cannot be opened or read for any reason (truncated,
//! foreign, damaged, a newer format; redb panics on some of these) is an
//! error here, never a panic: the caller moves it aside and starts cold.
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

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::manifest::{DIGEST_ENTRY, Digest, MAC_ENTRY};
use super::seal::Sealer;
use crate::cache::state::object::ObjectKey;

/// (namespace, name) → the object's JSON, as a watch event carries it.
const OBJECTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("objects");
/// The store's metadata: `format`, `rv` and `generation` (u64, big-endian),
/// the [`Header`]'s entries, and in an encrypted store the objects' `digest`
/// and the `mac` over every other entry (`manifest.rs`).
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// Bumped when what is stored changes meaning: a file of another format is
/// moved aside, not misread. Format 3 adds the generation and, encrypted,
/// the manifest's MAC; format 2 may hold deflated objects (`squeeze.rs`);
/// format 1 held JSON only. A store in clear of formats 1 and 2 still loads
/// (and is rewritten as its objects change; every commit writes the format);
/// an encrypted one has no MAC, and so is refused (`persist.rs`).
const FORMAT: &[u8] = b"watchmux-persist-3";
/// Formats this one reads.
const READABLE: [&[u8]; 3] = [FORMAT, b"watchmux-persist-2", b"watchmux-persist-1"];

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

impl DiskError {
    /// An error of the file system (full, read-only, gone), not of what the
    /// file holds: the file is not to blame, and is not moved aside for it.
    /// (redb reports some damage as I/O errors of kind `InvalidData` or
    /// `UnexpectedEof`: those are the file's.)
    pub(crate) fn is_io(&self) -> bool {
        match self {
            Self::Dir { .. } => true,
            Self::Open { source, .. } | Self::Read { source, .. } | Self::Write { source, .. } => match &**source {
                redb::Error::Io(e) => {
                    !matches!(e.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof)
                }
                _ => false,
            },
            Self::Integrity { .. } => false,
        }
    }
}

/// What a store says besides its objects. Written with whole batches and a
/// store's first commit; every field is a metadata entry, and so covered by
/// an encrypted store's MAC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Header {
    /// What the writer said about the resource (`persist::About`, JSON).
    pub about: Bytes,
    /// A value sealed with the store's key, when its objects are encrypted.
    pub key_check: Option<Bytes>,
    /// Which cluster the objects came from, once the sync side knows it
    /// (`None`: not known, or not recorded).
    pub cluster_identity: Option<String>,
    /// The directory's ledger an encrypted store was written under
    /// (`ledger.rs`).
    pub ledger_id: Option<String>,
}

impl Header {
    /// A header naming the resource only (tests).
    #[cfg(test)]
    pub(crate) fn about(about: &'static [u8]) -> Self {
        Self { about: Bytes::from_static(about), ..Self::default() }
    }
}

/// What the last commit left in a file.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub rv: u64,
    /// One more with each commit (0 in stores written before format 3).
    pub generation: u64,
    pub header: Header,
    /// Every metadata entry as stored, for the manifest's check.
    pub meta: BTreeMap<String, Vec<u8>>,
    pub objects: Vec<(ObjectKey, Bytes)>,
}

/// One write transaction.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The version the objects are current at after this batch.
    pub rv: u64,
    /// The store's generation after this batch (`ledger.rs`).
    pub generation: u64,
    /// Replaces everything stored (a list, or a writer that fell behind).
    pub whole: bool,
    /// Written with every whole batch and a store's first.
    pub header: Option<Header>,
    /// New bytes for a key (`Some`), or its deletion (`None`).
    pub changes: Vec<(ObjectKey, Option<Bytes>)>,
}

/// One resource's file.
pub(crate) struct DiskStore {
    /// `None` between a failed reopen and the next.
    db: Option<Database>,
    path: PathBuf,
    /// With encryption: the key whose MAC every commit writes.
    sealer: Option<Arc<Sealer>>,
    /// Tests: commits fail while set (a full disk), and count.
    #[cfg(test)]
    pub(crate) fault: Arc<Fault>,
}

/// A full disk, on demand (tests). As redb does after an I/O error, a
/// handle that failed refuses every later commit until it is reopened.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Fault {
    pub failing: std::sync::atomic::AtomicBool,
    pub failed: std::sync::atomic::AtomicU64,
    pub poisoned: std::sync::atomic::AtomicBool,
    pub reopened: std::sync::atomic::AtomicU64,
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
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(err)?;
    // A read-only file system (ext4's errors=remount-ro) lets the above
    // pass on a directory that exists: a file made and removed says.
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&probe).map_err(err)?;
    fs::remove_file(&probe).map_err(err)
}

/// What a panic said, for the log.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// Opens (or makes) the redb file at `path`. redb panics on some damaged
/// files (one shorter than its header says): that is a store that fails its
/// check, never a crash of watchmux.
fn open_db(path: &Path) -> Result<Database, DiskError> {
    let open_err = |source: redb::Error| DiskError::Open { path: path.to_owned(), source: Box::new(source) };
    match catch_unwind(AssertUnwindSafe(|| Database::create(path))) {
        Ok(db) => db.map_err(|e| open_err(e.into())),
        Err(panic) => Err(DiskError::Integrity {
            path: path.to_owned(),
            why: format!("the store library panicked opening it: {}", panic_message(&*panic)),
        }),
    }
}

/// Opens (or makes) the store's file, mode 0600 before redb writes a byte
/// (an existing file is narrowed too).
fn open_file(path: &Path) -> Result<Database, DiskError> {
    let io_err = |e: std::io::Error| DiskError::Open { path: path.to_owned(), source: Box::new(redb::Error::Io(e)) };
    fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path).map_err(io_err)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io_err)?;
    open_db(path)
}

impl DiskStore {
    /// Opens `path` in clear, making an empty store if there is none.
    #[cfg(test)]
    pub(crate) fn open(path: &Path) -> Result<Self, DiskError> {
        Self::open_with(path, None)
    }

    /// Opens `path`, making an empty store (mode 0600) if there is none;
    /// with `sealer`, every commit writes the manifest's MAC.
    /// redb checks the file's commit checksums as it opens it, and recovers
    /// the last good commit after a crash.
    pub(crate) fn open_with(path: &Path, sealer: Option<Arc<Sealer>>) -> Result<Self, DiskError> {
        let mut store = Self::closed(path, sealer);
        store.db = Some(open_file(path)?);
        Ok(store)
    }

    /// The store at `path`, not open yet: its feed opens it ([`Self::reopen`])
    /// once the file system lets it (a full or read-only disk when a cache
    /// attaches).
    pub(crate) fn closed(path: &Path, sealer: Option<Arc<Sealer>>) -> Self {
        Self {
            db: None,
            path: path.to_owned(),
            sealer,
            #[cfg(test)]
            fault: Arc::default(),
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.db.is_some()
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the file and opens it again: after an I/O error (a full disk)
    /// redb refuses every later transaction on the handle that saw it, so
    /// this is the only way to write again once there is room.
    pub(crate) fn reopen(&mut self) -> Result<(), DiskError> {
        self.db = None; // redb locks the file: the old handle goes first
        self.db = Some(open_file(&self.path)?);
        #[cfg(test)]
        {
            self.fault.poisoned.store(false, std::sync::atomic::Ordering::Release);
            self.fault.reopened.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        Ok(())
    }

    fn db(&self) -> Result<&Database, DiskError> {
        self.db.as_ref().ok_or_else(|| DiskError::Integrity { path: self.path.clone(), why: "not open".to_owned() })
    }

    /// What the last commit left, or `None` for a store never written.
    /// A store of another format, or without a version, fails its check;
    /// so does one redb panics reading.
    pub(crate) fn load(&self) -> Result<Option<Loaded>, DiskError> {
        match catch_unwind(AssertUnwindSafe(|| self.load_inner())) {
            Ok(loaded) => loaded,
            Err(panic) => Err(DiskError::Integrity {
                path: self.path.clone(),
                why: format!("the store library panicked reading it: {}", panic_message(&*panic)),
            }),
        }
    }

    fn load_inner(&self) -> Result<Option<Loaded>, DiskError> {
        let read_err = |source: redb::Error| DiskError::Read { path: self.path.clone(), source: Box::new(source) };
        let bad = |why: &str| DiskError::Integrity { path: self.path.clone(), why: why.to_owned() };
        let txn = self.db()?.begin_read().map_err(|e| read_err(e.into()))?;
        let table = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(read_err(e.into())),
        };
        let mut meta = BTreeMap::new();
        for entry in table.iter().map_err(|e| read_err(e.into()))? {
            let (k, v) = entry.map_err(|e| read_err(e.into()))?;
            meta.insert(k.value().to_owned(), v.value().to_vec());
        }
        if !meta.get("format").is_some_and(|f| READABLE.contains(&f.as_slice())) {
            return Err(bad("not a watchmux store of this format"));
        }
        let number =
            |key: &str| meta.get(key).and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok()).map(u64::from_be_bytes);
        let text = |key: &str| meta.get(key).map(|v| String::from_utf8_lossy(v).into_owned());
        let (Some(rv), Some(about)) = (number("rv"), meta.get("about")) else {
            return Err(bad("no version or no resource"));
        };
        let header = Header {
            about: Bytes::from(about.clone()),
            key_check: meta.get("key_check").cloned().map(Bytes::from),
            cluster_identity: text("cluster_identity"),
            ledger_id: text("ledger_id"),
        };
        let generation = number("generation").unwrap_or(0);
        let table = txn.open_table(OBJECTS).map_err(|e| read_err(e.into()))?;
        let mut objects = Vec::with_capacity(table.len().map_err(|e| read_err(e.into()))? as usize);
        for entry in table.iter().map_err(|e| read_err(e.into()))? {
            let (key, value) = entry.map_err(|e| read_err(e.into()))?;
            let (namespace, name) = key.value();
            objects.push((ObjectKey::new(namespace, name), Bytes::copy_from_slice(value.value())));
        }
        Ok(Some(Loaded { rv, generation, header, meta, objects }))
    }

    /// Commits `batch` in one durable transaction (fsync before it
    /// returns): afterwards a crash loads this batch's state or a later one.
    pub(crate) fn commit(&self, batch: &Batch) -> Result<(), DiskError> {
        let write_err = |source: redb::Error| DiskError::Write { path: self.path.clone(), source: Box::new(source) };
        #[cfg(test)]
        {
            use std::sync::atomic::Ordering;
            if self.fault.failing.load(Ordering::Acquire) || self.fault.poisoned.load(Ordering::Acquire) {
                self.fault.failed.fetch_add(1, Ordering::AcqRel);
                self.fault.poisoned.store(true, Ordering::Release);
                return Err(write_err(redb::Error::Io(std::io::Error::other("no space left on device (injected)"))));
            }
        }
        let mut txn = self.db()?.begin_write().map_err(|e| write_err(e.into()))?;
        txn.set_durability(Durability::Immediate);
        if batch.whole {
            match txn.delete_table(OBJECTS) {
                Ok(_) => {}
                Err(e) => return Err(write_err(e.into())),
            }
        }
        {
            let manifest = self.sealer.as_deref().map(Sealer::manifest);
            let mut meta = txn.open_table(META).map_err(|e| write_err(e.into()))?;
            let mut objects = txn.open_table(OBJECTS).map_err(|e| write_err(e.into()))?;
            let mut digest = match manifest {
                None => None,
                Some(_) if batch.whole => Some(Digest::default()),
                Some(key) => {
                    let stored = meta
                        .get(DIGEST_ENTRY)
                        .map_err(|e| write_err(e.into()))?
                        .and_then(|v| Digest::from_slice(v.value()));
                    Some(match stored {
                        Some(digest) => digest,
                        // A store written before it had one: computed once.
                        None => {
                            let mut digest = Digest::default();
                            for entry in objects.iter().map_err(|e| write_err(e.into()))? {
                                let (k, v) = entry.map_err(|e| write_err(e.into()))?;
                                let (namespace, name) = k.value();
                                let key_of = ObjectKey::new(namespace, name);
                                digest.toggle(&key.entry(&key_of, v.value()));
                            }
                            digest
                        }
                    })
                }
            };
            for (key, bytes) in &batch.changes {
                let k = (key.namespace.as_str(), key.name.as_str());
                let old = match bytes {
                    Some(bytes) => objects.insert(k, &bytes[..]),
                    None => objects.remove(k),
                }
                .map_err(|e| write_err(e.into()))?;
                if let (Some(digest), Some(manifest)) = (&mut digest, manifest) {
                    if let Some(old) = old {
                        digest.toggle(&manifest.entry(key, old.value()));
                    }
                    if let Some(bytes) = bytes {
                        digest.toggle(&manifest.entry(key, bytes));
                    }
                }
            }
            let put = |meta: &mut redb::Table<&str, &[u8]>, key: &str, value: Option<&[u8]>| {
                put_meta(meta, key, value).map_err(|e| write_err(e.into()))
            };
            put(&mut meta, "format", Some(FORMAT))?;
            put(&mut meta, "rv", Some(&batch.rv.to_be_bytes()))?;
            put(&mut meta, "generation", Some(&batch.generation.to_be_bytes()))?;
            if let Some(header) = &batch.header {
                put(&mut meta, "about", Some(&header.about))?;
                put(&mut meta, "key_check", header.key_check.as_deref())?;
                put(&mut meta, "cluster_identity", header.cluster_identity.as_deref().map(str::as_bytes))?;
                put(&mut meta, "ledger_id", header.ledger_id.as_deref().map(str::as_bytes))?;
            }
            if let (Some(digest), Some(manifest)) = (digest, manifest) {
                put(&mut meta, DIGEST_ENTRY, Some(&digest.0))?;
                // Every entry there is now, whatever it is: nothing in the
                // metadata escapes the MAC.
                let mut all = BTreeMap::new();
                for entry in meta.iter().map_err(|e| write_err(e.into()))? {
                    let (k, v) = entry.map_err(|e| write_err(e.into()))?;
                    all.insert(k.value().to_owned(), v.value().to_vec());
                }
                put(&mut meta, MAC_ENTRY, Some(&manifest.mac(&all)))?;
            }
        }
        txn.commit().map_err(|e| write_err(e.into()))
    }
}

/// Sets a metadata entry, or removes it for `None`.
fn put_meta(meta: &mut redb::Table<&str, &[u8]>, key: &str, value: Option<&[u8]>) -> Result<(), redb::StorageError> {
    match value {
        Some(value) => meta.insert(key, value).map(drop),
        None => meta.remove(key).map(drop),
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
        let txn = self.db()?.begin_write().map_err(|e| err(e.into()))?;
        let stats = txn.stats().map_err(|e| err(e.into()));
        txn.abort().map_err(|e| err(e.into()))?;
        let stats = stats?;
        let allocated = stats.allocated_pages() * stats.page_size() as u64;
        if (before as f64) < allocated as f64 * COMPACT_WHEN_FILE_OVER_PAGES {
            return Ok(None);
        }
        for _ in 0..COMPACT_PASSES {
            let Some(db) = self.db.as_mut() else { break };
            if !db.compact().map_err(|e| err(e.into()))? {
                break;
            }
        }
        let after = fs::metadata(&self.path).map_err(|e| err(redb::Error::Io(e)))?.len();
        Ok(Some(Compacted { before, after }))
    }
}

#[cfg(test)]
impl DiskStore {
    /// Sets one metadata entry behind the store's back, as whoever can
    /// write the file could (tests).
    pub(crate) fn tamper_meta(path: &Path, key: &str, value: &[u8]) {
        let db = Database::create(path).expect("opening");
        let txn = db.begin_write().expect("a write transaction");
        txn.open_table(META).expect("meta").insert(key, value).expect("insert");
        txn.commit().expect("commit");
    }

    /// Compacts the file (measurements).
    pub(crate) fn compact(&mut self) -> bool {
        self.db.as_mut().expect("open").compact().expect("compacting")
    }

    /// Where the file's bytes go, by redb's count (measurements).
    pub(crate) fn stats(&self) -> String {
        let txn = self.db().expect("open").begin_write().expect("a write transaction");
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
/// seconds>`, then `-1`, `-2`... for more in the same second, kept for a
/// post-mortem), so the resource starts cold and the bad file is never read
/// again. Returns where it went. A name already taken is never renamed over:
/// a store that fails twice within a second (a crash loop) keeps both.
pub(crate) fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for n in 0..1_000u32 {
        let mut aside = path.as_os_str().to_owned();
        aside.push(format!(".bad-{secs}"));
        if n > 0 {
            aside.push(format!("-{n}"));
        }
        let aside = PathBuf::from(aside);
        if fs::symlink_metadata(&aside).is_err() {
            fs::rename(path, &aside)?;
            return Ok(aside);
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "a thousand stores already moved aside this second"))
}

#[cfg(test)]
mod tests;
