//! `--tls-min-version` and `--tls-cipher-suites`: kube-apiserver's flags,
//! with its names, mapped onto rustls's protocol versions and cipher suites.
//!
//! kube-apiserver (k8s.io/component-base `cli/flag`) takes the names of Go's
//! crypto/tls: `VersionTLS10` to `VersionTLS13`, and every cipher suite Go
//! implements, insecure ones included, by IANA name. rustls implements
//! less: TLS 1.2 and 1.3 only, and for TLS 1.2 only AEAD suites with an
//! ECDHE key exchange. A name Go knows and rustls does not is refused at
//! start, naming it, rather than dropped: a flag copied from an API
//! server's manifest must not quietly mean something else here.
//!
//! As in Go:
//! - the default minimum is TLS 1.2 (component-base's `DefaultTLSVersion`
//!   in the Kubernetes this is tested against, v1.37);
//! - TLS 1.3's suites are not configurable: their names are accepted and
//!   change nothing, all three are always offered;
//! - the order of the list does not matter (Go ignores it since 1.17):
//!   the suites are taken in rustls's order of preference;
//! - no list means every TLS 1.2 suite rustls implements.
//!
//! A list that names only TLS 1.3 suites leaves TLS 1.2 without any, so
//! only TLS 1.3 clients connect, as with Go.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::{CipherSuite, ProtocolVersion, SupportedProtocolVersion};

/// The lowest TLS version the API listener accepts (`--tls-min-version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMinVersion {
    /// `VersionTLS12`: TLS 1.2 and 1.3, kube-apiserver's default.
    #[default]
    Tls12,
    /// `VersionTLS13`: TLS 1.3 only.
    Tls13,
}

/// One `--tls-cipher-suites` entry, by its IANA number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsCipherSuite(CipherSuite);

/// The API listener's TLS settings besides its files.
#[derive(Debug, Clone, Default)]
pub struct TlsProtocol {
    /// `--tls-min-version`.
    pub min_version: TlsMinVersion,
    /// `--tls-cipher-suites`; empty: every TLS 1.2 suite rustls implements.
    pub cipher_suites: Vec<TlsCipherSuite>,
}

/// The names kube-apiserver accepts that rustls implements, Go's two
/// older names of the ChaCha20 suites included (component-base keeps them).
const IMPLEMENTED: &[(&str, CipherSuite)] = &[
    ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
    ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
    ("TLS_AES_128_GCM_SHA256", CipherSuite::TLS13_AES_128_GCM_SHA256),
    ("TLS_AES_256_GCM_SHA384", CipherSuite::TLS13_AES_256_GCM_SHA384),
    ("TLS_CHACHA20_POLY1305_SHA256", CipherSuite::TLS13_CHACHA20_POLY1305_SHA256),
];

/// The names kube-apiserver accepts (Go implements them) that rustls does
/// not: CBC modes, RSA key exchange, RC4 and 3DES.
const NOT_IMPLEMENTED: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
];

/// Parses `--tls-min-version`: `VersionTLS12` or `VersionTLS13`.
pub fn parse_tls_min_version(s: &str) -> Result<TlsMinVersion, String> {
    match s.trim() {
        "VersionTLS12" => Ok(TlsMinVersion::Tls12),
        "VersionTLS13" => Ok(TlsMinVersion::Tls13),
        old @ ("VersionTLS10" | "VersionTLS11") => {
            Err(format!("{old}: watchmux's TLS (rustls) has TLS 1.2 and 1.3 only; use VersionTLS12 or VersionTLS13"))
        }
        other => Err(format!("unknown TLS version {other:?}: use VersionTLS12 or VersionTLS13")),
    }
}

/// Parses one `--tls-cipher-suites` entry, an IANA name as kube-apiserver
/// takes it.
pub fn parse_cipher_suite(s: &str) -> Result<TlsCipherSuite, String> {
    let name = s.trim();
    if let Some((_, suite)) = IMPLEMENTED.iter().find(|(known, _)| *known == name) {
        return Ok(TlsCipherSuite(*suite));
    }
    let usable = || IMPLEMENTED.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    if NOT_IMPLEMENTED.contains(&name) {
        Err(format!(
            "cipher suite {name} is one kube-apiserver accepts but watchmux's TLS (rustls) does not implement \
             (it has no CBC, RSA key exchange, RC4 or 3DES suites); use some of: {}",
            usable()
        ))
    } else {
        Err(format!("unknown cipher suite {name:?}; use some of: {}", usable()))
    }
}

