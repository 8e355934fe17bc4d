//! Client certificates as the API server reads them (issue 23, rows 7 and
//! 8), each sent straight to the real API server and through a delegated
//! watchmux with the same certificate, and the answers compared:
//!
//! - subjects in every string type Go's crypto/x509 reads (BMPString,
//!   T61String, IA5String, NumericString, PrintableString, UTF8String),
//!   several CNs of different types (the last is the user), organizations
//!   and UIDs in them; and subjects Go refuses (UniversalString,
//!   VisibleString, invalid PrintableString, BMPString or UTF-8), whose
//!   handshake both refuse;
//! - a certificate that expires while a connection is kept alive, and
//!   while the client holds a TLS 1.3 session to resume: the API server
//!   answers 401 from then on, and so must watchmux.
//!
//! openssl cannot write most of these subjects, so a certificate is first
//! issued by the cluster CA with openssl, then its subject (and validity)
//! replaced with raw DER and its TBSCertificate signed again with the CA's
//! key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, HandshakeKind};

use crate::adversarial::socket;
use crate::auth::{cluster_api, cluster_file, issue_cert, start_delegated};
use crate::env::*;

const WAIT: Duration = Duration::from_secs(20);
const SELF_REVIEW: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const SAR: &str = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;
const LIST: &str = "/api/v1/namespaces/default/configmaps?limit=1";

// ---- certificates with raw subjects ----------------------------------------

/// A DER element.
fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let len = contents.len();
    let mut out = vec![tag];
    if len < 128 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(contents);
    out
}

/// The whole elements (header and contents) of a constructed element's
/// contents.
fn elements(der: &[u8]) -> Vec<&[u8]> {
    let mut rest = contents(der);
    let mut out = Vec::new();
    while !rest.is_empty() {
        let len = element_len(rest);
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    out
}

/// (header length, contents length) of the element `der` starts with.
fn header(der: &[u8]) -> (usize, usize) {
    match der[1] {
        n if n < 0x80 => (2, usize::from(n)),
        n => {
            let k = usize::from(n & 0x7f);
            (2 + k, der[2..2 + k].iter().fold(0, |acc, b| (acc << 8) | usize::from(*b)))
        }
    }
}

fn element_len(der: &[u8]) -> usize {
    let (h, n) = header(der);
    h + n
}

fn contents(der: &[u8]) -> &[u8] {
    let (h, n) = header(der);
    &der[h..h + n]
}

const CN: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x03];
const O: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x0a];
const UID: &[u8] = &[0x06, 0x09, 0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02];

const UTF8: u8 = 12;
const NUMERIC: u8 = 18;
const PRINTABLE: u8 = 19;
const T61: u8 = 20;
const IA5: u8 = 22;
const VISIBLE: u8 = 26;
const UNIVERSAL: u8 = 28;
const BMP: u8 = 30;

