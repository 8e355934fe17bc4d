//! Client certificates: verified against `--client-ca-file` during the TLS
//! handshake, then turned into an identity by the API server's rule: the
//! subject's common name is the user, its organizations are the groups
//! (a kubelet's certificate says `CN=system:node:<name>, O=system:nodes`).
//!
//! A client that presents no certificate may still authenticate with a
//! bearer token, so certificates are requested, not required.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use super::user::{CREDENTIAL_ID, UserInfo};

#[derive(Debug, thiserror::Error)]
pub enum ClientCaError {
    #[error("reading --client-ca-file {path}")]
    Read {
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("--client-ca-file {0} holds no usable CA certificate")]
    Empty(String),
    #[error("building the client certificate verifier")]
    Build(#[source] rustls::server::VerifierBuilderError),
}

/// A verifier that accepts clients without a certificate and verifies the
/// certificate of those that present one (chain to the CA, validity,
/// the clientAuth extended key usage).
pub fn verifier(ca_file: &Path) -> Result<Arc<dyn ClientCertVerifier>, ClientCaError> {
    let path = ca_file.display().to_string();
    let certs = CertificateDer::pem_file_iter(ca_file)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| ClientCaError::Read { path: path.clone(), source })?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(ClientCaError::Empty(path));
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crate::upstream::tls::provider())
        .allow_unauthenticated()
        .build()
        .map_err(ClientCaError::Build)
}

/// The identity a verified leaf certificate stands for; `None` when its
/// subject has no common name (the API server then tries other
/// authenticators, and so does watchmux).
pub fn identity(leaf: &CertificateDer<'_>) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    if name.is_empty() {
        return None;
    }
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_owned).collect();
    let fingerprint = ring::digest::digest(&ring::digest::SHA256, leaf.as_ref());
    let extra = [(CREDENTIAL_ID.to_owned(), vec![format!("X509SHA256={}", hex(fingerprint.as_ref()))])].into();
    Some(UserInfo { name, uid: String::new(), groups, extra }.with_authenticated_group())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::user::AUTHENTICATED;

    fn cert_with(cn: Option<&str>, orgs: &[&str]) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            dn.push(rcgen::DnType::CommonName, cn);
        }
        for o in orgs {
            dn.push(rcgen::DnType::OrganizationName, *o);
        }
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn node_certificate_maps_to_the_node_user_and_groups() {
        let der = cert_with(Some("system:node:n1"), &["system:nodes"]);
        let user = identity(&der).unwrap();
        assert_eq!(user.name, "system:node:n1");
        assert_eq!(user.groups, vec!["system:nodes", AUTHENTICATED]);
        let id = &user.extra[CREDENTIAL_ID][0];
        assert!(id.starts_with("X509SHA256=") && id.len() == "X509SHA256=".len() + 64, "{id}");
    }

    #[test]
    fn no_common_name_is_no_identity() {
        assert!(identity(&cert_with(None, &["dev"])).is_none());
        assert!(identity(&CertificateDer::from(vec![1, 2, 3])).is_none());
    }
}
