//! Client certificates: verified against `--client-ca-file` during the TLS
//! handshake, then turned into an identity by the API server's rule, which
//! is Go's reading of the subject: the common name is the user (the last
//! CN when there are several, as `pkix.Name` keeps the last), each
//! organization a group (a kubelet's certificate says
//! `CN=system:node:<name>, O=system:nodes`), and the UID attribute
//! (OID 1.3.6.1.4.1.57683.2) the uid. More than one UID, or an empty one,
//! makes the certificate an authentication error: the request then needs
//! another credential and gets 401 without one, never anonymous access.
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
pub(crate) enum ClientCaError {
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
pub(crate) fn verifier(ca_file: &Path) -> Result<Arc<dyn ClientCertVerifier>, ClientCaError> {
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

/// The subject attribute the API server reads a user's UID from.
const UID_OID: &str = "1.3.6.1.4.1.57683.2";

/// A verified certificate the API server would not accept as an identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidCertificate {
    #[error("expected 1 UID, but found multiple: {0:?}")]
    SeveralUids(Vec<String>),
    #[error("UID cannot be an empty string")]
    EmptyUid,
    #[error("unable to parse UID into a string")]
    UidNotAString,
}

/// What a verified client certificate says about who the client is.
pub(crate) type CertIdentity = Result<Arc<UserInfo>, InvalidCertificate>;

/// The identity a verified leaf certificate stands for; `None` when its
/// subject has no common name or cannot be read (the API server then tries
/// other authenticators, and so does watchmux).
pub(crate) fn identity(leaf: &CertificateDer<'_>) -> Option<CertIdentity> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let subject: Vec<(String, Option<&str>)> =
        cert.subject().iter_attributes().map(|a| (a.attr_type().to_id_string(), a.as_str().ok())).collect();
    let fingerprint = ring::digest::digest(&ring::digest::SHA256, leaf.as_ref());
    identity_of_subject(subject.iter().map(|(oid, v)| (oid.as_str(), *v)), &hex(fingerprint.as_ref()))
}

/// The API server's reading of a subject, given as (dotted OID, string
/// value) pairs in certificate order, `None` for a value that is no string.
fn identity_of_subject<'a>(
    subject: impl Iterator<Item = (&'a str, Option<&'a str>)>,
    fingerprint_hex: &str,
) -> Option<CertIdentity> {
    const COMMON_NAME: &str = "2.5.4.3";
    const ORGANIZATION: &str = "2.5.4.10";
    let mut name = String::new();
    let mut groups = Vec::new();
    let mut uids = Vec::new();
    let mut uid_not_a_string = false;
    // As Go's FillFromRDNSequence reads it: a later CN replaces an earlier
    // one; values that are not strings are skipped.
    for (oid, value) in subject {
        match (oid, value) {
            (COMMON_NAME, Some(v)) => name = v.to_owned(),
            (ORGANIZATION, Some(v)) => groups.push(v.to_owned()),
            (UID_OID, Some(v)) => uids.push(v.to_owned()),
            (UID_OID, None) => uid_not_a_string = true,
            _ => {}
        }
    }
    if name.is_empty() {
        return None;
    }
    let uid = match uids.as_slice() {
        _ if uid_not_a_string => return Some(Err(InvalidCertificate::UidNotAString)),
        [] => String::new(),
        [one] if one.is_empty() => return Some(Err(InvalidCertificate::EmptyUid)),
        [one] => one.clone(),
        _ => return Some(Err(InvalidCertificate::SeveralUids(uids))),
    };
    let extra = [(CREDENTIAL_ID.to_owned(), vec![format!("X509SHA256={fingerprint_hex}")])].into();
    Some(Ok(Arc::new(UserInfo { name, uid, groups, extra }.with_authenticated_group())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::user::AUTHENTICATED;

    fn cert_with(cn: Option<&str>, orgs: &[&str]) -> CertificateDer<'static> {
        let mut subject = Vec::new();
        if let Some(cn) = cn {
            subject.push((rcgen::DnType::CommonName, cn));
        }
        for o in orgs {
            subject.push((rcgen::DnType::OrganizationName, *o));
        }
        cert_with_subject(&subject)
    }

    /// A certificate whose subject holds these attributes in this order.
    fn cert_with_subject(attrs: &[(rcgen::DnType, &str)]) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        for (ty, value) in attrs {
            dn.push(ty.clone(), *value);
        }
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    fn uid_attr() -> rcgen::DnType {
        rcgen::DnType::CustomDnType(vec![1, 3, 6, 1, 4, 1, 57683, 2])
    }

    fn user(der: &CertificateDer<'_>) -> Arc<UserInfo> {
        identity(der).expect("an identity").expect("a valid identity")
    }

    #[test]
    fn node_certificate_maps_to_the_node_user_and_groups() {
        let der = cert_with(Some("system:node:n1"), &["system:nodes"]);
        let user = user(&der);
        assert_eq!(user.name, "system:node:n1");
        assert_eq!(user.groups, vec!["system:nodes", AUTHENTICATED]);
        let id = &user.extra[CREDENTIAL_ID][0];
        assert!(id.starts_with("X509SHA256=") && id.len() == "X509SHA256=".len() + 64, "{id}");
    }

    fn read(subject: &[(&str, Option<&str>)]) -> Option<CertIdentity> {
        identity_of_subject(subject.iter().copied(), "ab")
    }

    #[test]
    fn the_last_common_name_is_the_user_as_go_reads_the_subject() {
        // CN=system:node:n1, O=system:nodes, CN=nobody is "nobody" to the API server.
        let u = read(&[
            ("2.5.4.3", Some("system:node:n1")),
            ("2.5.4.10", Some("system:nodes")),
            ("2.5.4.3", Some("nobody")),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(u.name, "nobody");
        assert_eq!(u.groups, vec!["system:nodes", AUTHENTICATED]);
        // A CN that is not a string is skipped, not taken as empty.
        let u = read(&[("2.5.4.3", Some("alice")), ("2.5.4.3", None)]).unwrap().unwrap();
        assert_eq!(u.name, "alice");
    }

    #[test]
    fn the_uid_attribute_is_the_uid_and_two_uids_are_an_error() {
        let der = cert_with_subject(&[(rcgen::DnType::CommonName, "alice"), (uid_attr(), "u-123")]);
        assert_eq!(user(&der).uid, "u-123");
        let cn = ("2.5.4.3", Some("alice"));
        assert_eq!(
            read(&[cn, (UID_OID, Some("u-1")), (UID_OID, Some("u-2"))]),
            Some(Err(InvalidCertificate::SeveralUids(vec!["u-1".into(), "u-2".into()])))
        );
        assert_eq!(read(&[cn, (UID_OID, Some(""))]), Some(Err(InvalidCertificate::EmptyUid)));
        assert_eq!(read(&[cn, (UID_OID, None)]), Some(Err(InvalidCertificate::UidNotAString)));
        // Without a CN there is no identity to be wrong about.
        assert_eq!(read(&[(UID_OID, Some("u-1")), (UID_OID, Some("u-2"))]), None);
    }

    #[test]
    fn no_common_name_is_no_identity() {
        assert!(identity(&cert_with(None, &["dev"])).is_none());
        assert!(read(&[("2.5.4.3", Some(""))]).is_none());
        assert!(identity(&CertificateDer::from(vec![1, 2, 3])).is_none());
    }
}
