//! What authenticates an encrypted store as a whole, not object by object:
//! a MAC over every entry of the store's metadata table (whatever keys it
//! holds, now or later: format, version, generation, resource, key check,
//! cluster identity, ledger id...) and over a digest of its objects.
//!
//! Why: each object is sealed under its own key (`seal.rs`), but that alone
//! lets a store file copied back from earlier, or objects mixed from two
//! copies, open and load: every value is genuine. The MAC binds the objects
//! to one version and one generation of the store; the ledger (`ledger.rs`)
//! says which generation is the latest.
//!
//! The objects' digest is the XOR of one keyed hash per (key, stored bytes):
//! a commit updates it with the changes alone (the old value out, the new
//! one in; redb hands back the value an insert replaces), so a batch costs
//! what it changes, not the store's size. Without the key nobody can compute
//! an entry's hash, so a set of objects other than the committed one does
//! not match (XOR would only let whoever knows the hashes cancel them out).
//! A load recomputes it over every object: one HMAC pass over the stored
//! bytes, beside the opening and decoding of each that a load does anyway.
//!
//! Stores that are not encrypted have no key, and so no MAC: they trust the
//! disk (docs/node-local.md).

use std::collections::BTreeMap;

use ring::hmac;

use crate::cache::state::object::ObjectKey;

/// The metadata entry holding the MAC; every other entry is covered.
pub(crate) const MAC_ENTRY: &str = "mac";
/// The metadata entry holding the objects' digest.
pub(crate) const DIGEST_ENTRY: &str = "digest";

/// The keys derived from the encryption key for authentication (never the
/// encryption key itself: one key, one use).
pub(crate) struct ManifestKey {
    /// Hashes one object entry.
    entries: hmac::Key,
    /// Authenticates the metadata.
    manifest: hmac::Key,
}

impl ManifestKey {
    /// Both keys, derived from the 32 raw bytes of the encryption key.
    pub(crate) fn derive(raw: &[u8]) -> Self {
        let root = hmac::Key::new(hmac::HMAC_SHA256, raw);
        let derive = |label: &[u8]| hmac::Key::new(hmac::HMAC_SHA256, hmac::sign(&root, label).as_ref());
        Self {
            entries: derive(b"watchmux-persist-object-digest-v1"),
            manifest: derive(b"watchmux-persist-manifest-v1"),
        }
    }

    /// The keyed hash of one stored object: its key and its bytes as stored.
    pub(crate) fn entry(&self, key: &ObjectKey, stored: &[u8]) -> Digest {
        let mut ctx = hmac::Context::with_key(&self.entries);
        for part in [key.namespace.as_bytes(), key.name.as_bytes(), stored] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part);
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        Digest(out)
    }

    /// The MAC of `meta`, its `mac` entry left out.
    pub(crate) fn mac(&self, meta: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
        hmac::sign(&self.manifest, &encode(meta)).as_ref().to_vec()
    }

    /// Whether `meta` (with its `mac` entry) and `objects` are what one
    /// commit made: the MAC is checked with the digest recomputed from the
    /// objects, so an object added, removed, replaced or taken from another
    /// copy fails it as surely as an altered version does.
    pub(crate) fn verify(
        &self,
        meta: &BTreeMap<String, Vec<u8>>,
        objects: &[(ObjectKey, bytes::Bytes)],
    ) -> Result<(), String> {
        let Some(mac) = meta.get(MAC_ENTRY) else {
            return Err(
                "it carries no sealed manifest (written before stores were authenticated, or stripped)".to_owned()
            );
        };
        let mut digest = Digest::default();
        for (key, stored) in objects {
            digest.toggle(&self.entry(key, stored));
        }
        let mut covered = meta.clone();
        covered.insert(DIGEST_ENTRY.to_owned(), digest.0.to_vec());
        hmac::verify(&self.manifest, &encode(&covered), mac)
            .map_err(|_| "its manifest does not authenticate: its version, metadata or objects were altered or mixed from other copies".to_owned())
    }
}

/// The objects' digest: the XOR of their entries' hashes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Digest(pub(crate) [u8; 32]);