impl TlsProtocol {
    /// The protocol versions offered, newest first.
    pub(crate) fn versions(&self) -> &'static [&'static SupportedProtocolVersion] {
        const TLS13_ONLY: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];
        match self.min_version {
            TlsMinVersion::Tls12 => rustls::DEFAULT_VERSIONS,
            TlsMinVersion::Tls13 => TLS13_ONLY,
        }
    }

    /// watchmux's crypto provider with the TLS 1.2 suites narrowed to the
    /// list, in the provider's order; TLS 1.3's all kept.
    pub(crate) fn provider(&self) -> Arc<CryptoProvider> {
        let mut provider = Arc::unwrap_or_clone(crate::upstream::tls::provider());
        if !self.cipher_suites.is_empty() {
            provider.cipher_suites.retain(|suite| {
                suite.version().version == ProtocolVersion::TLSv1_3
                    || self.cipher_suites.contains(&TlsCipherSuite(suite.suite()))
            });
        }
        Arc::new(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_versions_by_kube_apiserver_names() {
        assert_eq!(parse_tls_min_version("VersionTLS12"), Ok(TlsMinVersion::Tls12));
        assert_eq!(parse_tls_min_version("VersionTLS13"), Ok(TlsMinVersion::Tls13));
        for old in ["VersionTLS10", "VersionTLS11"] {
            let refused = parse_tls_min_version(old).unwrap_err();
            assert!(refused.starts_with(old) && refused.contains("TLS 1.2 and 1.3 only"), "{refused}");
        }
        for wrong in ["1.2", "TLS12", "versiontls12", ""] {
            assert!(parse_tls_min_version(wrong).unwrap_err().starts_with("unknown TLS version"), "{wrong}");
        }
        assert_eq!(TlsMinVersion::default(), TlsMinVersion::Tls12, "kube-apiserver's default");
    }

    #[test]
    fn cipher_suite_names() {
        let table: &[(&str, Result<CipherSuite, &str>)] = &[
            ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", Ok(CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)),
            ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", Ok(CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384)),
            // Go's older name, which component-base still takes.
            ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", Ok(CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256)),
            (" TLS_AES_128_GCM_SHA256 ", Ok(CipherSuite::TLS13_AES_128_GCM_SHA256)),
            // Go has them; rustls does not.
            ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", Err("does not implement")),
            ("TLS_RSA_WITH_AES_128_GCM_SHA256", Err("does not implement")),
            ("TLS_RSA_WITH_RC4_128_SHA", Err("does not implement")),
            // Nobody's.
            ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA512", Err("unknown cipher suite")),
            ("tls_ecdhe_rsa_with_aes_128_gcm_sha256", Err("unknown cipher suite")),
            ("", Err("unknown cipher suite")),
        ];
        for (name, want) in table {
            match (parse_cipher_suite(name), want) {
                (Ok(TlsCipherSuite(got)), Ok(want)) => assert_eq!(got, *want, "{name}"),
                (Err(msg), Err(want)) => {
                    assert!(msg.contains(want) && msg.contains(name.trim()), "{name}: {msg}");
                }
                (got, want) => panic!("{name}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn every_implemented_name_is_a_suite_of_the_provider() {
        let provider = crate::upstream::tls::provider();
        for (name, suite) in IMPLEMENTED {
            assert!(provider.cipher_suites.iter().any(|s| s.suite() == *suite), "{name}");
            assert!(!NOT_IMPLEMENTED.contains(name), "{name}");
        }
    }

    fn suites(protocol: &TlsProtocol) -> Vec<CipherSuite> {
        protocol.provider().cipher_suites.iter().map(|s| s.suite()).collect()
    }

    #[test]
    fn the_list_narrows_tls12_and_leaves_tls13_alone() {
        let all = suites(&TlsProtocol::default());
        assert_eq!(all.len(), 9, "rustls's three TLS 1.3 and six TLS 1.2 suites: {all:?}");
        let listed = ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"];
        let protocol = TlsProtocol {
            cipher_suites: listed.iter().map(|n| parse_cipher_suite(n).unwrap()).collect(),
            ..TlsProtocol::default()
        };
        let narrowed = suites(&protocol);
        assert_eq!(
            narrowed,
            [
                CipherSuite::TLS13_AES_256_GCM_SHA384,
                CipherSuite::TLS13_AES_128_GCM_SHA256,
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
                CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            ]
        );
    }
}
