//! Slow watchers against the real API server (issue 26 item 2): a watcher
//! that stops reading for longer than `--slow-watcher-grace` is not closed;
//! when it reads again it receives every event, in order, once, fed from
//! the history ring until it has caught up. One that stays stuck until the
//! ring no longer holds what it missed gets what kube-apiserver gives a
//! watch from that version: 410 Expired in the stream.
//!
//! The watcher stops reading as a real client does: it stops taking its
//! HTTP/2 stream's body, whose 64 KiB window then fills, so watchmux's
//! stream is no longer polled and its queue grows.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::time::Instant;
use watchmux::upstream::Upstream;

use crate::env::*;

/// Writers patching at once, each its own ConfigMap.
const WRITERS: usize = 16;
/// Bytes of padding per ConfigMap: a watch event of about 2.5 KiB, so the
/// stalled stream's window holds only a few dozen.
const PAD: usize = 2000;
const BOUND: Duration = Duration::from_secs(120);

/// Patches `n` times in all, `WRITERS` at once; returns the versions written.
async fn burst(client: &Arc<Upstream>, ns: &str, n: usize) -> Vec<u64> {
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (client, ns) = (client.clone(), ns.to_owned());
            tokio::spawn(async move {
                let mut rvs = Vec::new();
                for i in (w..n).step_by(WRITERS) {
                    let patch = json!({"data": {"v": i.to_string(), "pad": "x".repeat(PAD)}});
                    let path = format!("/api/v1/namespaces/{ns}/configmaps/c{w}");
                    let v = direct_json(&client, http::Method::PATCH, &path, patch).await;
                    rvs.push(v["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap());
                }
                rvs
            })
        })
        .collect();
    let mut rvs = Vec::new();
    for t in tasks {
        rvs.extend(t.await.unwrap());
    }
    rvs
}

/// A namespace of `WRITERS` ConfigMaps.
async fn setup(client: &Arc<Upstream>, ns: &str) {
    create_namespace(client, ns).await;
    for w in 0..WRITERS {
        configmap(client, "create", ns, &format!("c{w}")).await;
    }
}

/// A watch of the namespace's ConfigMaps from `rv` on an HTTP/2 connection
/// of its own with a 64 KiB stream window, nothing read yet.
async fn stalled_watch(addr: SocketAddr, ns: &str, rv: u64) -> Incoming {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(65_535)
        .handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let path = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={rv}");
    let req = Request::get(path).header("host", addr.to_string()).body(Full::<Bytes>::default()).unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body()
}

