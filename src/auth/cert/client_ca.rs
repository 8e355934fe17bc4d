//! `--client-ca-file`: the TLS handshake's client certificate verifier,
//! and, once a connection is up, the validity window of the chain it
//! presented.
//!
//! The handshake is rustls's verification (chain to a CA of the file,
//! validity, the clientAuth usage) after one check of Go's: crypto/tls
//! parses every certificate the client sends and ends the handshake with a
//! decode_error alert when one does not parse, so certificates whose names
//! Go refuses are refused here the same way. A chain that is sound but
//! outside its validity passes the handshake, as in Go (kube-apiserver
//! only requests certificates and verifies them per request): its requests
//! get the API server's 401, which also tells a client-go exec plugin to
//! renew the certificate, where a failed handshake would not.
//!
//! rustls does not say which chain it verified, and does not check a CA
//! certificate's own validity (a trust anchor has none), while Go checks
//! every certificate of the chain, root included. So after the handshake
//! the chain is built again with webpki, keeping only paths whose every
//! certificate is valid now, and its window is kept with the connection.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, TrustAnchor, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use super::validity::{OutsideValidity, Validity};
use super::{ClientCert, InvalidCertificate, identity, subject_as_go_reads_it};

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

/// The CA certificates of `--client-ca-file`, as a client certificate
/// verifier that accepts clients without a certificate.
#[derive(Debug)]
pub(crate) struct ClientCa {
    /// rustls's verifier: the chain at the handshake, the handshake's
    /// signatures, the CA names offered to clients.
    handshake: Arc<dyn ClientCertVerifier>,
    anchors: Vec<TrustAnchor<'static>>,
    /// Each anchor's own certificate's window, by the anchor's index.
    anchor_validity: Vec<Validity>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCa {
    /// The CA certificates of `pem`, what the file at `path` holds;
    /// certificates that cannot be read as trust anchors are skipped, as
    /// rustls skips them, and none at all is an error.
    pub(crate) fn from_pem(path: &str, pem: &[u8]) -> Result<Arc<Self>, ClientCaError> {
        let path = path.to_owned();
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| ClientCaError::Read { path: path.clone(), source })?;
        let (anchors, anchor_validity): (Vec<_>, Vec<_>) = certs
            .iter()
            .filter_map(|der| Some((webpki::anchor_from_trusted_cert(der).ok()?.to_owned(), Validity::of(der)?)))
            .unzip();
        if anchors.is_empty() {
            return Err(ClientCaError::Empty(path));
        }
        let provider = crate::upstream::tls::provider();
        let algorithms = provider.signature_verification_algorithms;
        let roots = Arc::new(RootCertStore { roots: anchors.clone() });
        let handshake = WebPkiClientVerifier::builder_with_provider(roots, provider)
            .allow_unauthenticated()
            .build()
            .map_err(ClientCaError::Build)?;
        Ok(Arc::new(Self { handshake, anchors, anchor_validity, algorithms }))
    }

    /// The client certificate of a connection whose handshake verified
    /// `chain` (leaf first, as the client sent it); `None` without one.
    pub(crate) fn client_cert(&self, chain: &[CertificateDer<'_>], now: SystemTime) -> Option<ClientCert> {
        let (leaf, intermediates) = chain.split_first()?;
        let validity = self
            .chain_validity(leaf, intermediates, now)
            .map_err(|err| InvalidCertificate::Unverified(err.to_string()));
        Some(ClientCert { identity: identity(leaf), validity })
    }

    /// The window of a chain from `leaf` to a CA of the file that is valid
    /// at `now`, every certificate on it included.
    fn chain_validity(
        &self,
        leaf: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: SystemTime,
    ) -> Result<Validity, webpki::Error> {
        let time = UnixTime::since_unix_epoch(now.duration_since(UNIX_EPOCH).unwrap_or_default());
        let leaf = webpki::EndEntityCert::try_from(leaf)?;
        let found = Cell::new(None);
        // webpki checks the leaf and intermediates at `time` but not the
        // anchor; a path refused here lets webpki try the next one, as
        // Go's chain building tries every candidate issuer.
        let valid_now = |path: &webpki::VerifiedPath<'_>| {
            let window = self.path_validity(path).ok_or(webpki::Error::BadDer)?;
            window.check(now).map_err(|outside| as_webpki_error(outside, time))?;
            found.set(Some(window));
            Ok(())
        };
        leaf.verify_for_usage(
            self.algorithms.all,
            &self.anchors,
            intermediates,
            time,
            webpki::KeyUsage::client_auth(),
            None,
            Some(&valid_now),
        )?;
        found.get().ok_or(webpki::Error::UnknownIssuer)
    }

    fn path_validity(&self, path: &webpki::VerifiedPath<'_>) -> Option<Validity> {
        let anchor = self.anchors.iter().position(|a| std::ptr::eq(a, path.anchor()))?;
        let mut window = self.anchor_validity[anchor].and(Validity::of(&path.end_entity().der())?);
        for cert in path.intermediate_certificates() {
            window = window.and(Validity::of(&cert.der())?);
        }
        Some(window)
    }
}