/// An attribute: its type (an encoded OID), its string tag, its value's bytes.
type Attr = (&'static [u8], u8, Vec<u8>);

fn bmp(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

fn atav((oid, tag, value): &Attr) -> Vec<u8> {
    tlv(0x30, &[*oid, &tlv(*tag, value)].concat())
}

/// A name of RDNs, each a set of attributes in the order given.
fn name(rdns: &[&[Attr]]) -> Vec<u8> {
    tlv(
        0x30,
        &rdns.iter().flat_map(|rdn| tlv(0x31, &rdn.iter().flat_map(atav).collect::<Vec<_>>())).collect::<Vec<_>>(),
    )
}

fn utc_time(t: SystemTime) -> Vec<u8> {
    let t = rcgen::date_time_ymd(1970, 1, 1) + t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    let text = format!(
        "{:02}{:02}{:02}{:02}{:02}{:02}Z",
        t.year() % 100,
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    tlv(0x17, text.as_bytes())
}

/// A client certificate from the cluster CA whose subject is `subject`
/// (raw DER) and, with `validity`, valid only in that window.
fn issue_raw(
    cluster: &Cluster,
    dir: &Path,
    stem: &str,
    subject: &[u8],
    validity: Option<(SystemTime, SystemTime)>,
) -> (PathBuf, PathBuf) {
    let (crt, key) = issue_cert(cluster, dir, stem, "/CN=placeholder", true);
    let pem = CertificateDer::from_pem_file(&crt).unwrap();
    let cert = elements(pem.as_ref());
    let (tbs, algorithm) = (cert[0], cert[1]);
    let mut fields: Vec<Vec<u8>> = elements(tbs).into_iter().map(<[u8]>::to_vec).collect();
    // [0] version, serial, signature, issuer, validity, subject, ...
    assert_eq!(fields[0][0], 0xa0, "a v3 certificate");
    fields[5] = subject.to_vec();
    if let Some((not_before, not_after)) = validity {
        fields[4] = tlv(0x30, &[utc_time(not_before), utc_time(not_after)].concat());
    }
    let tbs = tlv(0x30, &fields.concat());
    let signature = openssl_sign(&cluster_file(cluster, "ca.key"), &tbs);
    let der = tlv(0x30, &[&tbs[..], algorithm, &tlv(0x03, &[&[0u8][..], &signature].concat())].concat());
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|l| std::str::from_utf8(l).unwrap()).collect();
    std::fs::write(&crt, format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n")))
        .unwrap();
    (crt, key)
}

/// `data` signed with SHA-256 and `key` (the CA's: the signature algorithm
/// openssl wrote into the certificate is that key's).
fn openssl_sign(key: &Path, data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}

// ---- a client that can keep its connection and resume its session ---------

/// What a request got: an HTTP answer, or none because the TLS handshake
/// was refused (the alert the client received).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Answer(u16, String),
    Refused(String),
}

/// A TLS 1.3 client presenting `crt`, trusting the cluster CA, keeping its
/// sessions to resume them.
fn tls13_client(ca: &Path, (crt, key): &(PathBuf, PathBuf)) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let chain = CertificateDer::pem_file_iter(crt).unwrap().map(Result::unwrap).collect();
    let mut config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap())
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::in_memory_sessions(16);
    Arc::new(config)
}

/// An HTTP/1.1 connection over TLS, kept for several requests.
struct Conn {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    handshake: HandshakeKind,
}

impl Conn {
    async fn open(config: &Arc<ClientConfig>, addr: SocketAddr) -> Result<Conn, String> {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::IpAddress(addr.ip().into());
        let tls = tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp).await.map_err(|e| refusal(&e))?;
        let handshake = tls.get_ref().1.handshake_kind().unwrap();
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        Ok(Conn { send, addr, handshake })
    }

    /// A self review: who the server takes the client to be.
    async fn whoami(&mut self) -> Outcome {
        let req = Request::post(SELF_REVIEW)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(SAR.as_bytes())))
            .unwrap();
        self.send(req).await
    }

    /// A list of the cache's (a SubjectAccessReview through watchmux): the
    /// 403 names the user.
    async fn list_configmaps(&mut self) -> Outcome {
        self.send(Request::get(LIST).body(Full::new(Bytes::new())).unwrap()).await
    }

    async fn send(&mut self, mut req: Request<Full<Bytes>>) -> Outcome {
        req.headers_mut().insert("host", self.addr.to_string().parse().unwrap());
        let resp = match tokio::time::timeout(WAIT, self.send.send_request(req)).await.expect("an answer in time") {
            Ok(resp) => resp,
            Err(err) => return Outcome::Refused(refusal(&err)),
        };
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Outcome::Answer(status, String::from_utf8_lossy(&body).into_owned())
    }
}

/// A self review and a list on one new connection.
async fn whoami_and_list(config: &Arc<ClientConfig>, addr: SocketAddr) -> (Outcome, Outcome) {
    match Conn::open(config, addr).await {
        Ok(mut conn) => (conn.whoami().await, conn.list_configmaps().await),
        Err(refused) => (Outcome::Refused(refused.clone()), Outcome::Refused(refused)),
    }
}

