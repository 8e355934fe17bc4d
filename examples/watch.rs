//! Watches a Kubernetes resource through watchmux and prints each event.
//!
//! ```text
//! cargo run --example watch -- --server http://127.0.0.1:7443 \
//!     --path /api/v1/namespaces/default/configmaps --label w1
//! ```
//!
//! It speaks plain HTTP/1.1 to a watchmux running in trusted-local mode (the
//! default), reads the JSON watch stream line by line, as every Kubernetes
//! client does, and resumes from the last resourceVersion it saw when the
//! stream ends (a timeout, or watchmux shutting down).

use std::time::Duration;

use bytes::BytesMut;
use clap::Parser;
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

#[derive(Parser)]
struct Args {
    /// watchmux's address (plain HTTP).
    #[arg(long, default_value = "http://127.0.0.1:7443")]
    server: Uri,
    /// The collection to watch.
    #[arg(long, default_value = "/api/v1/namespaces/default/configmaps")]
    path: String,
    /// A prefix for every printed line.
    #[arg(long, default_value = "watch")]
    label: String,
    /// Stop after this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    seconds: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let run = watch_forever(&args);
    if args.seconds == 0 {
        run.await
    } else {
        match tokio::time::timeout(Duration::from_secs(args.seconds), run).await {
            Ok(result) => result,
            Err(_) => Ok(()),
        }
    }
}

async fn watch_forever(args: &Args) -> anyhow::Result<()> {
    let authority = args.server.authority().ok_or_else(|| anyhow::anyhow!("--server needs host:port"))?.clone();
    let mut resource_version = String::new();
    loop {
        let stream = TcpStream::connect(authority.as_str()).await?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let uri = format!(
            "{}?watch=true&allowWatchBookmarks=true&resourceVersion={resource_version}&timeoutSeconds=300",
            args.path
        );
        let req = Request::get(uri).header("host", authority.as_str()).body(Empty::<bytes::Bytes>::new())?;
        let resp = send.send_request(req).await?;
        anyhow::ensure!(resp.status().is_success(), "watch answered {}", resp.status());
        let mut body = resp.into_body();
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame?.into_data() else { continue };
            buf.extend_from_slice(&data);
            // Events are newline-delimited JSON; a chunk may hold several, or part of one.
            while let Some(end) = buf.iter().position(|&b| b == b'\n') {
                let line = buf.split_to(end + 1);
                let event: serde_json::Value = serde_json::from_slice(&line[..end])?;
                let kind = event["type"].as_str().unwrap_or("?");
                let meta = &event["object"]["metadata"];
                if let Some(rv) = meta["resourceVersion"].as_str() {
                    resource_version = rv.to_owned();
                }
                if kind == "ERROR" {
                    // 410 Gone and friends: start over with a fresh list.
                    println!("[{}] ERROR {}", args.label, event["object"]["message"]);
                    resource_version.clear();
                    continue;
                }
                if kind != "BOOKMARK" {
                    println!(
                        "[{}] {kind:<8} {}/{} rv={resource_version}",
                        args.label,
                        meta["namespace"].as_str().unwrap_or("-"),
                        meta["name"].as_str().unwrap_or("?"),
                    );
                }
            }
        }
        println!("[{}] stream ended; resuming from rv={resource_version}", args.label);
    }
}