impl Digest {
    /// Adds an entry, or takes it out again (XOR).
    pub(crate) fn toggle(&mut self, entry: &Digest) {
        for (a, b) in self.0.iter_mut().zip(entry.0) {
            *a ^= b;
        }
    }

    pub(crate) fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 32]>::try_from(bytes).ok().map(Self)
    }
}

/// Every entry but the MAC, in key order, each part length-prefixed so that
/// no two tables encode alike.
fn encode(meta: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut out = b"watchmux-persist-manifest\0".to_vec();
    for (key, value) in meta.iter().filter(|(k, _)| k.as_str() != MAC_ENTRY) {
        for part in [key.as_bytes(), value] {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn key(name: &str) -> ObjectKey {
        ObjectKey { namespace: "ns".into(), name: name.into() }
    }

    /// A store's metadata as a commit leaves it, MAC included.
    fn sealed(k: &ManifestKey, rv: &[u8], objects: &[(ObjectKey, Bytes)]) -> BTreeMap<String, Vec<u8>> {
        let mut digest = Digest::default();
        for (key, v) in objects {
            digest.toggle(&k.entry(key, v));
        }
        let mut meta = BTreeMap::from([
            ("rv".to_owned(), rv.to_vec()),
            ("about".to_owned(), b"{}".to_vec()),
            (DIGEST_ENTRY.to_owned(), digest.0.to_vec()),
        ]);
        let mac = k.mac(&meta);
        meta.insert(MAC_ENTRY.to_owned(), mac);
        meta
    }

    #[test]
    fn every_entry_and_every_object_is_covered() {
        let k = ManifestKey::derive(&[1; 32]);
        let objects = vec![(key("a"), Bytes::from_static(b"1")), (key("b"), Bytes::from_static(b"2"))];
        let meta = sealed(&k, b"7", &objects);
        assert_eq!(k.verify(&meta, &objects), Ok(()));
        // Any entry changed, added (a key that does not exist yet) or removed.
        let mut altered = meta.clone();
        altered.insert("rv".into(), b"8".to_vec());
        assert!(k.verify(&altered, &objects).is_err(), "version altered");
        let mut added = meta.clone();
        added.insert("cluster_identity".into(), b"x".to_vec());
        assert!(k.verify(&added, &objects).is_err(), "an entry added");
        let mut removed = meta.clone();
        removed.remove("about");
        assert!(k.verify(&removed, &objects).is_err(), "an entry removed");
        let mut stripped = meta.clone();
        stripped.remove(MAC_ENTRY);
        assert!(k.verify(&stripped, &objects).unwrap_err().contains("no sealed manifest"));
        // The objects: one dropped, one replaced by another copy's, one moved.
        assert!(k.verify(&meta, &objects[..1]).is_err(), "an object dropped");
        let older = vec![(key("a"), Bytes::from_static(b"0")), objects[1].clone()];
        assert!(k.verify(&meta, &older).is_err(), "an object from an older copy");
        let moved = vec![(key("c"), Bytes::from_static(b"1")), objects[1].clone()];
        assert!(k.verify(&meta, &moved).is_err(), "an object under another key");
        // Another key verifies nothing.
        assert!(ManifestKey::derive(&[2; 32]).verify(&meta, &objects).is_err());
    }

    #[test]
    fn the_digest_follows_changes_one_by_one() {
        let k = ManifestKey::derive(&[1; 32]);
        let (a1, a2, b) = (k.entry(&key("a"), b"1"), k.entry(&key("a"), b"2"), k.entry(&key("b"), b"x"));
        let mut d = Digest::default();
        d.toggle(&a1);
        d.toggle(&b);
        // a replaced: the old value out, the new one in.
        d.toggle(&a1);
        d.toggle(&a2);
        let mut fresh = Digest::default();
        fresh.toggle(&b);
        fresh.toggle(&a2);
        assert_eq!(d, fresh);
        assert_ne!(a1, k.entry(&ObjectKey::new("nsa", ""), b"1"), "parts are delimited");
    }
}
