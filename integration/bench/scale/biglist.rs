//! Large LISTs: C clients at once each LIST every pod (`resourceVersion=0`,
//! served from the cache on both sides), as JSON or protobuf, with or
//! without `Accept-Encoding: gzip`, each on a connection of its own, reading
//! the body as it comes (the client holds none of it). Per run: each
//! request's time to its last byte, the bytes on the wire, the serving
//! process's CPU, and the growth of its resident memory at its peak against
//! the response's size: a server that streams stays flat, one that builds
//! the whole answer first grows by about the answer per client.

use std::time::Instant;

use futures_util::future::try_join_all;
use http::{HeaderValue, StatusCode};
use http_body_util::BodyExt;

use crate::common::client::{Shape, Target};
use crate::common::procfs::{cpu_ticks, rss_bytes, ticks_ms};
use crate::common::sampler::PeakRss;

pub struct ListRun {
    pub latency_ms: Vec<f64>,
    /// Bytes of one answer as received (compressed if it was).
    pub wire_bytes: u64,
    pub content_encoding: Option<String>,
    pub server_cpu_ms: f64,
    pub server_rss_before: u64,
    pub server_rss_peak: u64,
}

pub async fn run(
    target: &Target,
    server_pid: u32,
    format: &'static str,
    gzip: bool,
    clients: usize,
) -> anyhow::Result<ListRun> {
    let accept = match format {
        "protobuf" => "application/vnd.kubernetes.protobuf",
        _ => "application/json",
    };
    // Connections first, so the figures are the LISTs' alone.
    let conns = try_join_all((0..clients).map(|_| target.connect(Shape::H2))).await?;
    let rss_before = rss_bytes(server_pid)?;
    let cpu_before = cpu_ticks(server_pid)?;
    let peak = PeakRss::start(server_pid);
    let t0 = Instant::now();
    let results = try_join_all(conns.iter().map(|conn| async move {
        let mut req = target.request(Shape::H2, "/api/v1/pods?resourceVersion=0");
        req.headers_mut().insert("accept", HeaderValue::from_static(accept));
        if gzip {
            req.headers_mut().insert("accept-encoding", HeaderValue::from_static("gzip"));
        }
        let resp = conn.send(req).await?;
        if resp.status() != StatusCode::OK {
            anyhow::bail!("LIST pods ({format}): {}", resp.status());
        }
        let encoding = resp.headers().get("content-encoding").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut body = resp.into_body();
        let mut bytes = 0u64;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                bytes += data.len() as u64;
            }
        }
        anyhow::Ok((t0.elapsed().as_secs_f64() * 1e3, bytes, encoding))
    }))
    .await?;
    let server_cpu_ms = ticks_ms(cpu_ticks(server_pid)? - cpu_before);
    let server_rss_peak = peak.finish().await;
    Ok(ListRun {
        latency_ms: results.iter().map(|r| r.0).collect(),
        wire_bytes: results.iter().map(|r| r.1).max().unwrap_or(0),
        content_encoding: results.first().and_then(|r| r.2.clone()),
        server_cpu_ms,
        server_rss_before: rss_before,
        server_rss_peak,
    })
}
