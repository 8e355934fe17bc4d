//! The measurements themselves: watchmux's resident memory (sampled, settled,
//! its high-water mark reset), a LIST read whole at a chosen pace or page by
//! page, sequential requests on one connection timed at the client, and a
//! trivial HTTP/2 server for the loopback floor.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::common::client::{Sender, Shape, Target};
use crate::common::procfs::rss_bytes;
use crate::common::sampler::PeakRss;

/// How often RSS is read while a LIST is served.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// Settled: RSS moved less than this between readings `SETTLE_EVERY` apart.
const SETTLE_TOLERANCE: f64 = 0.002;
const SETTLE_EVERY: Duration = Duration::from_millis(500);

/// VmHWM (peak RSS) of `pid`, in bytes.
pub fn hwm_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("no VmHWM")?;
    Ok(line.split_whitespace().nth(1).context("odd VmHWM")?.parse::<u64>()? * 1024)
}

/// Resets `pid`'s VmHWM to its current RSS (`clear_refs` 5, Linux 4.0+).
pub fn reset_hwm(pid: u32) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").context("resetting VmHWM")
}

/// Waits until `pid`'s RSS holds still (or `limit` passes); the last reading
/// and how long it took.
pub async fn settle(pid: u32, limit: Duration) -> anyhow::Result<(u64, Duration)> {
    let start = Instant::now();
    let mut last = rss_bytes(pid)?;
    loop {
        tokio::time::sleep(SETTLE_EVERY).await;
        let now = rss_bytes(pid)?;
        if (now as f64 - last as f64).abs() <= last as f64 * SETTLE_TOLERANCE || start.elapsed() > limit {
            return Ok((now, start.elapsed()));
        }
        last = now;
    }
}

/// What serving one LIST cost watchmux's memory, and how long it took.
#[derive(Debug, Default, Clone)]
pub struct ListRead {
    /// To the response headers (the first page's, paginated).
    pub headers: Duration,
    /// To the first body byte.
    pub first_byte: Duration,
    /// To the last body byte (of the last page).
    pub last_byte: Duration,
    pub bytes: u64,
    pub pages: usize,
    /// RSS before it (settled), the highest sampled while it was served, and
    /// the VmHWM after it (reset before it).
    pub rss_before: u64,
    pub rss_sampled_peak: u64,
    pub rss_hwm: u64,
}

impl ListRead {
    /// The growth (the higher of the sampled peak and the high-water mark) over the LIST's size.
    pub fn growth(&self) -> u64 {
        self.rss_sampled_peak.max(self.rss_hwm).saturating_sub(self.rss_before)
    }

    pub fn growth_share(&self) -> f64 {
        self.growth() as f64 / self.bytes.max(1) as f64
    }
}

/// One LIST at `path` on a new HTTP/1.1 connection, read at `pace` bytes a
/// second (`None`: as fast as this process reads) while watchmux's RSS is
/// sampled. A `limit` in the path is followed page by page (continue tokens
/// read from each page's metadata, as a client-go pager does).
/// RSS is read `rest` after the LIST before it at the soonest, so that the
/// pages that one freed are not counted as this one's growth when reused.
pub async fn list(
    target: &Target,
    path: &str,
    pace: Option<f64>,
    pid: u32,
    rest: Duration,
) -> anyhow::Result<ListRead> {
    tokio::time::sleep(rest).await;
    let (rss_before, _) = settle(pid, Duration::from_secs(20)).await?;
    reset_hwm(pid)?;
    let sender = target.connect(Shape::H1).await?;
    let sampler = PeakRss::every(pid, SAMPLE_EVERY);
    let mut read = ListRead { rss_before, ..ListRead::default() };
    let start = Instant::now();
    let mut next: Option<String> = None;
    loop {
        let page_path = match &next {
            None => path.to_owned(),
            Some(token) => {
                format!("{path}&continue={}", form_urlencoded::byte_serialize(token.as_bytes()).collect::<String>())
            }
        };
        let resp = sender.send(target.request(Shape::H1, &page_path)).await?;
        if read.pages == 0 {
            read.headers = start.elapsed();
        }
        if !resp.status().is_success() {
            bail!("LIST {page_path}: {}", resp.status());
        }
        let mut body = resp.into_body();
        // The page's start: its metadata, where a continue token would be.
        let mut head = Vec::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame?.into_data() else { continue };
            if read.bytes == 0 {
                read.first_byte = start.elapsed();
            }
            read.bytes += data.len() as u64;
            if head.len() < 512 {
                head.extend_from_slice(&data[..data.len().min(512 - head.len())]);
            }
            if let Some(rate) = pace {
                let due = start + Duration::from_secs_f64(read.bytes as f64 / rate);
                if due > Instant::now() {
                    tokio::time::sleep_until(due.into()).await;
                }
            }
        }
        read.pages += 1;
        next = continue_token(&head);
        if next.is_none() {
            break;
        }
    }
    read.last_byte = start.elapsed();
    read.rss_sampled_peak = sampler.finish().await;
    read.rss_hwm = hwm_bytes(pid)?;
    Ok(read)
}

/// The `continue` token of a list's metadata, which comes before its items.
fn continue_token(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    let at = text.find(r#""continue":""#)? + r#""continue":""#.len();
    let end = text[at..].find('"')?;
    Some(text[at..at + end].to_owned()).filter(|t| !t.is_empty())
}

/// What to wait for in a timed request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The response headers, then the stream is reset (a watch start: its
    /// response never ends).
    Headers,
    /// The last byte of the body (the headers' time is kept too).
    LastByte,
}

/// A request's path by its index in a series.
pub type PathOf = Box<dyn Fn(usize) -> String>;

