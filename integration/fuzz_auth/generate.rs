//! Generation: a seeded PRNG and, from it, one request of a case: who sends
//! it (anonymous, a token, a certificate with a generated subject), which
//! impersonation headers, which path (built from discovery), which query and
//! which `Accept`.
//!
//! Shared answers (what watchmux answers alike to every caller it admits)
//! get their own weight: `/api` and `/apis` with the aggregated-discovery
//! `Accept` kubectl and client-go send, and the OpenAPI v3 index and the
//! hashed, immutable documents it names (from the fixture's `/openapi/v3`,
//! and the same path with no hash or a stale one). So does watchmux's own
//! upstream identity (the node's certificate, exactly), with the reads a
//! kubelet makes: the one caller the offline target may answer.
//!
//! Values come half from a dictionary of the fixture's names (so that a
//! generated identity can hold a right and a generated path can name an
//! object) and half from generators that walk every length limit and
//! character class the API server's validation knows. Each case has its own
//! PRNG, derived from the run's seed and the case's number, so a case
//! reproduces alone.

use serde::{Deserialize, Serialize};

use crate::fixtures::{self, Resource};
use crate::x509::{Attr, STRING_TYPES, StringType, Subject};

/// SplitMix64: tiny, good enough for test generation, and the same stream
/// on every platform and every version of every crate.
pub(crate) struct Rng(u64);

