//! Gzip as kube-apiserver does it (issue 24 item 2), against the real API
//! server: for each Accept-Encoding a client may send, the answers served
//! from the cache (LIST over and under 128 KiB, JSON and protobuf, GET over
//! and under, a plain watch, a watch-list) and one passed through (Secrets) carry the same
//! `Content-Encoding` and `Vary` through watchmux as straight from the API
//! server, and a compressed answer decodes to what the uncompressed one is.
//! client-go (kubectl, an informer) reads them with compression on and off.

use std::io::Read;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use super::cache::wait_initialized;
use super::env::*;
use watchmux::upstream::Upstream;

/// Accept-Encoding headers to try, each a list of header lines: the plain
/// ask, and the odd ones kube-apiserver does not read as gzip (or does).
fn asks() -> Vec<Vec<String>> {
    let long = format!("{}gzip", "br, ".repeat(2_000));
    [
        vec![],
        vec!["gzip"],
        vec!["GZIP"],
        vec!["gzip;q=0"],
        vec!["gzip;q=1"],
        vec!["identity"],
        vec!["*"],
        vec!["br"],
        vec!["deflate, gzip"],
        vec![" gzip "],
        vec!["br", "gzip"],
        vec!["gzip", "br"],
        vec![long.as_str()],
    ]
    .into_iter()
    .map(|lines| lines.into_iter().map(str::to_owned).collect())
    .collect()
}

/// What a client can tell of an answer's encoding, and its body decoded.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    content_encoding: Option<String>,
    vary: Vec<String>,
    decoded: Bytes,
}

fn request(path: &str, accept: &str, encodings: &[String]) -> http::request::Builder {
    let mut req = Request::get(path).header("accept", accept);
    for line in encodings {
        req = req.header("accept-encoding", line.as_str());
    }
    req
}

async fn answer(resp: http::Response<hyper::body::Incoming>) -> Answer {
    let header = |name: &str| resp.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let status = resp.status().as_u16();
    let content_type = header("content-type");
    let content_encoding = header("content-encoding");
    let vary = resp.headers().get_all("vary").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    let raw = resp.into_body().collect().await.unwrap().to_bytes();
    let decoded = match content_encoding.as_deref() {
        Some("gzip") if raw.is_empty() => raw,
        Some("gzip") => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out).expect("a valid gzip body");
            Bytes::from(out)
        }
        _ => raw,
    };
    Answer { status, content_type, content_encoding, vary, decoded }
}

