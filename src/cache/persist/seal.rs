//! Encryption at rest of persisted objects (`--persist-encryption-key-file`):
//! AES-256-GCM from `ring` (already the TLS stack's crypto), a random
//! 96-bit nonce per value, and the object's resource and key as associated
//! data, so a value cannot be moved to another key or resource unnoticed.
//!
//! The key file holds 32 bytes in base64 (as the API server's own
//! `aesgcm` EncryptionConfiguration keys). Each store records a value sealed
//! with its key: a store sealed with another key, or sealed while no key is
//! given, is a start-up error, never a silent cold start (the operator
//! changed something that needs a decision).

use std::path::Path;

use base64::Engine;
use bytes::{Bytes, BytesMut};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use super::manifest::ManifestKey;

/// What a store's `key_check` holds, sealed.
const KEY_CHECK: &[u8] = b"watchmux-persist-key-check";

#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("reading the persist encryption key file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the persist encryption key file {0} must hold 32 bytes in base64")]
    Malformed(String),
}

/// The key, ready to seal and open, and the keys derived from it that
/// authenticate a store as a whole (`manifest.rs`).
pub(crate) struct Sealer {
    key: LessSafeKey,
    random: SystemRandom,
    manifest: ManifestKey,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

/// A value that does not open with this key (another key, or altered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DoesNotOpen;

impl Sealer {
    pub(crate) fn from_file(path: &Path) -> Result<Self, KeyError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read { path: shown.clone(), source })?;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|_| KeyError::Malformed(shown.clone()))?;
        Self::from_bytes(&raw).ok_or(KeyError::Malformed(shown))
    }

    pub(crate) fn from_bytes(raw: &[u8]) -> Option<Self> {
        (raw.len() == 32).then(|| Self {
            key: LessSafeKey::new(UnboundKey::new(&AES_256_GCM, raw).expect("a 32-byte key")),
            random: SystemRandom::new(),
            manifest: ManifestKey::derive(raw),
        })
    }

    /// What authenticates a store sealed with this key as a whole.
    pub(crate) fn manifest(&self) -> &ManifestKey {
        &self.manifest
    }

    /// Random bytes from the system's source (the ledger's id).
    pub(crate) fn random<const N: usize>(&self) -> [u8; N] {
        let mut out = [0u8; N];
        self.random.fill(&mut out).expect("the system's random source");
        out
    }

    /// nonce ‖ ciphertext ‖ tag.
    pub(crate) fn seal(&self, aad: &[u8], plain: &[u8]) -> Bytes {
        let mut nonce = [0u8; NONCE_LEN];
        self.random.fill(&mut nonce).expect("the system's random source");
        let mut out = BytesMut::with_capacity(NONCE_LEN + plain.len() + AES_256_GCM.tag_len());
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut body)
            .expect("sealing fits in memory");
        out.extend_from_slice(&body);
        out.freeze()
    }

    pub(crate) fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Bytes, DoesNotOpen> {
        let (nonce, body) = sealed.split_at_checked(NONCE_LEN).ok_or(DoesNotOpen)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| DoesNotOpen)?;
        let mut body = body.to_vec();
        let plain = self.key.open_in_place(nonce, Aad::from(aad), &mut body).map_err(|_| DoesNotOpen)?;
        Ok(Bytes::copy_from_slice(plain))
    }

    /// The value a store sealed with this key records.
    pub(crate) fn key_check(&self) -> Bytes {
        self.seal(b"key-check", KEY_CHECK)
    }

    /// Whether a store's recorded value was sealed with this key.
    pub(crate) fn is_key_of(&self, key_check: &[u8]) -> bool {
        self.open(b"key-check", key_check).is_ok_and(|v| v == KEY_CHECK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_opens_only_with_its_key_and_its_associated_data() {
        let sealer = Sealer::from_bytes(&[7; 32]).unwrap();
        let sealed = sealer.seal(b"pods|ns/a", b"{\"x\":1}");
        assert_ne!(&sealed[NONCE_LEN..], b"{\"x\":1}");
        assert_eq!(sealer.open(b"pods|ns/a", &sealed).unwrap(), &b"{\"x\":1}"[..]);
        assert_eq!(sealer.open(b"pods|ns/b", &sealed), Err(DoesNotOpen), "moved to another key");
        let other = Sealer::from_bytes(&[8; 32]).unwrap();
        assert_eq!(other.open(b"pods|ns/a", &sealed), Err(DoesNotOpen));
        assert!(sealer.is_key_of(&sealer.key_check()) && !other.is_key_of(&sealer.key_check()));
        assert!(Sealer::from_bytes(&[1; 16]).is_none());
    }

    #[test]
    fn the_key_file_is_32_bytes_in_base64() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, base64::engine::general_purpose::STANDARD.encode([3u8; 32]) + "\n").unwrap();
        assert!(Sealer::from_file(&path).is_ok());
        std::fs::write(&path, "c2hvcnQ=").unwrap();
        assert!(matches!(Sealer::from_file(&path), Err(KeyError::Malformed(_))));
    }
}