/// A certificate time (seconds since the epoch) as rustls's.
fn at(secs: i64) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

fn is_about_time(err: &CertificateError) -> bool {
    matches!(
        err,
        CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. }
    )
}

fn as_webpki_error(outside: OutsideValidity, time: UnixTime) -> webpki::Error {
    match outside {
        OutsideValidity::NotYetValid { not_before, .. } => {
            webpki::Error::CertNotValidYet { time, not_before: at(not_before) }
        }
        OutsideValidity::Expired { not_after, .. } => webpki::Error::CertExpired { time, not_after: at(not_after) },
    }
}

impl ClientCertVerifier for ClientCa {
    fn offer_client_auth(&self) -> bool {
        self.handshake.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.handshake.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.handshake.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Go's crypto/tls (processCertsFromClient): every certificate sent
        // must parse, or the handshake ends with decode_error, which is
        // the alert rustls sends for BadEncoding.
        for der in std::iter::once(end_entity).chain(intermediates) {
            if let Err(unparsable) = subject_as_go_reads_it(der.as_ref()) {
                tracing::debug!(error = %crate::error::error_chain(&unparsable), "client certificate Go would not parse");
                return Err(CertificateError::BadEncoding.into());
            }
        }
        match self.handshake.verify_client_cert(end_entity, intermediates, now) {
            Err(rustls::Error::InvalidCertificate(err)) if is_about_time(&err) => {
                // Sound at either end of the leaf's own window: let it
                // through; `client_cert` finds no chain valid now, and
                // every request is refused as the API server refuses it.
                let ends = Validity::of(end_entity.as_ref()).ok_or(CertificateError::BadEncoding)?.ends();
                ends.into_iter()
                    .find_map(|end| self.handshake.verify_client_cert(end_entity, intermediates, at(end)).ok())
                    .ok_or(rustls::Error::InvalidCertificate(err))
            }
            verified => verified,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.handshake.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.handshake.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.handshake.supported_verify_schemes()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, KeyPair, UniversalString,
        date_time_ymd,
    };

    use super::*;

    /// A CA, an intermediate or a client certificate, with its key.
    pub(crate) struct Issued {
        pub cert: rcgen::Certificate,
        pub key: KeyPair,
    }

    /// The years a certificate is valid, from the first of January of the
    /// first to that of the second.
    pub(crate) type Years = (i32, i32);

    fn params(cn: DnValue, years: Years) -> CertificateParams {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.not_before = date_time_ymd(years.0, 1, 1);
        params.not_after = date_time_ymd(years.1, 1, 1);
        params
    }

    /// A CA certificate named `name`, with `key` (a new one if `None`).
    pub(crate) fn ca(name: &str, years: Years, key: Option<KeyPair>) -> Issued {
        let mut params = params(name.into(), years);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = key.unwrap_or_else(|| KeyPair::generate().unwrap());
        Issued { cert: params.self_signed(&key).unwrap(), key }
    }

    pub(crate) fn intermediate(name: &str, years: Years, by: &Issued) -> Issued {
        let mut params = params(name.into(), years);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        Issued { cert: params.signed_by(&key, &by.cert, &by.key).unwrap(), key }
    }

    /// A client certificate whose common name is `cn`.
    pub(crate) fn client(cn: DnValue, years: Years, by: &Issued) -> Issued {
        let mut params = params(cn, years);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        Issued { cert: params.signed_by(&key, &by.cert, &by.key).unwrap(), key }
    }

    /// A `ClientCa` of these CA certificates, from PEM as
    /// `--client-ca-file` holds them.
    pub(crate) fn client_ca(cas: &[&Issued]) -> Arc<ClientCa> {
        let pem: String = cas.iter().map(|ca| ca.cert.pem()).collect();
        ClientCa::from_pem("ca.crt", pem.as_bytes()).unwrap()
    }

    const NOW_VALID: Years = (2000, 2090);

    fn chain(certs: &[&Issued]) -> Vec<CertificateDer<'static>> {
        certs.iter().map(|c| c.cert.der().clone()).collect()
    }