async fn via(wm: &Watchmux, path: &str, accept: &str, encodings: &[String]) -> Answer {
    let stream = TcpStream::connect(wm.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req = request(path, accept, encodings).header("host", wm.addr.to_string()).body(Full::<Bytes>::default());
    answer(send.send_request(req.unwrap()).await.unwrap()).await
}

async fn direct(client: &Upstream, path: &str, accept: &str, encodings: &[String]) -> Answer {
    let req = request(path, accept, encodings).body(watchmux::body::empty()).unwrap();
    answer(client.send(req).await.unwrap()).await
}

/// The body with what may differ between two reads of the same list taken
/// a moment apart (the list's own resourceVersion) taken out: JSON only.
fn comparable(body: &Bytes) -> Value {
    let mut v: Value = serde_json::from_slice(body).unwrap();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    v
}

async fn fill(client: &Upstream, ns: &str, count: usize, size: usize) {
    create_namespace(client, ns).await;
    for i in 0..count {
        let body = json!({"metadata": {"name": format!("cm-{i:03}")}, "data": {"v": "x".repeat(size)}});
        direct_json(client, http::Method::POST, &format!("/api/v1/namespaces/{ns}/configmaps"), body).await;
    }
}

/// The headers of every answer, through watchmux and direct, are the same for
/// every ask; decoded bodies are the plain ones.
#[tokio::test]
async fn cached_and_passed_through_answers_are_compressed_as_by_the_api_server() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let (large, small, huge) = (namespace("gzip-large"), namespace("gzip-small"), namespace("gzip-huge"));
    // About 170 KiB of JSON and 165 KiB of protobuf; and a few KiB.
    fill(&client, &large, 40, 4_000).await;
    fill(&client, &small, 3, 100).await;
    // About 1.2 MiB: a LIST the cache streams from its snapshot rather than
    // gathers (over a MiB of items, no limit), in JSON and in protobuf.
    fill(&client, &huge, 40, 30_000).await;
    // One object over 128 KiB, for a GET.
    let big = json!({"metadata": {"name": "big"}, "data": {"v": "z".repeat(200_000)}});
    direct_json(&client, http::Method::POST, &format!("/api/v1/namespaces/{large}/configmaps"), big).await;
    for i in 0..40 {
        let secret = json!({"metadata": {"name": format!("s-{i:03}")}, "stringData": {"v": "y".repeat(4_000)}});
        direct_json(&client, http::Method::POST, &format!("/api/v1/namespaces/{large}/secrets"), secret).await;
    }
    let served_before = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await;
    let streamed_before = watchmux_metric_sum(wm.admin, "watchmux_cache_list_streamed_total", &[]).await;
    let gets_before = watchmux_metric_sum(wm.admin, "watchmux_cache_get_total", &[]).await;

    let json_ct = "application/json";
    let pb_ct = "application/vnd.kubernetes.protobuf";
    let lists = [
        (format!("/api/v1/namespaces/{large}/configmaps?resourceVersion=0"), json_ct, true),
        (format!("/api/v1/namespaces/{large}/configmaps?resourceVersion=0"), pb_ct, true),
        (format!("/api/v1/namespaces/{small}/configmaps?resourceVersion=0"), json_ct, false),
        (format!("/api/v1/namespaces/{small}/configmaps?resourceVersion=0"), pb_ct, false),
        (format!("/api/v1/namespaces/{huge}/configmaps?resourceVersion=0"), json_ct, true),
        (format!("/api/v1/namespaces/{huge}/configmaps?resourceVersion=0"), pb_ct, true),
        // GETs at resourceVersion=0, from the cache: one object over 128 KiB, one under.
        (format!("/api/v1/namespaces/{large}/configmaps/big?resourceVersion=0"), json_ct, true),
        (format!("/api/v1/namespaces/{large}/configmaps/cm-000?resourceVersion=0"), json_ct, false),
        // Not cached: passed through, the API server's own encoding both ways.
        (format!("/api/v1/namespaces/{large}/secrets"), json_ct, true),
    ];
    let plain = Vec::new();
    for (path, accept, is_large) in &lists {
        let (d_plain, v_plain) = (direct(&client, path, accept, &plain).await, via(&wm, path, accept, &plain).await);
        assert_eq!(d_plain.content_encoding, None, "{path}");
        assert_eq!(d_plain.decoded.len() > 131_072, *is_large, "{path} {accept}: {} bytes", d_plain.decoded.len());
        for ask in asks() {
            let d = direct(&client, path, accept, &ask).await;
            let v = via(&wm, path, accept, &ask).await;
            let shown = format!(
                "{path} {accept} Accept-Encoding {:?}",
                ask.iter().map(|a| &a[..a.len().min(30)]).collect::<Vec<_>>()
            );
            assert_eq!(
                (v.status, &v.content_type, &v.content_encoding, &v.vary),
                (d.status, &d.content_type, &d.content_encoding, &d.vary),
                "{shown}"
            );
            if *accept == json_ct {
                assert_eq!(comparable(&v.decoded), comparable(&v_plain.decoded), "{shown}: decoded through watchmux");
                assert_eq!(comparable(&d.decoded), comparable(&d_plain.decoded), "{shown}: decoded direct");
                assert_eq!(comparable(&v.decoded), comparable(&d.decoded), "{shown}: watchmux and the API server");
            } else {
                // A protobuf list differs from another read only in its version's digits.
                assert!(v.decoded.starts_with(b"k8s\0"), "{shown}");
                assert!(v.decoded.len().abs_diff(v_plain.decoded.len()) < 4, "{shown}");
                assert!(v.decoded.len().abs_diff(d.decoded.len()) < 4, "{shown}: watchmux and the API server");
            }
        }
        // The plain ask is the one that matters most: say it outright.
        let gz = [String::from("gzip")];
        let v = via(&wm, path, accept, &gz).await;
        let want = is_large.then(|| "gzip".to_owned());
        assert_eq!(v.content_encoding, want, "{path} {accept}");
        assert_eq!(v.vary, if *is_large { vec!["Accept-Encoding".to_owned()] } else { vec![] }, "{path} {accept}");
    }
    let served_after = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await;
    assert!(served_after - served_before >= 6.0 * 14.0, "the configmap lists came from the cache");
    let streamed = watchmux_metric_sum(wm.admin, "watchmux_cache_list_streamed_total", &[]).await - streamed_before;
    assert_eq!(
        streamed,
        2.0 * 15.0,
        "the 1.2 MiB list, each time through watchmux and in either form, was streamed; no other"
    );
    let gets_after = watchmux_metric_sum(wm.admin, "watchmux_cache_get_total", &[]).await;
    assert!(gets_after - gets_before >= 2.0 * 14.0, "the configmap GETs came from the cache");

    // Watches: a watch-list is compressed whatever its size, a plain watch never.
    for (ns, watch) in [
        (&small, "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"),
        (&large, "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"),
        (&small, "watch=1&resourceVersion=0"),
    ] {
        let path = format!("/api/v1/namespaces/{ns}/configmaps?{watch}&timeoutSeconds=2");
        for ask in [vec![], vec!["gzip".to_owned()], vec!["gzip;q=1".to_owned()]] {
            let (d, v) = (direct(&client, &path, json_ct, &ask).await, via(&wm, &path, json_ct, &ask).await);
            assert_eq!((&v.content_encoding, &v.vary), (&d.content_encoding, &d.vary), "{path} {ask:?}");
            assert_eq!(v.status, d.status);
            assert_eq!(event_names(&v.decoded), event_names(&d.decoded), "{path} {ask:?}");
        }
    }
    for ns in [&large, &small, &huge] {
        cluster.kubectl_direct(&["delete", "namespace", ns, "--wait=false"]);
    }
}