/// A refused handshake is the same outcome whatever the alert: Go sends
/// decode_error, rustls's verifier can only ask for bad_certificate. A
/// self review's creationTimestamp is the second it was answered in.
fn same(direct: &Outcome, through: &Outcome) -> bool {
    let review = |body: &str| {
        let mut v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["metadata"].as_object_mut().map(|m| m.remove("creationTimestamp"));
        v
    };
    match (direct, through) {
        (Outcome::Refused(_), Outcome::Refused(_)) => true,
        (Outcome::Answer(201, d), Outcome::Answer(201, v)) => review(d) == review(v),
        (d, v) => d == v,
    }
}

/// The TLS alert behind a failed connection or request, if there was one.
fn refusal(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return format!("{tls:?}");
        }
        if let Some(tls) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return format!("{tls:?}");
        }
        cause = e.source();
    }
    format!("no answer: {err}")
}

/// A delegated watchmux in front of the cluster; both addresses, the CA.
struct Setup {
    cluster: Cluster,
    dir: tempfile::TempDir,
    _wm: Watchmux,
    api: SocketAddr,
    via: SocketAddr,
    ca: PathBuf,
}

impl Setup {
    async fn new() -> Self {
        let cluster = Cluster::from_env();
        let dir = tempfile::tempdir().unwrap();
        let (_wm, server) = start_delegated(&cluster, dir.path(), &[]).await;
        let (api, via) = (socket(&cluster_api(&cluster)), socket(&server));
        let ca = cluster_file(&cluster, "ca.crt");
        Self { cluster, dir, _wm, api, via, ca }
    }
}

fn user_of(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Answer(201, body) => {
            serde_json::from_str::<serde_json::Value>(body).unwrap()["status"]["userInfo"].clone()
        }
        other => panic!("not a self review: {other:?}"),
    }
}

// ---- the rows --------------------------------------------------------------

