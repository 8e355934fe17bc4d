//! Client certificates: verified against `--client-ca-file` during the TLS
//! handshake, then turned into an identity by the API server's rule, which
//! is Go's reading of the subject (crypto/x509's `parseName`, then
//! `pkix.Name.FillFromRDNSequence`, then k8s.io/apiserver's
//! `CommonNameUserConversion`): the common name is the user (the last CN
//! when there are several, whatever its string type), each organization a
//! group (a kubelet's certificate says `CN=system:node:<name>,
//! O=system:nodes`), and the UID attribute (OID 1.3.6.1.4.1.57683.2) the
//! uid. More than one UID, or an empty one, makes the certificate an
//! authentication error: the request then needs another credential and
//! gets 401 without one, never anonymous access.
//!
//! A certificate whose names Go cannot parse fails the handshake, as in Go's
//! crypto/tls ([`name`] holds the rules). The identity holds only while the
//! verified chain is valid: the API server verifies it at every request,
//! and so a request after the leaf, an intermediate or the CA has expired
//! is refused however old its connection ([`validity`]).
//!
//! A client that presents no certificate may still authenticate with a
//! bearer token, so certificates are requested, not required.

pub(crate) mod client_ca;
mod der;
mod name;
mod validity;

use std::sync::Arc;
use std::time::SystemTime;

use rustls::pki_types::CertificateDer;

pub(crate) use self::client_ca::{ClientCa, ClientCaError};
use self::name::{Attribute, NameError};
use self::validity::{OutsideValidity, Validity};
use super::user::{CREDENTIAL_ID, UserInfo};

/// The subject attribute the API server reads a user's UID from.
const UID_OID: [u32; 8] = [1, 3, 6, 1, 4, 1, 57683, 2];
const COMMON_NAME: [u32; 4] = [2, 5, 4, 3];
const ORGANIZATION: [u32; 4] = [2, 5, 4, 10];

/// A verified certificate the API server would not accept as an identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidCertificate {
    #[error("expected 1 UID, but found multiple: {0:?}")]
    SeveralUids(Vec<String>),
    #[error("UID cannot be an empty string")]
    EmptyUid,
    #[error("parsing the certificate")]
    Unparsable(#[source] UnparsableCertificate),
    #[error("verifying the certificate chain: {0}")]
    Unverified(String),
    #[error(transparent)]
    Outside(#[from] OutsideValidity),
}

/// Why a certificate is not one Go's crypto/x509 would parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UnparsableCertificate {
    #[error("not an X.509 certificate")]
    Der,
    #[error("its subject")]
    Subject(#[source] NameError),
    #[error("its issuer")]
    Issuer(#[source] NameError),
}

/// What a verified client certificate says about who the client is.
pub(crate) type CertIdentity = Result<Arc<UserInfo>, InvalidCertificate>;

/// A connection's verified client certificate: who it says the client is,
/// and when its chain is valid.
#[derive(Debug, Clone)]
pub(crate) struct ClientCert {
    /// `None` when the subject has no common name: the API server then
    /// tries other authenticators, and so does watchmux.
    identity: Option<CertIdentity>,
    /// The verified chain's window, or why no chain verified after the
    /// handshake.
    validity: Result<Validity, InvalidCertificate>,
}

impl ClientCert {
    /// Who the certificate says the client is at `now`. Outside the chain's
    /// window it is an error (a 401 without a token), whether or not the
    /// subject names anyone, as the API server's verification fails first.
    pub(crate) fn identity_at(&self, now: SystemTime) -> Option<CertIdentity> {
        match &self.validity {
            Err(invalid) => Some(Err(invalid.clone())),
            Ok(window) => match window.check(now) {
                Err(outside) => Some(Err(outside.into())),
                Ok(()) => self.identity.clone(),
            },
        }
    }
}

/// Who the first certificate of a PEM chain says its holder is, by the same
/// rule as a client's: watchmux's own client certificate, read while the
/// upstream cannot be asked (see [`super::own_identity_reads`]). `None` when
/// there is no certificate, no common name, or no identity the API server
/// would accept.
pub(crate) fn identity_of_pem(pem: &[u8]) -> Option<Arc<UserInfo>> {
    use rustls::pki_types::pem::PemObject;
    let leaf = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    identity(&leaf)?.ok()
}

/// Go's reading of a certificate's names, as crypto/tls needs it to accept
/// the certificate at all: the subject's attributes, once the subject and
/// the issuer are both names Go parses.
fn subject_as_go_reads_it(der: &[u8]) -> Result<Vec<Attribute>, UnparsableCertificate> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|_| UnparsableCertificate::Der)?;
    name::read_name(cert.issuer().as_raw()).map_err(UnparsableCertificate::Issuer)?;
    name::read_name(cert.subject().as_raw()).map_err(UnparsableCertificate::Subject)
}