/// The series both benches' sides are timed with: an empty namespace's LIST
/// (a cached LIST without objects: the floor of the ones after it), a
/// node-scoped LIST at `resourceVersion=0` and consistent, and a watch
/// start from `rv`; `selector(i)` is the i-th request's
/// `fieldSelector=spec.nodeName%3D...`.
pub fn request_series(
    selector: impl Fn(usize) -> String + Clone + 'static,
    rv: String,
) -> Vec<(&'static str, Until, PathOf)> {
    let (s1, s2) = (selector.clone(), selector.clone());
    vec![
        (
            "an empty namespace's LIST (resourceVersion=0)",
            Until::LastByte,
            Box::new(|_| "/api/v1/namespaces/million-empty/pods?resourceVersion=0".to_owned()),
        ),
        (
            "node-scoped LIST, resourceVersion=0",
            Until::LastByte,
            Box::new(move |i| format!("/api/v1/pods?{}&resourceVersion=0", s1(i))),
        ),
        (
            "node-scoped LIST, consistent (no resourceVersion)",
            Until::LastByte,
            Box::new(move |i| format!("/api/v1/pods?{}", s2(i))),
        ),
        (
            "watch start, resourceVersion=<current>, node-scoped",
            Until::Headers,
            Box::new(move |i| {
                format!("/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&{}", selector(i))
            }),
        ),
    ]
}

/// A series of timed requests: the times at the client, sorted.
#[derive(Default)]
pub struct Timed {
    pub headers: Vec<Duration>,
    /// Empty for [`Until::Headers`].
    pub last_byte: Vec<Duration>,
    pub not_ok: usize,
    /// Times the connection was found closed and opened again (not timed).
    pub reconnects: usize,
}

/// Sequential requests on one h2c connection, `path(i)` for i in 0..n.
pub async fn timed(target: &Target, n: usize, until: Until, path: impl Fn(usize) -> String) -> anyhow::Result<Timed> {
    let mut out = Timed::default();
    let mut sender = target.connect(Shape::H2).await?;
    for i in 0..n {
        let req = target.request(Shape::H2, &path(i));
        let start = Instant::now();
        let resp = match sender.send(req).await {
            Ok(resp) => resp,
            Err(err) if sender.is_closed() && out.reconnects < n => {
                // Counted and said: a server that closes a connection its
                // client resets streams on is part of the answer.
                eprintln!("million: the connection closed after {i} requests ({err}); again on a new one");
                out.reconnects += 1;
                sender = target.connect(Shape::H2).await?;
                continue;
            }
            Err(err) => return Err(err),
        };
        out.headers.push(start.elapsed());
        if resp.status() != http::StatusCode::OK {
            if out.not_ok == 0 {
                // Said once a series: what the server answered instead.
                let status = resp.status();
                let body = resp.into_body().collect().await?.to_bytes();
                eprintln!(
                    "million: request {i} got {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                );
                out.not_ok += 1;
                continue;
            }
            out.not_ok += 1;
        }
        if until == Until::LastByte {
            resp.into_body().collect().await?;
            out.last_byte.push(start.elapsed());
        }
    }
    out.headers.sort();
    out.last_byte.sort();
    Ok(out)
}

/// The items a JSON list holds.
pub fn count_items(body: &[u8]) -> anyhow::Result<usize> {
    let list: serde_json::Value = serde_json::from_slice(body)?;
    Ok(list["items"].as_array().context("no items")?.len())
}

/// A GET through `sender`: status and body.
pub async fn get(target: &Target, sender: &Sender, path: &str) -> anyhow::Result<(http::StatusCode, Bytes)> {
    let resp = sender.send(target.request(Shape::H2, path)).await?;
    let status = resp.status();
    Ok((status, resp.into_body().collect().await?.to_bytes()))
}

/// A server on loopback answering `{}` to everything (h2c by prior
/// knowledge, or HTTP/1.1): what loopback and hyper cost a request alone.
/// On its own thread and runtime pinned to `cpus` (watchmux's core) when
/// given, so that a request crosses between cores as it does to watchmux:
/// in this machine's VM that crossing, a wake-up each way, is most of what
/// an empty LIST costs at the client, and a floor on the client's own core
/// (where it had been) left it all in watchmux's column.
pub async fn floor_server(cpus: Option<&str>) -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let Some(cpus) = cpus else {
        tokio::spawn(serve_floor(tokio::net::TcpListener::from_std(listener)?));
        return Ok(addr);
    };
    let mut set = rustix::thread::CpuSet::new();
    for part in cpus.split(',') {
        let core = |n: &str| n.trim().parse::<usize>().with_context(|| format!("a core number in {cpus:?}"));
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        for cpu in core(first)?..=core(last)? {
            set.set(cpu);
        }
    }
    std::thread::Builder::new().name("floor".into()).spawn(move || {
        rustix::thread::sched_setaffinity(None, &set).expect("pinning the floor server");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        rt.block_on(async move {
            serve_floor(tokio::net::TcpListener::from_std(listener).expect("a listener")).await;
        });
    })?;
    Ok(addr)
}

async fn serve_floor(listener: tokio::net::TcpListener) {
    {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from_static(b"{}"))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    }
}

pub fn self_check() {
    assert_eq!(
        continue_token(br#"{"kind":"PodList","metadata":{"resourceVersion":"5","continue":"ab=c"},"items":["#),
        Some("ab=c".to_owned())
    );
    assert_eq!(
        continue_token(br#"{"metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"continue"}}]"#),
        None
    );
    assert_eq!(count_items(br#"{"items":[{},{}]}"#).unwrap(), 2);
}
