//! Reads at every resourceVersion a client can hold, through watchmux and
//! straight at the API server, compared (issue 24): another resource's
//! write version (resourceVersions are global), a version above the API
//! server's own revision, and the versions continue tokens carry; LIST
//! (unset, NotOlderThan, Exact), GET, watch-list and watch; in JSON,
//! protobuf and PartialObjectMetadata alike. Where the API server answers at
//! once, so must watchmux (it waited three seconds and answered 504 before).

use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use futures_util::future::join_all;
use http::Request;
use serde_json::Value;

use super::cache::wait_initialized;
use super::env::*;
use watchmux::upstream::Upstream;

const JSON: &str = "application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const META_LIST_JSON: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const META_LIST_PROTOBUF: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const META_JSON: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const META_PROTOBUF: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Longer than any answer the API server gives at once on this machine,
/// well short of its three seconds' wait.
const AT_ONCE: Duration = Duration::from_millis(1500);

/// One answer: status, Content-Type, body, how long it took.
#[derive(Debug)]
struct Reply {
    code: u16,
    content_type: String,
    body: Bytes,
    took: Duration,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

async fn via(wm: &Watchmux, path: &str, accept: &str) -> Reply {
    let started = Instant::now();
    reply(get_accepting(wm.addr, path, accept).await, started).await
}

async fn direct(client: &Upstream, path: &str, accept: &str) -> Reply {
    let started = Instant::now();
    let req = Request::get(path).header("accept", accept).body(watchmux::body::empty()).unwrap();
    reply(client.send(req).await.unwrap(), started).await
}

async fn reply(resp: http::Response<hyper::body::Incoming>, started: Instant) -> Reply {
    let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let (code, body) = read(resp).await;
    Reply { code, content_type, body, took: started.elapsed() }
}

/// The names of a JSON list's items.
fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn list_rv(list: &Value) -> u64 {
    list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

/// The (type, name or resourceVersion) of each event of a JSON watch body.
fn events(body: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(body)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|e| {
            let kind = e["type"].as_str().unwrap().to_owned();
            let meta = &e["object"]["metadata"];
            let what = match kind.as_str() {
                "BOOKMARK" => "bookmark".to_owned(),
                "ERROR" => e["object"]["message"].as_str().unwrap_or_default().to_owned(),
                _ => meta["name"].as_str().unwrap().to_owned(),
            };
            (kind, what)
        })
        .collect()
}

async fn create_secret(client: &Upstream, ns: &str) -> u64 {
    let secret = serde_json::json!({"metadata": {"generateName": "s-"}, "stringData": {"k": "v"}});
    let v = direct_json(client, http::Method::POST, &format!("/api/v1/namespaces/{ns}/secrets"), secret).await;
    v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

/// Waits (bounded) until watchmux's cache lists `want` configmaps in `ns`.
async fn cache_holds(wm: &Watchmux, ns: &str, want: usize) {
    for _ in 0..200 {
        let r = via(wm, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0"), JSON).await;
        if r.code == 200 && names(&r.json()).len() == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the cache never held {want} configmaps in {ns}");
}

async fn start(cluster: &Cluster, test: &str) -> (Watchmux, std::sync::Arc<Upstream>, String) {
    let client = cluster.direct_client();
    let wm = Watchmux::start(cluster, &["--cache-resources", "configmaps,pods,secrets", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let ns = namespace(test);
    create_namespace(&client, &ns).await;
    for name in ["cm-a", "cm-b"] {
        configmap(&client, "create", &ns, name).await;
    }
    cache_holds(&wm, &ns, 2).await;
    (wm, client, ns)
}

/// (i): a Secret's write version, used to read ConfigMaps. The API server
/// answers every form at once; so does watchmux, with the same items and
/// the same version semantics.
#[tokio::test]
async fn reads_at_another_resources_write_version_are_answered_at_once_as_the_api_server_answers() {
    // Alone on the cluster: another test's ConfigMap write would bring the
    // cache to N, and the reads would be the cache's.
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let (wm, client, ns) = start(&cluster, "rv-other").await;
    let n = create_secret(&client, &ns).await;
    let base = format!("/api/v1/namespaces/{ns}/configmaps");

    for accept in [JSON, META_LIST_JSON] {
        for (query, exact) in [
            (format!("resourceVersion={n}"), false),
            (format!("resourceVersion={n}&resourceVersionMatch=NotOlderThan"), false),
            (format!("resourceVersion={n}&resourceVersionMatch=Exact"), true),
            // The legacy exact form: a version with a limit.
            (format!("resourceVersion={n}&limit=10"), true),
        ] {
            let path = format!("{base}?{query}");
            let (d, v) = (direct(&client, &path, accept).await, via(&wm, &path, accept).await);
            assert_eq!((v.code, &v.content_type), (d.code, &d.content_type), "{path} {accept}");
            assert_eq!(v.code, 200, "{path} {accept}: {}", String::from_utf8_lossy(&v.body));
            assert!(v.took < AT_ONCE && d.took < AT_ONCE, "{path} {accept}: {:?} / direct {:?}", v.took, d.took);
            let (dl, vl) = (d.json(), v.json());
            assert_eq!(names(&vl), names(&dl), "{path} {accept}");
            assert_eq!(names(&vl), ["cm-a", "cm-b"]);
            if exact {
                assert_eq!((list_rv(&vl), list_rv(&dl)), (n, n), "{path}: exactly {n}");
            } else {
                assert!(list_rv(&vl) >= n && list_rv(&dl) >= n, "{path}: at least {n}");
            }
        }
    }
    // Protobuf, lists of both kinds: the same status and form, at once,
    // with both objects.
    for accept in [PROTOBUF, META_LIST_PROTOBUF] {
        for query in [
            format!("resourceVersion={n}"),
            format!("resourceVersion={n}&resourceVersionMatch=NotOlderThan"),
            format!("resourceVersion={n}&resourceVersionMatch=Exact"),
        ] {
            let path = format!("{base}?{query}");
            let (d, v) = (direct(&client, &path, accept).await, via(&wm, &path, accept).await);
            assert_eq!((v.code, &v.content_type), (d.code, &d.content_type), "{path} {accept}");
            assert_eq!(v.code, 200, "{path} {accept}");
            assert!(v.took < AT_ONCE, "{path} {accept}: {:?}", v.took);
            for name in [&b"cm-a"[..], b"cm-b"] {
                assert!(v.body.windows(4).any(|w| w == name), "{path} {accept}: no {name:?}");
            }
        }
    }
    // GET of one object, in every form.
    let path = format!("{base}/cm-a?resourceVersion={n}");
    for accept in [JSON, META_JSON, PROTOBUF, META_PROTOBUF] {
        let (d, v) = (direct(&client, &path, accept).await, via(&wm, &path, accept).await);
        assert_eq!((v.code, &v.content_type, &v.body), (d.code, &d.content_type, &d.body), "{path} {accept}");
        assert_eq!(v.code, 200);
        assert!(v.took < AT_ONCE, "{path} {accept}: {:?}", v.took);
    }
    // A watch-list at N: both objects, then the end of the initial events.
    let path = format!(
        "{base}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true\
         &resourceVersion={n}&timeoutSeconds=1"
    );
    for accept in [JSON, META_JSON] {
        let (d, v) = (direct(&client, &path, accept).await, via(&wm, &path, accept).await);
        assert_eq!((v.code, d.code), (200, 200), "{path} {accept}");
        // The initial events, then the bookmark that ends them (a timeout's
        // bookmark may follow on either side).
        let added = [("ADDED".to_owned(), "cm-a".to_owned()), ("ADDED".to_owned(), "cm-b".to_owned())];
        let bookmark = ("BOOKMARK".to_owned(), "bookmark".to_owned());
        for seen in [events(&v.body), events(&d.body)] {
            assert_eq!(seen[..2], added, "{path} {accept}");
            assert_eq!(seen.get(2), Some(&bookmark), "{path} {accept}");
        }
        assert!(v.took < AT_ONCE + Duration::from_secs(1), "{path}: {:?}", v.took);
    }
    // A watch from N: what changed after it, and nothing before.
    configmap(&client, "create", &ns, "cm-c").await;
    let path = format!("{base}?watch=1&resourceVersion={n}&timeoutSeconds=1");
    let (d, v) = (direct(&client, &path, JSON).await, via(&wm, &path, JSON).await);
    assert_eq!((v.code, d.code), (200, 200));
    assert_eq!(events(&v.body), [("ADDED".to_owned(), "cm-c".to_owned())]);
    assert_eq!(events(&v.body), events(&d.body));

    let passed =
        watchmux_metric_sum(wm.admin, "watchmux_cache_passthrough_total", &["reason=\"ahead_of_cache\""]).await;
    assert!(passed >= 1.0, "reads at a version the cache had not reached are the API server's");
}

/// A continue token from the API server (its version is a snapshot the
/// cache never took) and one naming a version above the API server's own.
fn continue_at(token: &str, rv: u64) -> String {
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut decoded: Value = serde_json::from_slice(&engine.decode(token).unwrap()).unwrap();
    decoded["rv"] = rv.into();
    engine.encode(decoded.to_string())
}

/// (ii) and (iii): a version above the API server's revision gets its 504
/// after its three seconds, in every form, through watchmux as directly; a
/// continue token the API server issued continues the same list.
#[tokio::test]
async fn a_version_above_the_api_servers_gets_its_504_and_continue_tokens_continue_its_list() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let (wm, client, ns) = start(&cluster, "rv-above").await;
    let base = format!("/api/v1/namespaces/{ns}/configmaps");

    // (iii) The API server's first page, continued through watchmux.
    let first = direct(&client, &format!("{base}?limit=1"), JSON).await.json();
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    let next = format!("{base}?limit=1&continue={token}");
    let (d, v) = (direct(&client, &next, JSON).await, via(&wm, &next, JSON).await);
    assert_eq!((v.code, d.code), (200, 200));
    assert_eq!(names(&v.json()), ["cm-b"]);
    assert_eq!(names(&v.json()), names(&d.json()));
    assert_eq!(list_rv(&v.json()), list_rv(&first), "a continued list stays at its first page's version");
    assert!(v.took < AT_ONCE, "{:?}", v.took);

    // (ii) Far above the API server's revision: every form waits and gets
    // the API server's 504 (a watch-list: in an ERROR event).
    let above = create_secret(&client, &ns).await + 1_000_000;
    let mut paths = vec![
        (format!("{base}?resourceVersion={above}"), [JSON, PROTOBUF, META_LIST_JSON, META_LIST_PROTOBUF]),
        (
            format!("{base}?resourceVersion={above}&resourceVersionMatch=NotOlderThan"),
            [JSON, PROTOBUF, META_LIST_JSON, META_LIST_PROTOBUF],
        ),
        (
            format!("{base}?resourceVersion={above}&resourceVersionMatch=Exact"),
            [JSON, PROTOBUF, META_LIST_JSON, META_LIST_PROTOBUF],
        ),
        (
            format!("{base}?limit=1&continue={}", continue_at(&token, above)),
            [JSON, PROTOBUF, META_LIST_JSON, META_LIST_PROTOBUF],
        ),
        (format!("{base}/cm-a?resourceVersion={above}"), [JSON, PROTOBUF, META_JSON, META_PROTOBUF]),
    ];
    paths.push((
        format!(
            "{base}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true\
             &resourceVersion={above}"
        ),
        [JSON, META_JSON, JSON, META_JSON],
    ));
    let asked: Vec<(String, &str)> =
        paths.iter().flat_map(|(p, accepts)| accepts.iter().map(move |a| (p.clone(), *a))).collect();
    let replies = join_all(asked.iter().map(|(path, accept)| {
        let (client, wm) = (&client, &wm);
        async move { (direct(client, path, accept).await, via(wm, path, accept).await) }
    }))
    .await;
    for ((path, accept), (d, v)) in asked.iter().zip(&replies) {
        assert_eq!((v.code, &v.content_type), (d.code, &d.content_type), "{path} {accept}");
        assert!(v.took >= Duration::from_millis(2900), "{path} {accept}: the API server's own wait, {:?}", v.took);
        if !v.content_type.starts_with(JSON) {
            assert_eq!(v.code, 504, "{path} {accept}");
            continue;
        }
        let (dj, vj) = match path.contains("watch=1") {
            true => (serde_json::from_slice::<Value>(&d.body).unwrap()["object"].clone(), {
                let e: Value = serde_json::from_slice(&v.body).unwrap();
                assert_eq!(e["type"], "ERROR", "{path}");
                e["object"].clone()
            }),
            false => (d.json(), v.json()),
        };
        assert_eq!(
            (&vj["code"], &vj["reason"], &vj["details"]),
            (&dj["code"], &dj["reason"], &dj["details"]),
            "{path}"
        );
        assert_eq!(vj["code"], 504, "{path} {accept}");
        let message = format!("Timeout: Too large resource version: {above}, current: ");
        assert!(vj["message"].as_str().unwrap().starts_with(&message), "{path}: {vj}");
    }
}