/// The identity a verified leaf certificate stands for; `None` when its
/// subject has no common name.
fn identity(leaf: &CertificateDer<'_>) -> Option<CertIdentity> {
    let subject = match subject_as_go_reads_it(leaf.as_ref()) {
        Ok(subject) => subject,
        // The handshake refuses these; never anonymous if one got here.
        Err(unparsable) => return Some(Err(InvalidCertificate::Unparsable(unparsable))),
    };
    let fingerprint = ring::digest::digest(&ring::digest::SHA256, leaf.as_ref());
    identity_of_subject(&subject, &hex(fingerprint.as_ref()))
}

/// The API server's reading of a subject whose attributes Go parsed.
fn identity_of_subject(subject: &[Attribute], fingerprint_hex: &str) -> Option<CertIdentity> {
    let mut name = "";
    let mut groups = Vec::new();
    let mut uids = Vec::new();
    // As FillFromRDNSequence: a later CN replaces an earlier one, every O
    // is appended; the UIDs are every attribute of that type
    // (k8s.io/apiserver's parseUIDFromCert). Go parsed every value as a
    // string, so there is no value of another type to skip.
    for Attribute { oid, value } in subject {
        match oid.as_slice() {
            o if o == COMMON_NAME => name = value.as_str(),
            o if o == ORGANIZATION => groups.push(value.clone()),
            o if o == UID_OID => uids.push(value.clone()),
            _ => {}
        }
    }
    if name.is_empty() {
        return None;
    }
    let uid = match uids.as_slice() {
        [] => String::new(),
        [one] if one.is_empty() => return Some(Err(InvalidCertificate::EmptyUid)),
        [one] => one.clone(),
        _ => return Some(Err(InvalidCertificate::SeveralUids(uids))),
    };
    let extra = [(CREDENTIAL_ID.to_owned(), vec![format!("X509SHA256={fingerprint_hex}")])].into();
    Some(Ok(Arc::new(UserInfo { name: name.to_owned(), uid, groups, extra }.with_authenticated_group())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use rcgen::{BmpString, DnType, DnValue, Ia5String, PrintableString, TeletexString, UniversalString};

    use super::*;
    use crate::auth::user::AUTHENTICATED;

    /// A self-signed certificate whose subject holds these attributes in
    /// this order (a `CustomDnType` of the CN's OID makes a second CN).
    pub(crate) fn cert_with_subject(attrs: &[(DnType, DnValue)]) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        for (ty, value) in attrs {
            dn.push(ty.clone(), value.clone());
        }
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    fn utf8(s: &str) -> DnValue {
        DnValue::Utf8String(s.into())
    }

    fn bmp(s: &str) -> DnValue {
        DnValue::BmpString(BmpString::try_from(s).unwrap())
    }

    fn second_cn() -> DnType {
        DnType::CustomDnType(COMMON_NAME.iter().map(|a| u64::from(*a)).collect())
    }

    fn uid_attr() -> DnType {
        DnType::CustomDnType(UID_OID.iter().map(|a| u64::from(*a)).collect())
    }

    fn user(der: &CertificateDer<'_>) -> Arc<UserInfo> {
        identity(der).expect("an identity").expect("a valid identity")
    }

    #[test]
    fn node_certificate_maps_to_the_node_user_and_groups() {
        let der = cert_with_subject(&[
            (DnType::CommonName, utf8("system:node:n1")),
            (DnType::OrganizationName, utf8("system:nodes")),
        ]);
        let user = user(&der);
        assert_eq!(user.name, "system:node:n1");
        assert_eq!(user.groups, vec!["system:nodes", AUTHENTICATED]);
        let id = &user.extra[CREDENTIAL_ID][0];
        assert!(id.starts_with("X509SHA256=") && id.len() == "X509SHA256=".len() + 64, "{id}");
    }

    #[test]
    fn a_common_name_of_each_string_type_go_reads_is_the_user() {
        let cases = [
            (DnValue::PrintableString(PrintableString::try_from("system:node:n1").unwrap()), "system:node:n1"),
            (utf8("système:nœud"), "système:nœud"),
            (bmp("system:node:n1"), "system:node:n1"),
            (bmp("nœud-中"), "nœud-中"),
            (DnValue::TeletexString(TeletexString::try_from("system:node:n1").unwrap()), "system:node:n1"),
            (DnValue::Ia5String(Ia5String::try_from("a@b_c").unwrap()), "a@b_c"),
        ];
        for (value, name) in cases {
            let der = cert_with_subject(&[(DnType::CommonName, value.clone())]);
            assert_eq!(user(&der).name, name, "{value:?}");
        }
    }

    #[test]
    fn the_last_common_name_is_the_user_whatever_its_string_type() {
        // CN=system:node:n1, O=system:nodes, CN=nobody (BMPString) is
        // "nobody" to the API server; x509-parser's as_str() skipped it.
        let der = cert_with_subject(&[
            (DnType::CommonName, utf8("system:node:n1")),
            (DnType::OrganizationName, utf8("system:nodes")),
            (second_cn(), bmp("nobody")),
        ]);
        let u = user(&der);
        assert_eq!(u.name, "nobody");
        assert_eq!(u.groups, vec!["system:nodes", AUTHENTICATED]);
        let der = cert_with_subject(&[
            (DnType::CommonName, bmp("nobody")),
            (second_cn(), DnValue::TeletexString(TeletexString::try_from("system:node:n1").unwrap())),
        ]);
        assert_eq!(user(&der).name, "system:node:n1");
        // An empty last CN is no CN at all, even after a full one.
        let der = cert_with_subject(&[(DnType::CommonName, utf8("alice")), (second_cn(), bmp(""))]);
        assert!(identity(&der).is_none());
    }

    #[test]
    fn every_organization_is_a_group_whatever_its_string_type() {
        let der = cert_with_subject(&[
            (DnType::CommonName, utf8("alice")),
            (DnType::OrganizationName, bmp("system:masters")),
            (DnType::CustomDnType(vec![2, 5, 4, 10]), DnValue::TeletexString(TeletexString::try_from("dev").unwrap())),
        ]);
        assert_eq!(user(&der).groups, vec!["system:masters", "dev", AUTHENTICATED]);
    }

    #[test]
    fn a_certificate_go_cannot_parse_is_never_an_identity() {
        let universal = DnValue::UniversalString(UniversalString::try_from("system:node:n1").unwrap());
        let der = cert_with_subject(&[(DnType::CommonName, universal.clone())]);
        // Self-signed: Go reads the issuer first, and refuses it.
        assert!(matches!(identity(&der), Some(Err(InvalidCertificate::Unparsable(UnparsableCertificate::Issuer(_))))));
        // Not even when the bad attribute is not the CN.
        let der = cert_with_subject(&[(DnType::CommonName, utf8("alice")), (DnType::OrganizationName, universal)]);
        assert!(matches!(identity(&der), Some(Err(InvalidCertificate::Unparsable(_)))));
        assert_eq!(
            identity(&CertificateDer::from(vec![1, 2, 3])),
            Some(Err(InvalidCertificate::Unparsable(UnparsableCertificate::Der)))
        );
    }

    #[test]
    fn the_uid_attribute_is_the_uid_and_two_uids_are_an_error() {
        let der = cert_with_subject(&[(DnType::CommonName, utf8("alice")), (uid_attr(), utf8("u-123"))]);
        assert_eq!(user(&der).uid, "u-123");
        let attr = |oid: &[u32], v: &str| Attribute { oid: oid.to_vec(), value: v.into() };
        let read = |attrs: &[Attribute]| identity_of_subject(attrs, "ab");
        let cn = attr(&COMMON_NAME, "alice");
        assert_eq!(
            read(&[cn.clone(), attr(&UID_OID, "u-1"), attr(&UID_OID, "u-2")]),
            Some(Err(InvalidCertificate::SeveralUids(vec!["u-1".into(), "u-2".into()])))
        );
        assert_eq!(read(&[cn, attr(&UID_OID, "")]), Some(Err(InvalidCertificate::EmptyUid)));
        // Without a CN there is no identity to be wrong about.
        assert_eq!(read(&[attr(&UID_OID, "u-1"), attr(&UID_OID, "u-2")]), None);
    }

    #[test]
    fn no_common_name_is_no_identity() {
        assert!(identity(&cert_with_subject(&[(DnType::OrganizationName, utf8("dev"))])).is_none());
        assert!(identity(&cert_with_subject(&[(DnType::CommonName, utf8(""))])).is_none());
    }

    #[test]
    fn outside_the_chain_s_window_the_identity_is_an_error() {
        use std::time::{Duration, UNIX_EPOCH};
        let der = cert_with_subject(&[(DnType::CommonName, utf8("alice"))]);
        let window = Validity::of(&der).unwrap();
        let cert = ClientCert { identity: identity(&der), validity: Ok(window) };
        let now = SystemTime::now();
        assert_eq!(cert.identity_at(now).unwrap().unwrap().name, "alice");
        // rcgen's default window starts in 1975.
        let before = UNIX_EPOCH + Duration::from_secs(86_400);
        assert!(matches!(
            cert.identity_at(before),
            Some(Err(InvalidCertificate::Outside(OutsideValidity::NotYetValid { .. })))
        ));
        // Even a certificate without a CN is an error then, not an absence.
        let nobody = ClientCert { identity: None, validity: Ok(window) };
        assert!(nobody.identity_at(now).is_none());
        assert!(matches!(nobody.identity_at(before), Some(Err(_))));
        let unverified =
            ClientCert { identity: identity(&der), validity: Err(InvalidCertificate::Unverified("x".into())) };
        assert!(matches!(unverified.identity_at(now), Some(Err(InvalidCertificate::Unverified(_)))));
    }
}