    fn at(year: i32) -> SystemTime {
        let secs = u64::try_from(date_time_ymd(year, 1, 1).unix_timestamp()).unwrap();
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn name_at(
        ca: &ClientCa,
        chain: &[CertificateDer<'_>],
        now: SystemTime,
        then: SystemTime,
    ) -> Result<String, InvalidCertificate> {
        ca.client_cert(chain, now).unwrap().identity_at(then).unwrap().map(|u| u.name.clone())
    }

    #[test]
    fn a_certificate_whose_names_go_cannot_parse_fails_the_handshake() {
        let root = ca("ca", NOW_VALID, None);
        let verifier = client_ca(&[&root]);
        let now = UnixTime::now();
        let universal = DnValue::UniversalString(UniversalString::try_from("alice").unwrap());
        let bad = client(universal, NOW_VALID, &root);
        assert_eq!(
            verifier.verify_client_cert(bad.cert.der(), &[], now).err(),
            Some(rustls::Error::InvalidCertificate(CertificateError::BadEncoding))
        );
        let good = client(DnValue::BmpString("alice".try_into().unwrap()), NOW_VALID, &root);
        assert!(verifier.verify_client_cert(good.cert.der(), &[], now).is_ok());
        // Any certificate the client sends, not only the leaf.
        assert!(verifier.verify_client_cert(good.cert.der(), &[bad.cert.der().clone()], now).is_err());
    }

    #[test]
    fn an_expired_certificate_passes_the_handshake_and_is_no_identity() {
        let root = ca("ca", NOW_VALID, None);
        let verifier = client_ca(&[&root]);
        let now = UnixTime::now();
        for years in [(2000, 2001), (2080, 2081)] {
            let leaf = client("alice".into(), years, &root);
            assert!(verifier.verify_client_cert(leaf.cert.der(), &[], now).is_ok(), "{years:?}");
            let cert = verifier.client_cert(&chain(&[&leaf]), SystemTime::now()).unwrap();
            let name = cert.identity_at(SystemTime::now()).unwrap();
            assert!(matches!(name, Err(InvalidCertificate::Unverified(_))), "{years:?}: {name:?}");
        }
        // An expired intermediate likewise, when the leaf's own window
        // holds a time at which the whole chain verifies.
        let inter = intermediate("inter", (2000, 2001), &root);
        let leaf = client("alice".into(), (2000, 2001), &inter);
        assert!(verifier.verify_client_cert(leaf.cert.der(), &[inter.cert.der().clone()], now).is_ok());
        // Not from another CA, expired or not: that fails the handshake.
        let other = ca("other", NOW_VALID, None);
        for years in [(2000, 2001), NOW_VALID] {
            let leaf = client("alice".into(), years, &other);
            assert!(verifier.verify_client_cert(leaf.cert.der(), &[], now).is_err(), "{years:?}");
        }
    }

    #[test]
    fn the_window_is_where_leaf_intermediate_and_ca_are_all_valid() {
        let root = ca("ca", (2000, 2080), None);
        let inter = intermediate("inter", (2005, 2070), &root);
        let leaf = client("alice".into(), (2010, 2090), &inter);
        let verifier = client_ca(&[&root]);
        let chain = chain(&[&leaf, &inter]);
        let now = SystemTime::now();
        assert_eq!(name_at(&verifier, &chain, now, now), Ok("alice".into()));
        // The intermediate ends first, in 2070; the leaf starts last, in 2010.
        assert_eq!(name_at(&verifier, &chain, now, at(2069)), Ok("alice".into()));
        let late = name_at(&verifier, &chain, now, at(2071));
        assert!(matches!(late, Err(InvalidCertificate::Outside(OutsideValidity::Expired { .. }))), "{late:?}");
        let early = name_at(&verifier, &chain, now, at(2009));
        assert!(matches!(early, Err(InvalidCertificate::Outside(OutsideValidity::NotYetValid { .. }))), "{early:?}");
    }

    #[test]
    fn an_expired_ca_certificate_makes_no_identity_though_rustls_accepts_the_chain() {
        let root = ca("ca", (2000, 2001), None);
        let leaf = client("alice".into(), NOW_VALID, &root);
        let verifier = client_ca(&[&root]);
        // rustls checks no validity of a trust anchor; Go checks the root's.
        assert!(verifier.verify_client_cert(leaf.cert.der(), &[], UnixTime::now()).is_ok());
        let now = SystemTime::now();
        let name = name_at(&verifier, &chain(&[&leaf]), now, now);
        assert!(matches!(name, Err(InvalidCertificate::Unverified(_))), "{name:?}");
    }

    #[test]
    fn a_valid_ca_certificate_of_the_same_name_and_key_is_chosen_over_an_expired_one() {
        let expired = ca("ca", (2000, 2001), None);
        let renewed = ca("ca", (2000, 2080), Some(KeyPair::try_from(expired.key.serialize_der()).unwrap()));
        let leaf = client("alice".into(), NOW_VALID, &expired);
        // The expired one first: webpki tries it, is refused, goes on.
        let verifier = client_ca(&[&expired, &renewed]);
        let now = SystemTime::now();
        assert_eq!(name_at(&verifier, &chain(&[&leaf]), now, now), Ok("alice".into()));
        assert!(name_at(&verifier, &chain(&[&leaf]), now, at(2081)).is_err());
    }

    #[test]
    fn an_unused_expired_intermediate_does_not_narrow_the_window() {
        let root = ca("ca", NOW_VALID, None);
        let stale = intermediate("other", (2000, 2001), &root);
        let leaf = client("alice".into(), NOW_VALID, &root);
        let verifier = client_ca(&[&root]);
        let now = SystemTime::now();
        assert_eq!(name_at(&verifier, &chain(&[&leaf, &stale]), now, at(2080)), Ok("alice".into()));
    }
}
