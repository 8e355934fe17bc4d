//! Certificates with subjects of the fuzzer's choosing, signed by the
//! cluster CA.
//!
//! Certificate libraries write a subject as a map (one CN, one O of each
//! string type they like); the API server reads what the DER says, repeated
//! attributes, every ASN.1 string type, multi-valued RDNs and values Go
//! cannot parse included. So the subject is written here by hand, DER byte
//! by byte, and the rest of the certificate around it: an ECDSA P-256 key
//! (one for every certificate of a run: the subject is what varies), the
//! client or server usage, one day of validity, signed with the CA's RSA key.

use std::path::Path;

use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair, RSA_PKCS1_SHA256, RsaKeyPair};
use serde::{Deserialize, Serialize};

/// How an attribute's value is encoded: every string type X.520 allows,
/// and one that is not a string at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StringType {
    Utf8,
    Printable,
    Ia5,
    /// T61String (TeletexString): Go reads its bytes as Latin-1.
    T61,
    /// BMPString: UCS-2, big-endian.
    Bmp,
    /// UniversalString: UCS-4, big-endian (Go refuses it).
    Universal,
    Visible,
    Numeric,
    /// An INTEGER where a string belongs.
    Integer,
}

pub(crate) const STRING_TYPES: [StringType; 9] = [
    StringType::Utf8,
    StringType::Printable,
    StringType::Ia5,
    StringType::T61,
    StringType::Bmp,
    StringType::Universal,
    StringType::Visible,
    StringType::Numeric,
    StringType::Integer,
];

/// One attribute of a subject: `CN`, `O`, `OU`, `UID` (the API server's
/// 1.3.6.1.4.1.57683.2) or a dotted OID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Attr {
    pub(crate) attr: String,
    pub(crate) string: StringType,
    pub(crate) value: String,
}

impl Attr {
    pub(crate) fn utf8(attr: &str, value: &str) -> Self {
        Self { attr: attr.into(), string: StringType::Utf8, value: value.into() }
    }
}

/// A subject: RDNs in order, each a set of one or more attributes.
pub(crate) type Subject = Vec<Vec<Attr>>;

/// The cluster CA and the one leaf key of a run.
pub(crate) struct Issuer {
    ca_key: RsaKeyPair,
    ca_subject: Vec<u8>,
    pub(crate) leaf_key_pkcs8: Vec<u8>,
    leaf_public: Vec<u8>,
    rng: SystemRandom,
}

/// A certificate and its key, DER.
#[derive(Clone)]
pub(crate) struct Issued {
    pub(crate) cert: Vec<u8>,
    pub(crate) key_pkcs8: Vec<u8>,
}

impl Issued {
    /// Writes `<stem>.crt` and `<stem>.key` (PEM) into `dir`.
    pub(crate) fn write_pem(&self, dir: &Path, stem: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let (crt, key) = (dir.join(format!("{stem}.crt")), dir.join(format!("{stem}.key")));
        std::fs::write(&crt, pem("CERTIFICATE", &self.cert)).unwrap();
        std::fs::write(&key, pem("PRIVATE KEY", &self.key_pkcs8)).unwrap();
        (crt, key)
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

fn pem_der(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(body).expect("PEM body is base64")
}

impl Issuer {
    pub(crate) fn new(ca_crt: &Path, ca_key: &Path) -> Self {
        let ca_der = pem_der(&std::fs::read_to_string(ca_crt).unwrap());
        let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).expect("the cluster CA parses");
        let ca_subject = ca.tbs_certificate.subject.as_raw().to_vec();
        let key_text = std::fs::read_to_string(ca_key).unwrap();
        assert!(key_text.contains("BEGIN PRIVATE KEY"), "the CA key is PKCS#8 (cluster-up.sh writes it with genpkey)");
        let ca_key = RsaKeyPair::from_pkcs8(&pem_der(&key_text)).expect("the CA key is RSA");
        let rng = SystemRandom::new();
        let leaf_key_pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap().as_ref().to_vec();
        let leaf = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &leaf_key_pkcs8, &rng).unwrap();
        let leaf_public = leaf.public_key().as_ref().to_vec();
        Self { ca_key, ca_subject, leaf_key_pkcs8, leaf_public, rng }
    }

    /// A client certificate (clientAuth) for `subject`.
    pub(crate) fn client(&self, subject: &Subject) -> Issued {
        self.issue(&encode_subject(subject), false)
    }

    /// A serving certificate for 127.0.0.1.
    pub(crate) fn server(&self) -> Issued {
        self.issue(&encode_subject(&vec![vec![Attr::utf8("CN", "watchmux-fuzz")]]), true)
    }