/// The version the cache is at, from a LIST at resourceVersion=0 through
/// watchmux (which starts the cache). A watch from the setup's own last
/// version would get 410 whenever anything in the cluster was written
/// between it and the cache's first list (a fresh cache bridges nothing
/// before its list), as a lease renewal sometimes is.
async fn cache_rv(wm: &Watchmux, ns: &str) -> u64 {
    let (code, body) = read(get(wm.addr, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0")).await).await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_slice(&body).unwrap();
    list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

/// Reads watch lines from `body` until `done` says so or the stream ends
/// (then the last line is `None`); bounded by [`BOUND`].
async fn read_lines(body: &mut Incoming, buf: &mut Vec<u8>, done: impl Fn(&Value) -> bool) -> Vec<Option<Value>> {
    let mut lines = Vec::new();
    let deadline = Instant::now() + BOUND;
    loop {
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let v: Value = serde_json::from_slice(&line[..end]).unwrap();
            let finished = done(&v);
            lines.push(Some(v));
            if finished {
                return lines;
            }
        }
        match tokio::time::timeout_at(deadline, body.frame()).await.expect("the watch went quiet") {
            Some(Ok(frame)) => buf.extend_from_slice(&frame.into_data().unwrap_or_default()),
            Some(Err(e)) => panic!("the watch failed: {e}"),
            None => {
                lines.push(None);
                return lines;
            }
        }
    }
}

/// Writes bursts until watchmux reports a configmaps watcher reading the
/// ring (the stalled one: nothing else watches); returns what it wrote.
async fn write_until_behind(client: &Arc<Upstream>, ns: &str, wm: &Watchmux) -> Vec<u64> {
    let mut written = Vec::new();
    let started = Instant::now();
    let catching_up = || watchmux_metric_sum(wm.admin, "watchmux_watchers_catching_up", &[r#"resource="configmaps""#]);
    while catching_up().await < 1.0 {
        assert!(started.elapsed() < BOUND, "the stalled watcher never fell behind; log:\n{}", wm.log());
        written.extend(burst(client, ns, 400).await);
    }
    written
}

async fn slow_outcome(wm: &Watchmux, outcome: &str) -> f64 {
    let labels = [r#"resource="configmaps""#, &format!(r#"outcome="{outcome}""#)];
    watchmux_metric_sum(wm.admin, "watchmux_slow_watchers_total", &labels).await
}

fn rv_of(v: &Value) -> u64 {
    v["object"]["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn a_watcher_that_stops_reading_past_the_grace_then_resumes_gets_every_event_in_order() {
    // Thousands of writes: alone, so the bounds of the others hold.
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let ns = namespace("slow-resume");
    setup(&client, &ns).await;
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--slow-watcher-grace", "1s"]).await;
    let mut body = stalled_watch(wm.addr, &ns, cache_rv(&wm, &ns).await).await;
    let mut written = write_until_behind(&client, &ns, &wm).await;
    assert!(slow_outcome(&wm, "moved_to_ring").await >= 1.0);
    // It reads again while more is written: from the ring, then live.
    let more = {
        let (client, ns) = (client.clone(), ns.clone());
        tokio::spawn(async move { burst(&client, &ns, 400).await })
    };
    let mut buf = Vec::new();
    let before = written.iter().copied().max().unwrap();
    let mut lines = read_lines(&mut body, &mut buf, |v| rv_of(v) >= before).await;
    let later = more.await.unwrap();
    let newest = later.iter().copied().max().unwrap();
    lines.extend(read_lines(&mut body, &mut buf, |v| rv_of(v) >= newest).await);
    written.extend(later);
    written.sort_unstable();

    let mut seen = Vec::new();
    for line in &lines {
        let v = line.as_ref().unwrap_or_else(|| panic!("the stream ended after {} events", seen.len()));
        assert_eq!(v["type"], "MODIFIED", "{v}");
        seen.push(rv_of(v));
    }
    assert_eq!(seen.len(), written.len(), "every event once");
    assert!(seen == written, "in order, as written");
    assert!(slow_outcome(&wm, "caught_up").await >= 1.0, "it caught up and rejoined live delivery");
    assert_eq!(slow_outcome(&wm, "expired").await, 0.0);
    let registered = watchmux_metric_sum(wm.admin, "watchmux_registered_watchers", &[r#"resource="configmaps""#]).await;
    assert_eq!(registered, 1.0, "not closed");
    eprintln!("a watcher stalled for {} events then resumed: all {} in order", written.len(), seen.len());
}

#[tokio::test]
async fn a_watcher_stuck_until_the_ring_evicts_what_it_missed_gets_410_expired() {
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let ns = namespace("slow-expired");
    setup(&client, &ns).await;
    let flags = ["--cache-resources", "configmaps", "--slow-watcher-grace", "1s", "--events-history-window", "2s"];
    let wm = Watchmux::start(&cluster, &flags).await;
    let from = cache_rv(&wm, &ns).await;
    let mut body = stalled_watch(wm.addr, &ns, from).await;
    let written = write_until_behind(&client, &ns, &wm).await;
    // Its window holds a few dozen of these events at most; once a watch
    // from the 200th written is not served from the ring (410, or a
    // backfill), the ring no longer reaches back to where the stuck one is
    // either. The ring keeps about one 2 s window.
    let mut probe_at = written.clone();
    probe_at.sort_unstable();
    let probe = format!("/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={}", probe_at[200]);
    let started = Instant::now();
    loop {
        let (code, first) = first_line(wm.addr, &probe).await;
        if code == 200 && first["type"] == "ERROR" {
            assert_eq!(first["object"]["code"], 410, "{first}");
            break;
        }
        // A watch from a version the ring no longer holds is answered from
        // a backfill (`resource/backfill.rs`), not refused: that it needed
        // one is the sign.
        if watchmux_metric_sum(wm.admin, "watchmux_watch_backfills_total", &[]).await > 0.0 {
            break;
        }
        assert!(started.elapsed() < BOUND, "the ring never evicted; log:\n{}", wm.log());
        tokio::time::sleep(Duration::from_secs(1)).await;
        burst(&client, &ns, 200).await;
    }
    let mut buf = Vec::new();
    let lines = read_lines(&mut body, &mut buf, |v| v["type"] == "ERROR").await;
    let (last, events) = lines.split_last().unwrap();
    let last = last.as_ref().expect("an ERROR event before the end");
    assert_eq!(
        (&last["type"], &last["object"]["code"], &last["object"]["reason"]),
        (&json!("ERROR"), &json!(410), &json!("Expired")),
        "{last}"
    );
    let message = last["object"]["message"].as_str().unwrap();
    assert!(message.starts_with("too old resource version: "), "{message}");
    // What it did get, it got in order, and the 410 names the last of them.
    let rvs: Vec<u64> = events.iter().map(|v| rv_of(v.as_ref().unwrap())).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");
    let last_sent = rvs.last().copied().unwrap_or(from);
    assert!(message.starts_with(&format!("too old resource version: {last_sent} (")), "{message}");
    assert!(read_lines(&mut body, &mut buf, |_| false).await == [None], "the stream ends after the 410");
    assert_eq!(slow_outcome(&wm, "expired").await, 1.0);
    eprintln!("a watcher stuck past the ring: {} events, then {message}", rvs.len());
}

/// Status and first line of a watch (a fresh one, read at once).
async fn first_line(addr: SocketAddr, path: &str) -> (u16, Value) {
    let resp = get(addr, path).await;
    let code = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let lines = read_lines(&mut body, &mut buf, |_| true).await;
    (code, lines.into_iter().next().flatten().unwrap_or(Value::Null))
}
