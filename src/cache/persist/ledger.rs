//! The node's record of the latest generation each encrypted store
//! committed, kept beside the stores in one sealed file (`ledger.sealed`),
//! so that a store file copied back from earlier, or from another node's
//! directory, is refused at start instead of served.
//!
//! Every commit of an encrypted store carries a generation one above the
//! last, and the directory's ledger id, under the store's MAC
//! (`manifest.rs`); after the commit the ledger records the generation. A
//! store is the latest when its ledger id is this ledger's and its
//! generation is at least the one recorded. The ledger is written after the
//! store (a crash between leaves it one behind, never ahead) by a rename of
//! a fsynced file, and sealed with the store key, so it can be neither
//! forged nor edited; a ledger that is missing or does not open gets a new
//! id, and every store written under the old one starts cold.
//!
//! What it cannot do: an attacker who can write the persist directory can
//! also put back an older copy of the whole directory, ledger included, and
//! that is consistent. There is no place on a node that watchmux can write
//! across restarts and that such an attacker cannot (the chart's persist
//! directory is its one writable host path; a TPM's monotonic counter is not
//! something a node offers in general). The second line is the upstream:
//! a restored cache resumes its watch from the stored version, so everything
//! since (the deletion of a pod included) arrives, or a 410 relists it; it
//! is served unproven only while the upstream cannot be reached
//! (docs/node-local.md).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::seal::Sealer;

/// The ledger's file in the persist directory (not `*.redb`: never a store).
pub(crate) const FILE: &str = "ledger.sealed";
/// The ledger's associated data: its sealed bytes open as nothing else.
const AAD: &[u8] = b"watchmux-persist-ledger";

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Entries {
    /// Random, made when the ledger is: which directory a store belongs to.
    id: String,
    /// A store's file name → the latest generation it committed.
    stores: BTreeMap<String, u64>,
}

/// How the ledger was found at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    Read,
    /// No ledger yet: a new directory, or one whose ledger was removed.
    Missing,
    /// There, but not readable or not sealed with this key.
    Unreadable(String),
}

pub(crate) struct Ledger {
    path: PathBuf,
    sealer: Arc<Sealer>,
    /// Held while the file is written, so writes follow the records' order.
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Ledger {
    /// The directory's ledger, or a new one (with a new id, not yet
    /// written) when it is missing or does not open.
    pub(crate) fn open(dir: &Path, sealer: Arc<Sealer>) -> (Self, Found) {
        let path = dir.join(FILE);
        let (entries, found) = match std::fs::read(&path) {
            Ok(sealed) => match sealer.open(AAD, &sealed) {
                Ok(plain) => match serde_json::from_slice::<Entries>(&plain) {
                    Ok(entries) if !entries.id.is_empty() => (Some(entries), Found::Read),
                    Ok(_) => (None, Found::Unreadable("it has no id".to_owned())),
                    Err(err) => (None, Found::Unreadable(format!("it does not decode: {err}"))),
                },
                Err(_) => {
                    (None, Found::Unreadable("it does not open with the key (another key, or altered)".to_owned()))
                }
            },
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => (None, Found::Missing),
            Err(err) => (None, Found::Unreadable(err.to_string())),
        };
        let entries = entries.unwrap_or_else(|| Entries { id: hex(&sealer.random::<16>()), stores: BTreeMap::new() });
        (Self { path, sealer, entries: Mutex::new(entries) }, found)
    }

    /// The id every store written under this ledger carries.
    pub(crate) fn id(&self) -> String {
        self.entries.lock().id.clone()
    }

    /// The latest generation `store` (a file name) committed, 0 if none.
    pub(crate) fn generation(&self, store: &str) -> u64 {
        self.entries.lock().stores.get(store).copied().unwrap_or(0)
    }

    /// Records that `store` committed `generation`, durably; a lower one
    /// than recorded changes nothing.
    pub(crate) fn record(&self, store: &str, generation: u64) -> std::io::Result<()> {
        let mut entries = self.entries.lock();
        let last = entries.stores.entry(store.to_owned()).or_default();
        if *last >= generation {
            return Ok(());
        }
        *last = generation;
        self.write(&entries)
    }

    /// Writes the ledger as it is (a new one's id, at start).
    pub(crate) fn save(&self) -> std::io::Result<()> {
        let entries = self.entries.lock();
        self.write(&entries)
    }

    /// A new file beside the old, fsynced, then renamed over it: a crash
    /// leaves one or the other, whole.
    fn write(&self, entries: &Entries) -> std::io::Result<()> {
        let plain = serde_json::to_vec(entries).expect("plain data");
        let sealed = self.sealer.seal(AAD, &plain);
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".new");
        let tmp = PathBuf::from(tmp);
        let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        file.write_all(&sealed)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &self.path)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer(k: u8) -> Arc<Sealer> {
        Arc::new(Sealer::from_bytes(&[k; 32]).unwrap())
    }

    #[test]
    fn records_survive_a_reopen_and_never_go_down() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, found) = Ledger::open(dir.path(), sealer(1));
        assert_eq!(found, Found::Missing);
        let id = ledger.id();
        ledger.record("pods.v1.core.redb", 5).unwrap();
        ledger.record("pods.v1.core.redb", 3).unwrap();
        drop(ledger);
        let (ledger, found) = Ledger::open(dir.path(), sealer(1));
        assert_eq!(found, Found::Read);
        assert_eq!((ledger.id(), ledger.generation("pods.v1.core.redb")), (id, 5));
        assert_eq!(ledger.generation("nodes.v1.core.redb"), 0);
        let file = std::fs::read(dir.path().join(FILE)).unwrap();
        assert!(!file.windows(4).any(|w| w == b"pods"), "sealed, not in clear");
    }

    #[test]
    fn a_ledger_that_does_not_open_is_replaced_by_a_new_id() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, _) = Ledger::open(dir.path(), sealer(1));
        ledger.save().unwrap();
        let id = ledger.id();
        let (other, found) = Ledger::open(dir.path(), sealer(2));
        assert!(matches!(found, Found::Unreadable(_)), "{found:?}");
        assert_ne!(other.id(), id);
        let mut bytes = std::fs::read(dir.path().join(FILE)).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(dir.path().join(FILE), bytes).unwrap();
        let (altered, found) = Ledger::open(dir.path(), sealer(1));
        assert!(matches!(found, Found::Unreadable(_)), "{found:?}");
        assert_ne!(altered.id(), id);
    }
}
