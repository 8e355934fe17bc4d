//! The world the cases run in, made once per cluster (every create is
//! idempotent, so a second run on the same cluster reuses it), and the
//! API server's own discovery, from which paths are built.
//!
//! Each object is here because some rule of the API server depends on it:
//!
//! - namespaces `fz-a`, `fz-b`, `fz-x`, each with a `reader` (configmaps)
//!   and an `nsadmin` (every right in it), and cluster-scoped
//!   objects (a Node, a PersistentVolume, a ClusterRole) named as each
//!   namespace is: a namespace admin must not reach them at a namespaced path;
//! - service accounts in `fz-a` named at and past the length limits, with
//!   a role to read secrets there: what an impersonator reaches if a long
//!   name is taken for a plain user;
//! - nodes `fz-n1` (the node-local watchmux's own identity), `fz-n2` and
//!   one with a 70-character name, each with a pod bound to it that mounts
//!   a secret: the Node authorizer's graph;
//! - impersonators in `fz-a`: `imp-legacy` (legacy `impersonate` on users
//!   and groups only), `imp-constrained` (`impersonate:user-info` on users,
//!   groups, uids and some extras, and `impersonate-on:user-info:<verb>`
//!   everywhere), `imp-extra` (legacy, users and extras of upper-case keys).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::generate::{Rng, run_of};
use crate::wire::{Answer, Identity, Req, Wire};

pub(crate) const NAMESPACES: &[&str] = &["fz-a", "fz-b", "fz-x"];
/// Namespaces a generated path names: the fixture's, the built-in ones and
/// one that does not exist.
pub(crate) const NAMESPACE_WORDS: &[&str] = &["fz-a", "fz-b", "fz-x", "default", "kube-system", "fz-none"];
/// The node whose credentials the node-local watchmux holds.
pub(crate) const WATCHMUX_NODE: &str = "fz-n1";
/// Token identities a case may use (`namespace/name` of a service account).
pub(crate) const TOKEN_ACCOUNTS: &[&str] = &[
    "fz-a/reader",
    "fz-a/nsadmin",
    "fz-b/nsadmin",
    "fz-x/nsadmin",
    "fz-a/imp-legacy",
    "fz-a/imp-constrained",
    "fz-a/imp-extra",
    "admin",
    "garbage",
];
/// Resources a generated path names half of the time: those the fixture
/// has objects of.
pub(crate) const FAVOURITE_RESOURCES: &[&str] = &[
    "configmaps",
    "secrets",
    "pods",
    "nodes",
    "persistentvolumes",
    "clusterroles",
    "namespaces",
    "serviceaccounts",
    "services",
    "roles",
];

pub(crate) fn long_node() -> String {
    run_of('n', 70)
}

/// Service-account names at 63 (a label's limit), just past it, well past
/// it, and at a subdomain's limit (253).
pub(crate) fn long_accounts() -> Vec<String> {
    [63, 64, 70, 253].iter().map(|n| run_of('s', *n)).collect()
}