/// The (type, name) of each event of a watch body, the initial-events-end
/// bookmark named by its annotation; other bookmarks (the API server sends
/// one before a watch times out, as its timer falls) left out.
fn event_names(body: &Bytes) -> Vec<(String, String)> {
    body.split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .filter_map(|line| {
            let event: Value = serde_json::from_slice(line).unwrap();
            let name = event["object"]["metadata"]["name"].as_str().unwrap_or("").to_owned();
            let bookmark = &event["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"];
            let kind = event["type"].as_str().unwrap().to_owned();
            match (kind.as_str(), bookmark.is_string()) {
                ("BOOKMARK", true) => Some((kind, "initial-events-end".to_owned())),
                ("BOOKMARK", false) => None,
                _ => Some((kind, name)),
            }
        })
        .collect()
}

/// kubectl's client-go reads a compressed LIST from the cache, and an
/// informer syncs and watches with compression on (a watch-list stream of
/// gzip members) and off; watchmux's own initial list, of pages over 128 KiB,
/// asks for gzip or not with the same setting and holds every object.
#[tokio::test]
async fn client_go_reads_through_watchmux_with_compression_on_and_off() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let ns = namespace("gzip-kubectl");
    // About 1.2 MiB: kubectl reads a LIST the cache streams.
    fill(&client, &ns, 40, 30_000).await;
    for setting in ["true", "false"] {
        let wm = Watchmux::start(
            &cluster,
            &[
                "--cache-resources",
                "configmaps",
                "--cache-warm",
                &format!("--compress-responses={setting}"),
                &format!("--upstream-gzip-lists={setting}"),
            ],
        )
        .await;
        wait_initialized(wm.admin, "configmaps", 1.0).await;
        let lists_before = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await;
        // kubectl's REST client, over Go's transport (which asks for gzip
        // and decodes it), reading a LIST the cache answers.
        let path = format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0");
        let through = wm.kubectl(&cluster, &["get", "--raw", &path]);
        let straight = cluster.kubectl_direct(&["get", "--raw", &path]);
        assert!(through.ok, "{through:?}");
        let names = |out: &str| -> Vec<String> {
            let list: Value = serde_json::from_str(out).unwrap();
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names(&through.stdout), names(&straight.stdout));
        assert_eq!(names(&through.stdout).len(), 40);
        assert!(through.stdout.len() > 1 << 20, "{} bytes: streamed, and compressed", through.stdout.len());
        let lists_after = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[]).await;
        assert!(lists_after > lists_before, "kubectl's LIST was served from the cache");
        let informer_ns = namespace(&format!("gzip-informer-{setting}"));
        super::run_watchcheck(&cluster, &wm, &informer_ns, "true");
        cluster.kubectl_direct(&["delete", "namespace", &informer_ns, "--wait=false"]);
    }
    cluster.kubectl_direct(&["delete", "namespace", &ns, "--wait=false"]);
}