impl Rng {
    /// The PRNG of case `case` of the run seeded `seed`.
    pub(crate) fn for_case(seed: u64, case: u64) -> Self {
        let mut r = Rng(seed ^ case.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.next();
        r
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub(crate) fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Who sends a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Who {
    Anonymous,
    /// A fixture service account's token (`namespace/name`), `admin` (the
    /// static system:masters token) or `garbage` (a token nobody issued).
    Token {
        account: String,
    },
    /// A client certificate from the cluster CA with this subject, and
    /// optionally a token beside it.
    Cert {
        subject: Subject,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
}

/// One generated (or recorded) request, literal: replaying it needs only
/// the fixture, not the generator that made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Case {
    pub(crate) who: Who,
    pub(crate) method: String,
    pub(crate) path: String,
    #[serde(default)]
    pub(crate) headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) body: String,
}

pub(crate) const SELF_SUBJECT_REVIEW: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const SSR_BODY: &str = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;

/// `c` repeated `n` times.
pub(crate) fn run_of(c: char, n: usize) -> String {
    std::iter::repeat_n(c, n).collect()
}

/// Everything a generated case may name.
pub(crate) struct Dict {
    pub(crate) resources: Vec<Resource>,
    /// The OpenAPI v3 documents as `/openapi/v3` names them (`serverRelativeURL`, with `?hash=`).
    pub(crate) openapi: Vec<String>,
}

/// The aggregated-discovery `Accept`s: kubectl's and client-go's (with
/// fallbacks), the protobuf form, the bare type, and the older v2beta1.
const DISCOVERY_ACCEPTS: &[&str] = &[
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
    "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
    "application/json;g=apidiscovery.k8s.io;v=v1;as=APIGroupDiscoveryList",
];

/// The `Accept`s client-go's OpenAPI v3 client sends, and a few it does not.
const OPENAPI_ACCEPTS: &[&str] = &[
    "application/json",
    "application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v3.v1.0+protobuf",
    "*/*",
    "text/plain",
];

/// A subject one step from watchmux's own: the same name without its
/// group, with another group beside it, with a uid, with the name twice or
/// another name beside it, or in another string type (still the same
/// principal to the API server).
fn near_own_subject(rng: &mut Rng) -> Subject {
    let mut subject = own_subject();
    let extra = |attr: &str, value: &str| vec![Attr::utf8(attr, value)];
    match rng.below(7) {
        0 => drop(subject.remove(0)),
        1 => {
            let group = *rng.pick(GROUPS);
            subject.push(extra("O", group));
        }
        2 => subject.push(extra("UID", "fz-uid")),
        3 => subject.insert(0, extra("CN", &fixtures::user_word(rng))),
        4 => subject.push(extra("CN", &format!("system:node:{}", fixtures::WATCHMUX_NODE))),
        5 => subject[1][0].string = *rng.pick(&STRING_TYPES),
        _ => subject[0][0].value = "system:Nodes".into(),
    }
    subject
}

/// The subject of watchmux's own upstream identity in the `client` and
/// `offline` targets: the node's certificate.
pub(crate) fn own_subject() -> Subject {
    vec![
        vec![Attr::utf8("O", "system:nodes")],
        vec![Attr::utf8("CN", &format!("system:node:{}", fixtures::WATCHMUX_NODE))],
    ]
}

impl Dict {
    pub(crate) fn case(&self, rng: &mut Rng) -> Case {
        let who = self.who(rng);
        let home = match &who {
            Who::Token { account } => account.split_once('/').map(|(ns, _)| ns.to_owned()),
            _ => None,
        };
        let mut headers = Vec::new();
        let own_name = format!("system:node:{}", fixtures::WATCHMUX_NODE);
        let own = matches!(&who, Who::Cert { subject, .. }
            if subject.iter().flatten().any(|a| a.attr == "CN" && a.value == own_name));
        // watchmux's own name mostly as itself: the offline target may answer
        // its own identity, and must tell it from one that only shares its name.
        if rng.chance(if own { 10 } else { 45 }) {
            impersonation(rng, &mut headers);
        }
        let (method, path, body) = if rng.chance(10) {
            ("POST", SELF_SUBJECT_REVIEW.to_owned(), SSR_BODY.to_owned())
        } else if own && rng.chance(50) {
            ("GET", kubelet_path(rng), String::new())
        } else if rng.chance(12) {
            ("GET", self.shared_path(rng), String::new())
        } else if rng.chance(9) {
            ("GET", self.non_resource_path(rng), String::new())
        } else {
            ("GET", self.resource_path(rng, home.as_deref()), String::new())
        };
        if method == "POST" {
            headers.push(("content-type".into(), "application/json".into()));
        }
        let shared_accepts = if path == "/api" || path == "/apis" || path.starts_with("/apis?") {
            DISCOVERY_ACCEPTS
        } else if path.starts_with("/openapi/v3") {
            OPENAPI_ACCEPTS
        } else {
            &[]
        };
        if !shared_accepts.is_empty() && rng.chance(70) {
            headers.push(("accept".into(), (*rng.pick(shared_accepts)).into()));
        } else if rng.chance(25) {
            let accept = rng.pick(&[
                "application/json",
                "application/vnd.kubernetes.protobuf",
                "application/json;as=Table;v=v1;g=meta.k8s.io",
                "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
                "application/yaml",
                "*/*",
                "text/html",
            ]);
            headers.push(("accept".into(), (*accept).into()));
        }
        Case { who, method: method.into(), path, headers, body }
    }

    fn who(&self, rng: &mut Rng) -> Who {
        match rng.below(100) {
            0..15 => Who::Anonymous,
            15..55 => Who::Token { account: (*rng.pick(fixtures::TOKEN_ACCOUNTS)).into() },
            55..59 => Who::Cert { subject: own_subject(), token: None },
            59..63 => Who::Cert { subject: near_own_subject(rng), token: None },
            n => {
                let token = (n >= 96).then(|| (*rng.pick(fixtures::TOKEN_ACCOUNTS)).to_owned());
                Who::Cert { subject: subject(rng), token }
            }
        }
    }

    /// A shared answer: discovery (for the aggregated `Accept`), or OpenAPI
    /// v3: the index, a document at its current hash, with none, with a
    /// stale one, or one that does not exist.
    fn shared_path(&self, rng: &mut Rng) -> String {
        let document =
            |rng: &mut Rng| -> Option<String> { (!self.openapi.is_empty()).then(|| rng.pick(&self.openapi).clone()) };
        let path = match rng.below(10) {
            0..2 => "/api".to_owned(),
            2..4 => "/apis".to_owned(),
            4 => "/openapi/v3".to_owned(),
            5..8 => document(rng).unwrap_or_else(|| "/openapi/v3/api/v1".to_owned()),
            8 => match document(rng).as_deref().and_then(|d| d.split_once("?hash=")) {
                Some((path, _)) if rng.chance(50) => path.to_owned(),
                Some((path, _)) => format!("{path}?hash=0123456789ABCDEF"),
                None => "/openapi/v3/api/v1?hash=0".to_owned(),
            },
            _ => (*rng.pick(&["/openapi/v3/apis/fz.example/v1", "/openapi/v3/api", "/openapi/v3/api/v1/"])).to_owned(),
        };
        encode(rng, path)
    }

    fn non_resource_path(&self, rng: &mut Rng) -> String {
        let r = rng.pick(&self.resources);
        let paths = [
            "/api".to_owned(),
            "/apis".to_owned(),
            "/api/v1".to_owned(),
            r.prefix.clone(),
            "/version".to_owned(),
            "/healthz".to_owned(),
            "/readyz".to_owned(),
            "/livez".to_owned(),
            "/metrics".to_owned(),
            "/openapi/v2".to_owned(),
            "/openapi/v3".to_owned(),
            "/.well-known/openid-configuration".to_owned(),
            "/logs/".to_owned(),
            "/".to_owned(),
        ];
        let path = rng.pick(&paths).clone();
        encode(rng, path)
    }

    /// A resource path: the resource at its scope, at the other scope, or
    /// on the legacy `/watch/` prefix; a list, an object, or a subresource.
    fn resource_path(&self, rng: &mut Rng, home: Option<&str>) -> String {
        let r = if rng.chance(50) {
            let name = rng.pick(fixtures::FAVOURITE_RESOURCES);
            self.resources.iter().find(|r| r.name == *name).unwrap_or_else(|| rng.pick(&self.resources))
        } else {
            rng.pick(&self.resources)
        };
        let ns = match (home, rng.below(100)) {
            (Some(h), 0..40) => h.to_owned(),
            (_, 0..90) => (*rng.pick(fixtures::NAMESPACE_WORDS)).to_owned(),
            _ => name_near_limits(rng),
        };
        let name = match rng.below(100) {
            0..35 => ns.clone(),
            35..85 => fixtures::object_word(rng),
            _ => name_near_limits(rng),
        };
        // The wrong scope is likelier for a cluster-scoped resource: its
        // namespaced path is the one a namespace's admin could abuse.
        let namespaced = match (r.namespaced, rng.below(100)) {
            (true, 0..75) | (false, 0..55) => r.namespaced,
            _ => !r.namespaced,
        };
        let watch_prefix = rng.chance(15);
        let mut path = r.prefix.clone();
        if watch_prefix {
            path.push_str("/watch");
        }
        if namespaced {
            path.push_str(&format!("/namespaces/{ns}"));
        }
        path.push('/');
        path.push_str(&r.name);
        let named = rng.chance(55);
        if named {
            path.push_str(&format!("/{name}"));
            if rng.chance(15) {
                let sub = if r.subresources.is_empty() || rng.chance(30) {
                    (*rng.pick(&["status", "proxy", "log", "token", "scale", "eviction", "finalize", "x"])).to_owned()
                } else {
                    rng.pick(&r.subresources).clone()
                };
                path.push_str(&format!("/{sub}"));
            }
        }
        let mut query = Vec::new();
        let watch = !watch_prefix && rng.chance(20);
        if watch {
            query.push(rng.pick(&["watch=1", "watch=true", "watch=1;", "watch=0&watch=1"]).to_string());
        }
        if watch || watch_prefix {
            query.push("timeoutSeconds=1".to_owned());
        }
        if rng.chance(30) {
            query.push(rng.pick(&["resourceVersion=0", "resourceVersion=", "resourceVersion=1"]).to_string());
        }
        if rng.chance(30) {
            query.push(selector(rng, &ns, &name));
        }
        if rng.chance(8) {
            query.push(
                rng.pick(&[
                    "limit=1",
                    "limit=500&continue=x",
                    "pretty=1",
                    "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
                ])
                .to_string(),
            );
        }
        let path = encode(rng, path);
        if query.is_empty() { path } else { format!("{path}?{}", query.join("&")) }
    }
}

/// What a kubelet reads with its own credentials: its pods (from its
/// cache's scope, a list, a watch), its node, the services, and a pod of
/// another node.
fn kubelet_path(rng: &mut Rng) -> String {
    let node = fixtures::WATCHMUX_NODE;
    let mine = format!("fieldSelector=spec.nodeName%3D{node}");
    match rng.below(9) {
        0 => format!("/api/v1/pods?{mine}&resourceVersion=0"),
        1 => format!("/api/v1/pods?{mine}&limit=500"),
        2 => format!("/api/v1/pods?{mine}&watch=true&resourceVersion=0&timeoutSeconds=1&allowWatchBookmarks=true"),
        3 => format!(
            "/api/v1/pods?{mine}&watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
        ),
        4 => format!("/api/v1/nodes?fieldSelector=metadata.name%3D{node}&resourceVersion=0"),
        5 => format!("/api/v1/nodes/{node}"),
        6 => "/api/v1/services?resourceVersion=0".to_owned(),
        7 => "/api/v1/namespaces/fz-a/pods/p-n2".to_owned(),
        _ => "/api/v1/pods?resourceVersion=0".to_owned(),
    }
}

fn selector(rng: &mut Rng, ns: &str, name: &str) -> String {
    let field = || -> Vec<String> {
        vec![
            format!("metadata.name={name}"),
            format!("metadata.namespace={ns}"),
            format!("metadata.name%3D{name}"),
            "spec.nodeName=fz-n1".into(),
            format!("spec.nodeName={}", fixtures::long_node()),
            "metadata.name!=x".into(),
            format!("metadata.name={name},metadata.namespace={ns}"),
            "metadata.name==x".into(),
            "spec.nodeName".into(),
            "=".into(),
        ]
    };
    if rng.chance(60) {
        let fields = field();
        format!("fieldSelector={}", rng.pick(&fields))
    } else {
        let labels = ["a=b", "a%20in%20(x,y)", "!a", "a", "a==", "fuzz=yes", "a%3Db"];
        format!("labelSelector={}", rng.pick(&labels))
    }
}

/// Rewrites a path in ways a decoder must undo: a percent-encoded byte, an
/// encoded slash, an empty or dot segment, a trailing slash.
fn encode(rng: &mut Rng, path: String) -> String {
    if !rng.chance(20) {
        return path;
    }
    let bytes: Vec<usize> =
        path.char_indices().filter(|(i, c)| *i > 0 && c.is_ascii_alphanumeric()).map(|(i, _)| i).collect();
    match rng.below(6) {
        0 | 1 if !bytes.is_empty() => {
            let at = *rng.pick(&bytes);
            let b = path.as_bytes()[at];
            let hex = if rng.chance(50) { format!("%{b:02X}") } else { format!("%{b:02x}") };
            format!("{}{hex}{}", &path[..at], &path[at + 1..])
        }
        2 => {
            let slashes: Vec<usize> = path.match_indices('/').skip(1).map(|(i, _)| i).collect();
            if slashes.is_empty() {
                return path;
            }
            let at = *rng.pick(&slashes);
            format!("{}%2F{}", &path[..at], &path[at + 1..])
        }
        3 => path.replacen("/", "//", 2).replacen("//", "/", 1),
        4 => format!("{path}/"),
        _ => path.replacen("/namespaces/", "/namespaces/./", 1),
    }
}

/// A DNS-ish name at or around one of the API server's limits (63 for a
/// label, 253 for a subdomain), sometimes with dots, capitals or invalid
/// characters.
pub(crate) fn name_near_limits(rng: &mut Rng) -> String {
    let len = *rng.pick(&[1usize, 2, 62, 63, 64, 70, 252, 253, 254]);
    let mut s: String = (0..len).map(|_| *rng.pick(&['a', 'b', 'z', '0', '9', '-'])).collect();
    if rng.chance(30) && len > 70 {
        // Dots, so that each label is short though the whole is long.
        for i in (50..len - 1).step_by(60) {
            s.replace_range(i..i + 1, ".");
        }
    }
    if rng.chance(10) {
        let first = *rng.pick(&["A", "_", ".", ":", "-"]);
        s.replace_range(0..1, first);
    }
    // A label may not begin or end with '-'.
    if rng.chance(80) {
        s = s.trim_matches('-').trim_matches('.').to_owned();
        if s.is_empty() {
            s.push('a');
        }
    }
    s
}

/// A user name: from the fixture's names (service accounts and nodes at
/// and past the length limits, the watchmux node), or generated.
fn user(rng: &mut Rng) -> String {
    match rng.below(100) {
        0..45 => fixtures::user_word(rng),
        45..65 => format!("system:serviceaccount:{}:{}", rng.pick(fixtures::NAMESPACE_WORDS), name_near_limits(rng)),
        65..80 => format!("system:node:{}", name_near_limits(rng)),
        80..88 => format!("system:serviceaccount:{}:{}", name_near_limits(rng), name_near_limits(rng)),
        _ => name_near_limits(rng),
    }
}

const GROUPS: &[&str] = &[
    "system:nodes",
    "system:masters",
    "tenants",
    "system:authenticated",
    "system:unauthenticated",
    "system:serviceaccounts",
    "system:serviceaccounts:fz-a",
    "",
    "fz-group",
    "System:Nodes",
];

const EXTRA_KEYS: &[&str] = &[
    "a",
    "A",
    "%41",
    "Mixed-Key",
    "example.com/scope",
    "example.com/Scope",
    "Example.com/scope",
    "example.com%2Fscope",
    "example.com%2fScope",
    "authentication.kubernetes.io%2Fcredential-id",
    "authentication.kubernetes.io%2Fnode-name",
    "scopes.authorization.openshift.io",
    "foo%zz",
    "%2F",
    "a.b/c/d",
    "example.com/",
];

/// Impersonation headers in every shape the API server reads: a user
/// alone, with groups, uid and extras; groups without a user; repeated users.
fn impersonation(rng: &mut Rng, headers: &mut Vec<(String, String)>) {
    let shape = rng.below(100);
    if shape >= 6 {
        headers.push(("impersonate-user".into(), user(rng)));
    }
    if (6..10).contains(&shape) {
        headers.push(("impersonate-user".into(), user(rng)));
        headers.push(("impersonate-user".into(), user(rng)));
    }
    if shape < 6 || rng.chance(45) {
        let most = if rng.chance(10) { 5 } else { 2 };
        for _ in 0..=rng.below(most) {
            headers.push(("impersonate-group".into(), (*rng.pick(GROUPS)).into()));
        }
    }
    if rng.chance(15) {
        headers.push(("impersonate-uid".into(), (*rng.pick(&["u1", "", "1234-5678", "fz-uid"])).into()));
    }
    if rng.chance(25) {
        for _ in 0..=rng.below(2) {
            let key = rng.pick(EXTRA_KEYS);
            let value = rng.pick(&["v", "", "x y", "fz-n1"]);
            headers.push((format!("impersonate-extra-{key}"), (*value).into()));
        }
    }
}

/// A certificate subject: CNs and Os (repeated, sometimes), a UID, each in
/// one of the string types; sometimes several attributes in one RDN.
fn subject(rng: &mut Rng) -> Subject {
    let mut attrs: Vec<Attr> = Vec::new();
    let string = |rng: &mut Rng| {
        // Mostly UTF8String: a subject Go cannot parse ends at the handshake.
        if rng.chance(80) { StringType::Utf8 } else { *rng.pick(&STRING_TYPES) }
    };
    let cns = match rng.below(100) {
        0..8 => 0,
        8..85 => 1,
        _ => 2,
    };
    for _ in 0..cns {
        // The node-local watchmux's own identity is a word of its own: a
        // subject that matches it must still be read as a whole.
        let value = match rng.below(100) {
            0..15 => format!("system:node:{}", fixtures::WATCHMUX_NODE),
            15..70 => fixtures::user_word(rng),
            _ => user(rng),
        };
        attrs.push(Attr { attr: "CN".into(), string: string(rng), value });
    }
    for _ in 0..rng.below(4) {
        attrs.push(Attr { attr: "O".into(), string: string(rng), value: (*rng.pick(GROUPS)).into() });
    }
    if rng.chance(15) {
        for _ in 0..=usize::from(rng.chance(20)) {
            attrs.push(Attr { attr: "UID".into(), string: string(rng), value: "fz-uid".into() });
        }
    }
    if rng.chance(10) {
        attrs.push(Attr { attr: "OU".into(), string: string(rng), value: "system:masters".into() });
    }
    // Shuffle, then group neighbours into multi-valued RDNs now and then.
    for i in (1..attrs.len()).rev() {
        let j = rng.below(i + 1);
        attrs.swap(i, j);
    }
    let mut subject: Subject = Vec::new();
    for a in attrs {
        match subject.last_mut() {
            Some(rdn) if rng.chance(15) => rdn.push(a),
            _ => subject.push(vec![a]),
        }
    }
    subject
}