pub(crate) fn object_word(rng: &mut Rng) -> String {
    let mut words: Vec<String> = ["cm1", "s1", "reader", "nsadmin", "fz-n1", "fz-n2", "s-n1", "s-long", "default"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    words.push(long_node());
    words.extend(NAMESPACES.iter().map(|s| s.to_string()));
    rng.pick(&words).clone()
}

pub(crate) fn user_word(rng: &mut Rng) -> String {
    let mut words: Vec<String> = [
        "fz-user",
        "system:admin",
        "system:anonymous",
        "system:kube-scheduler",
        "system:node:fz-n1",
        "system:node:fz-n2",
        "system:node:Fz-N1",
        "system:serviceaccount:fz-a:reader",
        "system:serviceaccount:fz-a:nsadmin",
        "system:serviceaccount:fz-x:nsadmin",
        "system:serviceaccount:fz-a:Bad_Name",
        "system:serviceaccount:fz-a",
        "system:serviceaccount:fz-a:reader:x",
        "",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    words.push(format!("system:node:{}", long_node()));
    words.extend(long_accounts().iter().map(|a| format!("system:serviceaccount:fz-a:{a}")));
    rng.pick(&words).clone()
}

/// A resource of the API server's discovery.
#[derive(Clone, Debug)]
pub(crate) struct Resource {
    /// `/api/v1` or `/apis/<group>/<version>`.
    pub(crate) prefix: String,
    pub(crate) name: String,
    pub(crate) namespaced: bool,
    pub(crate) subresources: Vec<String>,
}

/// The admin's view of the cluster.
pub(crate) struct Admin<'a> {
    pub(crate) wire: &'a Wire,
    pub(crate) api: SocketAddr,
    pub(crate) who: Identity,
}

impl Admin<'_> {
    pub(crate) async fn get(&self, path: &str) -> Answer {
        self.wire.send(self.api, &self.who, &Req { method: "GET", path, headers: &[], body: "" }).await
    }

    /// Creates an object; one that exists already is fine.
    async fn create(&self, path: &str, body: Value) {
        let headers = [("content-type".to_owned(), "application/json".to_owned())];
        let body = body.to_string();
        let a =
            self.wire.send(self.api, &self.who, &Req { method: "POST", path, headers: &headers, body: &body }).await;
        assert!(matches!(a.status, 201 | 409), "creating {path}: {} {}", a.status, a.text());
    }

    /// A token for a fixture service account, valid for two hours.
    pub(crate) async fn token(&self, ns: &str, name: &str) -> String {
        let headers = [("content-type".to_owned(), "application/json".to_owned())];
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7200}});
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token");
        let body = body.to_string();
        let a = self
            .wire
            .send(self.api, &self.who, &Req { method: "POST", path: &path, headers: &headers, body: &body })
            .await;
        assert_eq!(a.status, 201, "{path}: {}", a.text());
        a.json().and_then(|v| v["status"]["token"].as_str().map(str::to_owned)).expect("a token")
    }

    /// Every resource of every group version the API server serves.
    pub(crate) async fn discover(&self) -> Vec<Resource> {
        #[derive(Deserialize)]
        struct List {
            resources: Vec<Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            name: String,
            namespaced: bool,
        }
        let mut prefixes = vec!["/api/v1".to_owned()];
        let groups = self.get("/apis").await.json().expect("/apis is JSON");
        for g in groups["groups"].as_array().unwrap() {
            for v in g["versions"].as_array().unwrap() {
                prefixes.push(format!("/apis/{}", v["groupVersion"].as_str().unwrap()));
            }
        }
        let mut resources: BTreeMap<(String, String), Resource> = BTreeMap::new();
        for prefix in prefixes {
            let Ok(list) = serde_json::from_slice::<List>(&self.get(&prefix).await.body) else { continue };
            for e in list.resources {
                match e.name.split_once('/') {
                    None => {
                        let r = Resource {
                            prefix: prefix.clone(),
                            name: e.name.clone(),
                            namespaced: e.namespaced,
                            subresources: Vec::new(),
                        };
                        resources.entry((prefix.clone(), e.name)).or_insert(r);
                    }
                    Some((base, sub)) => {
                        if let Some(r) = resources.get_mut(&(prefix.clone(), base.to_owned())) {
                            r.subresources.push(sub.to_owned());
                        }
                    }
                }
            }
        }
        resources.into_values().collect()
    }

    /// The OpenAPI v3 documents the index names, each at its current hash.
    pub(crate) async fn openapi_documents(&self) -> Vec<String> {
        let index = self.get("/openapi/v3").await.json().expect("/openapi/v3 is JSON");
        let paths = index["paths"].as_object().expect("/openapi/v3 has paths");
        paths.values().filter_map(|p| p["serverRelativeURL"].as_str().map(str::to_owned)).collect()
    }

    pub(crate) async fn set_up(&self) {
        let rbac = "/apis/rbac.authorization.k8s.io/v1";
        let binding = |name: &str, kind: &str, role: &str, subjects: Value| {
            json!({"metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": subjects})
        };
        let sa = |ns: &str, name: &str| json!({"kind": "ServiceAccount", "name": name, "namespace": ns});
        // Everything, bound in one namespace: a namespace's admin. (The
        // built-in `admin` role is aggregated by the controller manager,
        // which this cluster does not run.)
        let all = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
        self.create(&format!("{rbac}/clusterroles"), json!({"metadata": {"name": "fz-nsadmin"}, "rules": all})).await;
        for ns in NAMESPACES {
            self.create("/api/v1/namespaces", json!({"metadata": {"name": ns}})).await;
            let base = format!("/api/v1/namespaces/{ns}");
            for name in ["reader", "nsadmin"] {
                self.create(&format!("{base}/serviceaccounts"), json!({"metadata": {"name": name}})).await;
            }
            self.create(
                &format!("{base}/configmaps"),
                json!({"metadata": {"name": "cm1", "labels": {"fuzz": "yes"}}, "data": {"k": "v"}}),
            )
            .await;
            self.create(&format!("{base}/secrets"), json!({"metadata": {"name": "s1"}, "stringData": {"k": ns}})).await;
            let role = json!({"metadata": {"name": "fz-cm-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]});
            self.create(&format!("{rbac}/namespaces/{ns}/roles"), role).await;
            self.create(
                &format!("{rbac}/namespaces/{ns}/rolebindings"),
                binding("fz-cm-reader", "Role", "fz-cm-reader", json!([sa(ns, "reader")])),
            )
            .await;
            self.create(
                &format!("{rbac}/namespaces/{ns}/rolebindings"),
                binding("fz-nsadmin", "ClusterRole", "fz-nsadmin", json!([sa(ns, "nsadmin")])),
            )
            .await;
            // Cluster-scoped objects named as the namespace is.
            self.create("/api/v1/nodes", json!({"metadata": {"name": ns}})).await;
            self.create(
                "/api/v1/persistentvolumes",
                json!({"metadata": {"name": ns}, "spec": {"capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/fz"}}}),
            )
            .await;
            self.create(&format!("{rbac}/clusterroles"), json!({"metadata": {"name": ns}, "rules": []})).await;
        }

        // Long service-account names, with a right worth impersonating them for.
        let long: Vec<Value> = long_accounts().iter().map(|a| sa("fz-a", a)).collect();
        for a in long_accounts() {
            self.create("/api/v1/namespaces/fz-a/serviceaccounts", json!({"metadata": {"name": a}})).await;
        }
        let role = json!({"metadata": {"name": "fz-long"},
            "rules": [{"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get", "list", "watch"]}]});
        self.create(&format!("{rbac}/namespaces/fz-a/roles"), role).await;
        self.create(
            &format!("{rbac}/namespaces/fz-a/rolebindings"),
            binding("fz-long", "Role", "fz-long", json!(long)),
        )
        .await;

        // Nodes and the pods bound to them, each mounting its own secret.
        for (node, secret, pod) in [
            (WATCHMUX_NODE.to_owned(), "s-n1", "p-n1"),
            ("fz-n2".to_owned(), "s-n2", "p-n2"),
            (long_node(), "s-long", "p-long"),
        ] {
            self.create("/api/v1/nodes", json!({"metadata": {"name": node}})).await;
            self.create(
                "/api/v1/namespaces/fz-a/secrets",
                json!({"metadata": {"name": secret}, "stringData": {"k": node}}),
            )
            .await;
            let spec = json!({"metadata": {"name": pod}, "spec": {"nodeName": node,
                "containers": [{"name": "c", "image": "registry.invalid/none"}],
                "volumes": [{"name": "s", "secret": {"secretName": secret}}]}});
            self.create("/api/v1/namespaces/fz-a/pods", spec).await;
        }

        // Impersonators.
        let users_groups = json!([{"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]}]);
        let extras =
            ["userextras/A", "userextras/Mixed-Key", "userextras/example.com/Scope", "userextras/example.com/scope"];
        let constrained = json!([
            {"apiGroups": ["authentication.k8s.io"],
             "resources": ["users", "groups", "uids", "userextras/a", "userextras/example.com/scope"],
             "verbs": ["impersonate:user-info"]},
            {"apiGroups": ["*"], "resources": ["*"],
             "verbs": ["impersonate-on:user-info:get", "impersonate-on:user-info:list",
                       "impersonate-on:user-info:watch", "impersonate-on:user-info:create"]},
        ]);
        let extra = json!([
            {"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": extras, "verbs": ["impersonate"]},
        ]);
        for (name, rules) in [("imp-legacy", users_groups), ("imp-constrained", constrained), ("imp-extra", extra)] {
            self.create("/api/v1/namespaces/fz-a/serviceaccounts", json!({"metadata": {"name": name}})).await;
            let role = format!("fz-{name}");
            self.create(&format!("{rbac}/clusterroles"), json!({"metadata": {"name": role}, "rules": rules})).await;
            self.create(
                &format!("{rbac}/clusterrolebindings"),
                binding(&role, "ClusterRole", &role, json!([sa("fz-a", name)])),
            )
            .await;
        }
    }

    /// Waits (bounded) until RBAC and the Node authorizer's graph show the
    /// fixture: the cases compare the API server with watchmux, and a right
    /// still propagating would make the two disagree by timing.
    pub(crate) async fn wait_settled(&self, tokens: &BTreeMap<String, String>) {
        let as_node = |node: &str| {
            vec![
                ("impersonate-user".to_owned(), format!("system:node:{node}")),
                ("impersonate-group".to_owned(), "system:nodes".to_owned()),
            ]
        };
        let long = long_accounts();
        // Who asks, for what, with which impersonation headers.
        type Probe = (Identity, String, Vec<(String, String)>);
        let probes: Vec<Probe> = vec![
            (self.who.clone(), "/api/v1/namespaces/fz-a/secrets/s-long".into(), as_node(&long_node())),
            (self.who.clone(), "/api/v1/namespaces/fz-a/secrets/s-n1".into(), as_node(WATCHMUX_NODE)),
            (
                self.who.clone(),
                "/api/v1/namespaces/fz-a/secrets/s1".into(),
                vec![("impersonate-user".to_owned(), format!("system:serviceaccount:fz-a:{}", long[3]))],
            ),
            (
                Identity { cert: None, token: Some(tokens["fz-x/nsadmin"].clone()) },
                "/api/v1/namespaces/fz-x/secrets".into(),
                vec![],
            ),
            (
                Identity { cert: None, token: Some(tokens["fz-a/reader"].clone()) },
                "/api/v1/namespaces/fz-a/configmaps".into(),
                vec![],
            ),
            (
                Identity { cert: None, token: Some(tokens["fz-a/imp-legacy"].clone()) },
                "/api".into(),
                vec![("impersonate-user".to_owned(), "fz-user".to_owned())],
            ),
        ];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        for (who, path, headers) in probes {
            loop {
                let a = self
                    .wire
                    .send(self.api, &who, &Req { method: "GET", path: &path, headers: &headers, body: "" })
                    .await;
                if a.status == 200 {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the fixture never settled: {path} {headers:?}: {} {}",
                    a.status,
                    a.text()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