/// What the API server is expected to make of a row's certificate (proves
/// the row tests what it means to test).
enum Direct {
    /// This user, in these groups (besides system:authenticated) and uid.
    User(&'static str, &'static [&'static str], &'static str),
    /// No identity from the certificate: anonymous, refused the review.
    Anonymous,
    /// The TLS handshake fails: Go cannot parse the certificate.
    Refused,
}

#[tokio::test]
async fn subjects_in_every_string_type_are_read_as_the_api_server_reads_them() {
    let _shared = CLUSTER.read().await;
    let Setup { cluster, dir, _wm, api, via, ca } = Setup::new().await;

    let s = |tag: u8, v: &str| (tag, v.as_bytes().to_vec());
    let cn = |(tag, v): (u8, Vec<u8>)| (CN, tag, v);
    let o = |(tag, v): (u8, Vec<u8>)| (O, tag, v);
    let bmp_of = |v: &str| (BMP, bmp(v));
    let one = |attrs: Vec<Attr>| attrs.into_iter().map(|a| vec![a]).collect::<Vec<_>>();
    let rows: Vec<(&str, Vec<Vec<Attr>>, Direct)> = vec![
        ("CN BMPString", one(vec![cn(bmp_of("x509-bmp"))]), Direct::User("x509-bmp", &[], "")),
        (
            "CN BMPString with a NUL terminator",
            one(vec![cn((BMP, [bmp("x509-bmpz"), vec![0, 0]].concat()))]),
            Direct::User("x509-bmpz", &[], ""),
        ),
        ("CN BMPString outside Latin-1", one(vec![cn(bmp_of("x509-nœud-中"))]), Direct::User("x509-nœud-中", &[], "")),
        (
            "CN T61String read as Latin-1",
            one(vec![cn((T61, b"x509-j\xe9r\xf4me".to_vec()))]),
            Direct::User("x509-jérôme", &[], ""),
        ),
        ("CN IA5String", one(vec![cn(s(IA5, "x509_ia5@x"))]), Direct::User("x509_ia5@x", &[], "")),
        ("CN PrintableString with * and &", one(vec![cn(s(PRINTABLE, "x509*&p"))]), Direct::User("x509*&p", &[], "")),
        (
            "two CNs, UTF8String then BMPString",
            one(vec![cn(s(UTF8, "system:node:x509-n1")), o(s(UTF8, "system:nodes")), cn(bmp_of("x509-nobody"))]),
            Direct::User("x509-nobody", &["system:nodes"], ""),
        ),
        (
            "two CNs, BMPString then T61String",
            one(vec![cn(bmp_of("system:node:x509-n1")), cn(s(T61, "x509-last"))]),
            Direct::User("x509-last", &[], ""),
        ),
        (
            "two CNs in one RDN: the last encoded",
            vec![vec![cn(s(UTF8, "x509-first")), cn(bmp_of("x509-second"))]],
            Direct::User("x509-second", &[], ""),
        ),
        (
            "O in BMPString, T61String and NumericString",
            one(vec![cn(s(UTF8, "x509-groups")), o(bmp_of("x509-g1")), o(s(T61, "x509-g2")), o(s(NUMERIC, "12 3"))]),
            Direct::User("x509-groups", &["x509-g1", "x509-g2", "12 3"], ""),
        ),
        (
            "UID in BMPString",
            one(vec![cn(s(UTF8, "x509-uid")), (UID, BMP, bmp("u-1"))]),
            Direct::User("x509-uid", &[], "u-1"),
        ),
        ("an empty BMPString CN last", one(vec![cn(s(UTF8, "x509-first")), cn(bmp_of(""))]), Direct::Anonymous),
        (
            "CN UniversalString",
            one(vec![cn((UNIVERSAL, "x509-u".chars().flat_map(|c| u32::from(c).to_be_bytes()).collect()))]),
            Direct::Refused,
        ),
        ("O VisibleString", one(vec![cn(s(UTF8, "x509-vis")), o(s(VISIBLE, "dev"))]), Direct::Refused),
        ("CN PrintableString with _", one(vec![cn(s(PRINTABLE, "x509_p"))]), Direct::Refused),
        ("CN BMPString of odd length", one(vec![cn((BMP, [bmp("x509"), vec![0]].concat()))]), Direct::Refused),
        (
            "CN BMPString with a surrogate",
            one(vec![cn((BMP, [bmp("x509"), vec![0xd8, 0x00]].concat()))]),
            Direct::Refused,
        ),
        ("CN UTF8String not UTF-8", one(vec![cn((UTF8, b"x509-\xc3".to_vec()))]), Direct::Refused),
        (
            "an OID length that swallows the value's tag",
            one(vec![
                cn(s(UTF8, "x509-oid")),
                (&[0x06, 0x0a, 0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02], UTF8, b"u".to_vec()),
            ]),
            Direct::Refused,
        ),
    ];

    let mut failures = Vec::new();
    for (i, (row, rdns, expected)) in rows.iter().enumerate() {
        let rdns: Vec<&[Attr]> = rdns.iter().map(Vec::as_slice).collect();
        let cert = issue_raw(&cluster, dir.path(), &format!("x509-{i}"), &name(&rdns), None);
        let (direct, direct_list) = whoami_and_list(&tls13_client(&ca, &cert), api).await;
        let (through, through_list) = whoami_and_list(&tls13_client(&ca, &cert), via).await;
        let as_expected = match (expected, &direct) {
            (Direct::User(name, groups, uid), Outcome::Answer(201, _)) => {
                let user = user_of(&direct);
                let mut want: Vec<&str> = groups.to_vec();
                want.push("system:authenticated");
                user["username"] == *name
                    && user["groups"] == serde_json::json!(want)
                    && user["uid"].as_str().unwrap_or("") == *uid
            }
            (Direct::Anonymous, Outcome::Answer(403, body)) => body.contains("system:anonymous"),
            (Direct::Refused, Outcome::Refused(_)) => true,
            _ => false,
        };
        if !as_expected || !same(&direct, &through) || !same(&direct_list, &through_list) {
            failures.push(format!(
                "{row}:\n  direct:   {direct:?}\n            {direct_list:?}\n  watchmux: {through:?}\n            {through_list:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{} of {} rows differ:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

/// A certificate that expires while in use: on a kept-alive connection
/// and on a TLS 1.3 session the client resumes. The API server verifies
/// the chain at every request, and refuses a resumption whose certificate
/// has expired (crypto/tls), so both get 401 after the expiry; before it,
/// the API server resumes and watchmux does not.
#[tokio::test]
async fn a_certificate_that_expires_in_use_gets_the_api_servers_401() {
    let _shared = CLUSTER.read().await;
    let Setup { cluster, dir, _wm, api, via, ca } = Setup::new().await;

    // Valid for a few seconds: long enough for the requests before the
    // expiry (a few hundred milliseconds), short enough to wait for.
    let now = SystemTime::now();
    let not_after = now + Duration::from_secs(4);
    let subject = name(&[&[(CN, UTF8, b"x509-expiring".to_vec())]]);
    let cert =
        issue_raw(&cluster, dir.path(), "x509-expiring", &subject, Some((now - Duration::from_secs(60), not_after)));

    let mut before = Vec::new();
    let mut kept = Vec::new();
    let mut configs = Vec::new();
    for addr in [api, via] {
        // Per server: rustls keys sessions by name, and both are 127.0.0.1.
        let config = tls13_client(&ca, &cert);
        let mut conn = Conn::open(&config, addr).await.unwrap();
        let first = conn.whoami().await;
        assert_eq!(user_of(&first)["username"], "x509-expiring", "{addr}");
        // A second connection, the session of the first to resume.
        let mut again = Conn::open(&config, addr).await.unwrap();
        let answer = again.whoami().await;
        before.push((again.handshake, answer.clone()));
        kept.push(conn);
        configs.push(config);
    }
    assert!(SystemTime::now() < not_after, "the requests before the expiry took too long: the test proves nothing");
    // The API server resumes; watchmux, verifying client certificates, does not.
    assert_eq!(before[0].0, HandshakeKind::Resumed, "the API server resumes sessions: {before:?}");
    assert_eq!(before[1].0, HandshakeKind::Full, "watchmux resumed a session");
    assert!(same(&before[0].1, &before[1].1), "{before:?}");

    // The one wait on the real clock: certificate validity is the
    // wall-clock time in both servers, to the second. Bounded: 4 s at most
    // from issuing, plus one second for the comparison's resolution.
    let past = not_after + Duration::from_millis(1100);
    if let Ok(left) = past.duration_since(SystemTime::now()) {
        tokio::time::sleep(left).await;
    }

    let mut after = Vec::new();
    for (conn, config) in kept.iter_mut().zip(&configs) {
        let kept_alive = conn.whoami().await;
        let resumed = match Conn::open(config, conn.addr).await {
            Ok(mut c) => (Some(c.handshake), c.whoami().await),
            Err(refused) => (None, Outcome::Refused(refused)),
        };
        after.push((kept_alive, resumed));
    }
    let unauthorized =
        |o: &Outcome| matches!(o, Outcome::Answer(401, body) if body.contains(r#""reason":"Unauthorized""#));
    assert!(unauthorized(&after[0].0) && unauthorized(&after[0].1.1), "the API server: {:?}", after[0]);
    assert_eq!(after[1].0, after[0].0, "kept-alive connection: watchmux (left), the API server (right)");
    assert_eq!(
        after[1].1.1, after[0].1.1,
        "new connection that tried to resume: watchmux (left), the API server (right)"
    );
    // Neither resumed the expired certificate's session.
    assert_eq!((after[0].1.0, after[1].1.0), (Some(HandshakeKind::Full), Some(HandshakeKind::Full)));
}