    fn issue(&self, subject: &[u8], server: bool) -> Issued {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let alg = seq(&[oid("1.2.840.113549.1.1.11"), vec![0x05, 0x00]].concat());
        let mut serial = [0u8; 16];
        ring::rand::SecureRandom::fill(&self.rng, &mut serial).unwrap();
        serial[0] &= 0x7f;
        serial[0] |= 0x01;
        let spki = seq(&[
            seq(&[oid("1.2.840.10045.2.1"), oid("1.2.840.10045.3.1.7")].concat()),
            bit_string(&self.leaf_public),
        ]
        .concat());
        let usage = if server { "1.3.6.1.5.5.7.3.1" } else { "1.3.6.1.5.5.7.3.2" };
        let mut exts = vec![
            extension("2.5.29.19", true, &seq(&[])),
            extension("2.5.29.15", true, &[0x03, 0x02, 0x07, 0x80]),
            extension("2.5.29.37", false, &seq(&oid(usage))),
        ];
        if server {
            exts.push(extension("2.5.29.17", false, &seq(&tlv(0x87, &[127, 0, 0, 1]))));
        }
        let tbs = seq(&[
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &serial),
            alg.clone(),
            self.ca_subject.clone(),
            seq(&[utc_time(now - 3600), utc_time(now + 86400)].concat()),
            subject.to_vec(),
            spki,
            tlv(0xa3, &seq(&exts.concat())),
        ]
        .concat());
        let mut sig = vec![0u8; self.ca_key.public().modulus_len()];
        self.ca_key.sign(&RSA_PKCS1_SHA256, &self.rng, &tbs, &mut sig).unwrap();
        Issued { cert: seq(&[tbs, alg, bit_string(&sig)].concat()), key_pkcs8: self.leaf_key_pkcs8.clone() }
    }
}

/// The DER of a subject, values encoded as their string type says, whether
/// or not the characters are allowed in it (that is for the reader to judge).
pub(crate) fn encode_subject(subject: &Subject) -> Vec<u8> {
    let rdns: Vec<u8> = subject
        .iter()
        .map(|rdn| {
            let mut atvs: Vec<Vec<u8>> =
                rdn.iter().map(|a| seq(&[oid(attr_oid(&a.attr)), encode_value(a)].concat())).collect();
            atvs.sort(); // DER orders a SET's members by their encodings
            tlv(0x31, &atvs.concat())
        })
        .collect::<Vec<_>>()
        .concat();
    seq(&rdns)
}

fn attr_oid(name: &str) -> &str {
    match name {
        "CN" => "2.5.4.3",
        "O" => "2.5.4.10",
        "OU" => "2.5.4.11",
        "C" => "2.5.4.6",
        "UID" => "1.3.6.1.4.1.57683.2",
        dotted => dotted,
    }
}

fn encode_value(a: &Attr) -> Vec<u8> {
    let v = &a.value;
    match a.string {
        StringType::Utf8 => tlv(0x0c, v.as_bytes()),
        StringType::Printable => tlv(0x13, v.as_bytes()),
        StringType::Ia5 => tlv(0x16, v.as_bytes()),
        StringType::T61 => tlv(0x14, &v.chars().map(|c| c as u32 as u8).collect::<Vec<_>>()),
        StringType::Bmp => tlv(0x1e, &v.encode_utf16().flat_map(u16::to_be_bytes).collect::<Vec<_>>()),
        StringType::Universal => tlv(0x1c, &v.chars().flat_map(|c| (c as u32).to_be_bytes()).collect::<Vec<_>>()),
        StringType::Visible => tlv(0x1a, v.as_bytes()),
        StringType::Numeric => tlv(0x12, v.as_bytes()),
        StringType::Integer => tlv(0x02, &[(v.len() % 100) as u8 + 1]),
    }
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn seq(content: &[u8]) -> Vec<u8> {
    tlv(0x30, content)
}

fn bit_string(bytes: &[u8]) -> Vec<u8> {
    tlv(0x03, &[&[0u8][..], bytes].concat())
}

fn extension(id: &str, critical: bool, value: &[u8]) -> Vec<u8> {
    let mut content = oid(id);
    if critical {
        content.extend([0x01, 0x01, 0xff]);
    }
    content.extend(tlv(0x04, value));
    seq(&content)
}

fn oid(dotted: &str) -> Vec<u8> {
    let arcs: Vec<u64> = dotted.split('.').map(|a| a.parse().expect("a dotted OID")).collect();
    let mut body = vec![(arcs[0] * 40 + arcs[1]) as u8];
    for &arc in &arcs[2..] {
        let mut chunk = vec![(arc & 0x7f) as u8];
        let mut rest = arc >> 7;
        while rest > 0 {
            chunk.push(0x80 | (rest & 0x7f) as u8);
            rest >>= 7;
        }
        chunk.reverse();
        body.extend(chunk);
    }
    tlv(0x06, &body)
}

/// UTCTime `YYMMDDHHMMSSZ` for a Unix time (years 2000 to 2049).
fn utc_time(unix: i64) -> Vec<u8> {
    let t = time::OffsetDateTime::from_unix_timestamp(unix).expect("a time in range");
    let (year, month) = (t.year() % 100, u8::from(t.month()));
    let text = format!("{year:02}{month:02}{:02}{:02}{:02}{:02}Z", t.day(), t.hour(), t.minute(), t.second());
    tlv(0x17, text.as_bytes())
}
