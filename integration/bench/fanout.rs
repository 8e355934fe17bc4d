//! Fan-out to many watchers, measured side by side in one run: N watches of
//! the ConfigMaps of one namespace, all from the same resourceVersion, held
//! straight on kube-apiserver and then through watchmux, while a writer
//! patches one ~1 KiB ConfigMap 20 times, one write every 200 ms.
//!
//! `make bench-fanout` (integration/scripts/bench-fanout.sh) starts the test
//! cluster and, for each configuration, a fresh release watchmux with
//! `--cache-resources configmaps --cache-warm`, then runs this once per
//! configuration with:
//!
//! - `WATCHMUX_BENCH_KUBECONFIG`: the API server's admin kubeconfig;
//! - `WATCHMUX_BENCH_PROXY`, `WATCHMUX_BENCH_ADMIN`: watchmux's API and admin addresses;
//! - `WATCHMUX_BENCH_PROXY_PID`, `WATCHMUX_BENCH_APISERVER_PIDFILE`: the processes measured;
//! - `FANOUT_N` (watchers), `FANOUT_SHAPE` (`h2`: many watches per HTTP/2
//!   connection; `h1`: one HTTP/1.1 connection per watcher), `CLK_TCK`;
//! - optional: `FANOUT_SIDES` (`direct,watchmux`), `FANOUT_WRITES` (20, at most 64),
//!   `FANOUT_INTERVAL_MS` (200), `FANOUT_API_STREAMS` (watches per HTTP/2
//!   connection to kube-apiserver; default: what it advertises, at most 250),
//!   `FANOUT_PROXY_STREAMS` (to watchmux; default 1000); diagnostics:
//!   `FANOUT_DEBUG` (per-write receipt times on stderr), `FANOUT_RCVBUF`
//!   (a fixed SO_RCVBUF for the watch connections instead of autotuning).
//!
//! For each side, in order: a CPU baseline (the same 20 writes, no watchers,
//! over the same fixed window); resident memory of the server process; N
//! watches opened from the resourceVersion of a fresh LIST; a wait until every
//! one answered 200 and 5 s more; memory again; then the 20 writes, each
//! timestamped as it is issued, and every watcher's receipt of every event.
//! Through watchmux, one more watcher straight on the API server (opened after
//! the counts) is the reference: its receipt of a write is when the API server
//! made the event available, so the receipts after it are watchmux's own delay.
//! The output is one Markdown table per configuration, sides as columns.
//!
//! Direct means TLS to kube-apiserver with the admin token (ALPN `h2` or
//! `http/1.1` by shape); through watchmux means plain text (h2c by prior
//! knowledge, or HTTP/1.1) to watchmux, which holds its one upstream watch.
//! The writer always goes straight to kube-apiserver on a connection of its own.
//!
//! The load generator keeps its per-event work small: it finds the end of
//! each line and the `"seq":"` the writer put into `data` by a short search
//! backwards from there (ConfigMap `data` is the last field), with no JSON
//! parse.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use watchmux::config::kubeconfig::UpstreamAuth;
use watchmux::upstream::{Upstream, UpstreamOptions};

const NS: &str = "watchmux-bench-fanout";
const CM: &str = "fanout";
/// Quiet time after the last write inside the fixed CPU window.
const WINDOW_TAIL: Duration = Duration::from_secs(2);
/// How long watchers stay idle, all open, before memory is read.
const IDLE: Duration = Duration::from_secs(5);
/// Bound on opening all the watches of one side.
const OPEN_DEADLINE: Duration = Duration::from_secs(120);
/// Bound on waiting for deliveries after the last write.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(30);
/// Watch requests (and, for HTTP/1.1, connections) being opened at once.
const OPEN_CONCURRENCY: usize = 256;
/// Pause between sides, so that the closing of one side's watches is not
/// measured as the next side's baseline.
const SETTLE: Duration = Duration::from_secs(4);

// ---------------------------------------------------------------------------
// Configuration

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    /// Many watches multiplexed over each HTTP/2 connection.
    H2,
    /// One HTTP/1.1 connection per watcher.
    H1,
}

struct Config {
    n: usize,
    shape: Shape,
    sides: Vec<SideKind>,
    writes: usize,
    interval: Duration,
    api_streams: Option<usize>,
    proxy_streams: usize,
    proxy: SocketAddr,
    admin: SocketAddr,
    proxy_pid: u32,
    /// kube-apiserver's pid file (re-read for every side: other tests may restart it).
    apiserver_pidfile: String,
    clk_tck: f64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SideKind {
    Direct,
    Watchmux,
}

fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set (run integration/scripts/bench-fanout.sh)"))
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|_| anyhow!("{name}={v:?} does not parse")),
        Err(_) => Ok(default),
    }
}

impl Config {
    fn from_env() -> anyhow::Result<Self> {
        let shape = match env_or("FANOUT_SHAPE", "h2".to_owned())?.as_str() {
            "h2" => Shape::H2,
            "h1" => Shape::H1,
            other => bail!("FANOUT_SHAPE={other:?}: h2 or h1"),
        };
        let sides = env_or("FANOUT_SIDES", "direct,watchmux".to_owned())?
            .split(',')
            .map(|s| match s.trim() {
                "direct" => Ok(SideKind::Direct),
                "watchmux" => Ok(SideKind::Watchmux),
                other => Err(anyhow!("FANOUT_SIDES: unknown side {other:?}")),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let writes: usize = env_or("FANOUT_WRITES", 20)?;
        if writes == 0 || writes > 64 {
            bail!("FANOUT_WRITES must be 1..=64");
        }
        Ok(Self {
            n: env_or("FANOUT_N", 1000)?,
            shape,
            sides,
            writes,
            interval: Duration::from_millis(env_or("FANOUT_INTERVAL_MS", 200)?),
            api_streams: std::env::var("FANOUT_API_STREAMS").ok().map(|v| v.parse()).transpose()?,
            proxy_streams: env_or("FANOUT_PROXY_STREAMS", 1000)?,
            proxy: env("WATCHMUX_BENCH_PROXY")?.parse()?,
            admin: env("WATCHMUX_BENCH_ADMIN")?.parse()?,
            proxy_pid: env("WATCHMUX_BENCH_PROXY_PID")?.parse()?,
            apiserver_pidfile: env("WATCHMUX_BENCH_APISERVER_PIDFILE")?,
            clk_tck: env_or("CLK_TCK", 100.0)?,
        })
    }

    /// The fixed length of a CPU window: the writes, then a quiet tail.
    fn window(&self) -> Duration {
        self.interval * self.writes as u32 + WINDOW_TAIL
    }
}

// ---------------------------------------------------------------------------
// /proc

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name is in parentheses and may hold spaces: count fields after the last ')'.
    let rest = &stat[stat.rfind(')').ok_or_else(|| anyhow!("odd /proc/{pid}/stat"))? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3 of the whole line, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11).ok_or_else(|| anyhow!("short stat"))?.parse()?;
    let stime: u64 = fields.get(12).ok_or_else(|| anyhow!("short stat"))?.parse()?;
    Ok(utime + stime)
}

fn self_cpu_ticks() -> u64 {
    cpu_ticks(std::process::id()).unwrap_or(0)
}

/// VmRSS of a process, in bytes.
fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).ok_or_else(|| anyhow!("no VmRSS for {pid}"))?;
    let kb: u64 = line.split_whitespace().nth(1).ok_or_else(|| anyhow!("odd VmRSS"))?.parse()?;
    Ok(kb * 1024)
}

/// Write system calls (write, writev, sendmsg...) a process has made: `syscw` in /proc/<pid>/io.
fn write_syscalls(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|io| io.lines().find_map(|l| l.strip_prefix("syscw:").and_then(|v| v.trim().parse().ok())))
        .unwrap_or(0)
}

#[derive(Clone, Copy, Default)]
struct Cpu {
    server: u64,
    apiserver: u64,
    bench: u64,
    server_syscw: u64,
}

fn cpu_now(server_pid: u32, api_pid: u32) -> anyhow::Result<Cpu> {
    Ok(Cpu {
        server: cpu_ticks(server_pid)?,
        apiserver: cpu_ticks(api_pid).context("kube-apiserver gone (restarted by another test?)")?,
        bench: self_cpu_ticks(),
        server_syscw: write_syscalls(server_pid),
    })
}

fn apiserver_pid(cfg: &Config) -> anyhow::Result<u32> {
    let text = std::fs::read_to_string(&cfg.apiserver_pidfile)
        .with_context(|| format!("reading {}", cfg.apiserver_pidfile))?;
    Ok(text.trim().parse()?)
}

// ---------------------------------------------------------------------------
// Prometheus text

/// The sum of every sample of `name` whose labels include all of `labels`.
fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut sum = 0.0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let (label_part, value) = match rest.rfind(' ') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => continue,
        };
        if labels.iter().all(|(k, v)| label_part.contains(&format!("{k}=\"{v}\""))) {
            sum += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    sum
}

/// Every sample of `name`, label set and value, for a breakdown.
fn metric_samples(text: &str, name: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                return None;
            }
            let i = rest.rfind(' ')?;
            Some((rest[..i].trim().to_owned(), rest[i + 1..].parse().ok()?))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Clients

/// `FANOUT_RCVBUF`: a fixed SO_RCVBUF for the watch connections (a diagnostic;
/// unset, the kernel autotunes it as it does for any client).
static RCVBUF: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();

/// Where the watches of one side go.
#[derive(Clone)]
enum Target {
    Direct { addr: SocketAddr, tls_h2: Arc<rustls::ClientConfig>, tls_h1: Arc<rustls::ClientConfig>, auth: HeaderValue },
    Proxy { addr: SocketAddr },
}

impl Target {
    fn addr(&self) -> SocketAddr {
        match self {
            Target::Direct { addr, .. } | Target::Proxy { addr } => *addr,
        }
    }

    /// A watch request; absolute-form URI for HTTP/2 (it needs :scheme and
    /// :authority), origin-form with Host for HTTP/1.1.
    fn request(&self, shape: Shape, path_and_query: &str) -> Request<Empty<Bytes>> {
        let addr = self.addr();
        let scheme = if matches!(self, Target::Direct { .. }) { "https" } else { "http" };
        let uri = match shape {
            Shape::H2 => format!("{scheme}://{addr}{path_and_query}"),
            Shape::H1 => path_and_query.to_owned(),
        };
        let mut b = Request::get(uri).header("accept", "application/json");
        if shape == Shape::H1 {
            b = b.header("host", addr.to_string());
        }
        if let Target::Direct { auth, .. } = self {
            b = b.header("authorization", auth.clone());
        }
        b.body(Empty::new()).expect("valid request")
    }

    /// One new connection of the given shape.
    async fn connect(&self, shape: Shape) -> anyhow::Result<Sender> {
        let tcp = match *RCVBUF.get().unwrap_or(&None) {
            None => TcpStream::connect(self.addr()).await?,
            Some(size) => {
                let socket = tokio::net::TcpSocket::new_v4()?;
                socket.set_recv_buffer_size(size)?;
                socket.connect(self.addr()).await?
            }
        };
        tcp.set_nodelay(true)?;
        match self {
            Target::Direct { tls_h2, tls_h1, .. } => {
                let tls = if shape == Shape::H2 { tls_h2 } else { tls_h1 };
                let stream = tls_connect(tls.clone(), tcp).await?;
                handshake(stream, shape).await
            }
            Target::Proxy { .. } => handshake(tcp, shape).await,
        }
    }
}

async fn tls_connect(
    tls: Arc<rustls::ClientConfig>,
    tcp: TcpStream,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let name = ServerName::IpAddress(tcp.peer_addr()?.ip().into());
    Ok(tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await?)
}

enum Sender {
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
    H1(hyper::client::conn::http1::SendRequest<Empty<Bytes>>),
}

impl Sender {
    async fn send(&mut self, req: Request<Empty<Bytes>>) -> anyhow::Result<http::Response<Incoming>> {
        Ok(match self {
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        })
    }
}

async fn handshake<T>(io: T, shape: Shape) -> anyhow::Result<Sender>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    Ok(match shape {
        Shape::H2 => {
            let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .handshake(TokioIo::new(io))
                .await?;
            tokio::spawn(conn);
            Sender::H2(send)
        }
        Shape::H1 => {
            let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
            tokio::spawn(conn);
            Sender::H1(send)
        }
    })
}

/// Reads the server's first SETTINGS frame and returns its
/// SETTINGS_MAX_CONCURRENT_STREAMS (None: not sent, i.e. unlimited).
async fn advertised_max_streams<T: AsyncRead + AsyncWrite + Unpin>(mut io: T) -> anyhow::Result<Option<u32>> {
    io.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
    io.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await?; // empty SETTINGS
    io.flush().await?;
    for _ in 0..8 {
        let mut head = [0u8; 9];
        io.read_exact(&mut head).await?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        io.read_exact(&mut payload).await?;
        if head[3] == 4 && head[4] & 1 == 0 {
            return Ok(payload.chunks_exact(6).find_map(|s| {
                (u16::from_be_bytes([s[0], s[1]]) == 3).then(|| u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
            }));
        }
    }
    bail!("no SETTINGS frame from the server")
}

// ---------------------------------------------------------------------------
// Watchers

/// Counters every watcher of a side shares.
#[derive(Default)]
struct Shared {
    opened: AtomicUsize,
    failed: AtomicUsize,
    received: AtomicU64,
}

/// What one watcher saw.
#[derive(Default)]
struct Outcome {
    status: Option<StatusCode>,
    open_error: Option<String>,
    /// First receipt of each sequence number.
    first_seen: Vec<(u8, Instant)>,
    seen_mask: u64,
    duplicates: u32,
    error_events: u32,
    /// Lines that carried no sequence number of this run (bookmarks, other objects).
    other_lines: u32,
    /// The stream ended (cleanly) before the bench closed it.
    ended_early: bool,
    body_error: Option<String>,
    first_error_line: Option<String>,
}

/// The index of the first `\n` in `hay`, eight bytes at a time (the load
/// generator scans every byte it receives: ~1.5 KB per event per watcher).
fn find_newline(hay: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const PAT: u64 = LO * b'\n' as u64;
    let mut chunks = hay.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes")) ^ PAT;
        // The lowest set bit marks the first zero byte of w exactly.
        let zero = w.wrapping_sub(LO) & !w & HI;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks.remainder().iter().position(|&b| b == b'\n').map(|p| at + p)
}

/// The last `"seq":"<digits>"` in a line: the writer's sequence number.
fn find_seq(line: &[u8]) -> Option<u32> {
    const NEEDLE: &[u8] = b"\"seq\":\"";
    let at = line.windows(NEEDLE.len()).rposition(|w| w == NEEDLE)? + NEEDLE.len();
    let digits = &line[at..];
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

impl Outcome {
    fn on_line(&mut self, line: &[u8], now: Instant, writes: usize, shared: &Shared) {
        if line.starts_with(b"{\"type\":\"ERROR\"") {
            self.error_events += 1;
            if self.first_error_line.is_none() {
                self.first_error_line = Some(String::from_utf8_lossy(&line[..line.len().min(300)]).into_owned());
            }
            return;
        }
        match find_seq(line) {
            Some(seq) if (1..=writes as u32).contains(&seq) => {
                let bit = 1u64 << (seq - 1);
                if self.seen_mask & bit != 0 {
                    self.duplicates += 1;
                } else {
                    self.seen_mask |= bit;
                    self.first_seen.push((seq as u8, now));
                    shared.received.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => self.other_lines += 1,
        }
    }
}

/// One watcher: opens its watch (its own connection for HTTP/1.1), then
/// reads events until `stop`.
#[allow(clippy::too_many_arguments)]
async fn run_watcher(
    target: Target,
    shape: Shape,
    conn: Option<Sender>,
    path: Arc<str>,
    permits: Arc<Semaphore>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    writes: usize,
) -> Outcome {
    let mut out = Outcome { first_seen: Vec::with_capacity(writes), ..Default::default() };
    let opened = {
        let _permit = permits.acquire().await.expect("semaphore open");
        let attempt = async {
            let mut sender = match conn {
                Some(s) => s,
                None => target.connect(shape).await?,
            };
            let resp = sender.send(target.request(shape, &path)).await?;
            anyhow::Ok((sender, resp))
        };
        tokio::select! {
            _ = stop.cancelled() => Err(anyhow!("cancelled while opening")),
            r = attempt => r,
        }
    };
    let (_sender, resp) = match opened {
        Ok(pair) => pair,
        Err(e) => {
            out.open_error = Some(format!("{e:#}"));
            shared.failed.fetch_add(1, Ordering::Relaxed);
            return out;
        }
    };
    out.status = Some(resp.status());
    if resp.status() != StatusCode::OK {
        let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect()).await;
        let text = body.ok().and_then(|b| b.ok()).map(|b| b.to_bytes()).unwrap_or_default();
        out.open_error = Some(String::from_utf8_lossy(&text[..text.len().min(300)]).into_owned());
        shared.failed.fetch_add(1, Ordering::Relaxed);
        return out;
    }
    shared.opened.fetch_add(1, Ordering::Relaxed);
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    let cancelled = stop.cancelled();
    tokio::pin!(cancelled);
    loop {
        let frame = tokio::select! {
            biased;
            _ = &mut cancelled => break,
            f = body.frame() => f,
        };
        let data = match frame {
            None => {
                out.ended_early = true;
                break;
            }
            Some(Err(e)) => {
                out.body_error = Some(format!("{e:#}"));
                break;
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
        };
        let now = Instant::now();
        if buf.is_empty() {
            // The common case: the frame holds whole lines; no copy.
            let mut rest: &[u8] = &data;
            while let Some(end) = find_newline(rest) {
                out.on_line(&rest[..end], now, writes, &shared);
                rest = &rest[end + 1..];
            }
            buf.extend_from_slice(rest);
        } else {
            buf.extend_from_slice(&data);
            while let Some(end) = find_newline(&buf) {
                let line = buf.split_to(end + 1);
                out.on_line(&line[..end], now, writes, &shared);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// One side

struct SideResult {
    kind: SideKind,
    connections: usize,
    per_conn: usize,
    opened: usize,
    failed: usize,
    failure_samples: Vec<String>,
    open_secs: f64,
    rss_before: u64,
    rss_after: u64,
    api_rss_before: u64,
    api_rss_after: u64,
    api_heap_before: f64,
    api_heap_after: f64,
    api_watches_before: f64,
    api_watches_open: f64,
    api_watches_after_writes: f64,
    /// Of those, cluster-scoped (watchmux's upstream watch is one): before, open.
    api_cluster_watches: (f64, f64),
    received: usize,
    lost: usize,
    watchers_missing_some: usize,
    duplicates: u64,
    ended_early: usize,
    body_errors: usize,
    body_error_samples: Vec<String>,
    error_events: u64,
    error_line_sample: Option<String>,
    latencies: Vec<Duration>,
    /// Per write: time until the last watcher that got it got it.
    per_write_last: Vec<Option<Duration>>,
    write_secs: f64,
    baseline: Cpu,
    baseline_secs: f64,
    phase: Cpu,
    phase_secs: f64,
    write_errors: usize,
    max_write_ms: f64,
    wm: Option<WatchmuxMetrics>,
    /// Through watchmux: one direct watcher's latencies during the same writes.
    reference_latencies: Option<Vec<Duration>>,
    /// Through watchmux: each delivery's receipt minus the direct watcher's receipt of that write.
    beyond_reference: Option<Vec<Duration>>,
}

#[derive(Default)]
struct WatchmuxMetrics {
    registered_open: f64,
    encodes_delta: f64,
    encodes_by_variant: Vec<(String, f64)>,
    deliveries_delta: f64,
    events_received_delta: f64,
    terminated_delta: f64,
    passthrough_delta: f64,
    passthrough_reasons: Vec<(String, f64)>,
    passthrough_requests_delta: f64,
    upstream_watch_restarts_delta: f64,
}

struct Bench {
    cfg: Config,
    direct: Arc<Upstream>,
    api_target: Target,
    api_streams: usize,
}

impl Bench {
    async fn send(
        &self,
        method: http::Method,
        path: &str,
        ctype: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(ct) = ctype {
            b = b.header("content-type", ct);
        }
        let req = b.body(watchmux::body::boxed(Full::new(body)))?;
        let resp = self.direct.send(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    async fn apiserver_metrics(&self) -> anyhow::Result<String> {
        let (status, body) = self.send(http::Method::GET, "/metrics", None, Bytes::new()).await?;
        if !status.is_success() {
            bail!("kube-apiserver /metrics: {status}");
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    async fn watchmux_metrics(&self) -> anyhow::Result<String> {
        let admin = Target::Proxy { addr: self.cfg.admin };
        let mut send = match admin.connect(Shape::H1).await? {
            Sender::H1(s) => s,
            Sender::H2(_) => unreachable!(),
        };
        let req = Request::get("/metrics").header("host", self.cfg.admin.to_string()).body(Empty::new())?;
        let resp = send.send_request(req).await?;
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// `writes` patches of the ConfigMap, one per interval, each timed from
    /// the moment it is issued. Returns the issue times, errors, slowest write.
    async fn write_phase(&self, seq_base: usize) -> (Vec<Instant>, usize, f64) {
        let mut issued = Vec::with_capacity(self.cfg.writes);
        let mut errors = 0;
        let mut slowest = 0f64;
        let mut tick = tokio::time::interval(self.cfg.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let path = format!("/api/v1/namespaces/{NS}/configmaps/{CM}");
        for i in 1..=self.cfg.writes {
            tick.tick().await;
            let patch = format!(r#"{{"data":{{"seq":"{}"}}}}"#, seq_base + i);
            let at = Instant::now();
            issued.push(at);
            let r = tokio::time::timeout(
                Duration::from_secs(10),
                self.send(http::Method::PATCH, &path, Some("application/merge-patch+json"), Bytes::from(patch)),
            )
            .await;
            slowest = slowest.max(at.elapsed().as_secs_f64() * 1000.0);
            match r {
                Ok(Ok((s, _))) if s.is_success() => {}
                other => {
                    errors += 1;
                    eprintln!("fanout: write {i} failed: {:?}", other.map(|r| r.map(|(s, b)| (s, b.len()))));
                }
            }
        }
        (issued, errors, slowest)
    }

    async fn run_side(&self, kind: SideKind) -> anyhow::Result<SideResult> {
        let cfg = &self.cfg;
        let api_pid = apiserver_pid(cfg)?;
        let (target, server_pid, per_conn) = match kind {
            SideKind::Direct => (self.api_target.clone(), api_pid, self.api_streams),
            SideKind::Watchmux => (Target::Proxy { addr: cfg.proxy }, cfg.proxy_pid, cfg.proxy_streams),
        };
        let per_conn = if cfg.shape == Shape::H1 { 1 } else { per_conn };
        let connections = cfg.n.div_ceil(per_conn);
        tokio::time::sleep(SETTLE).await;

        // CPU baseline: the same writes, no watchers, over the fixed window.
        let window = cfg.window();
        let b0 = cpu_now(server_pid, api_pid)?;
        let t0 = Instant::now();
        let _ = self.write_phase(1000).await;
        tokio::time::sleep_until((t0 + window).into()).await;
        let b1 = cpu_now(server_pid, api_pid)?;
        let baseline_secs = t0.elapsed().as_secs_f64();
        let baseline = Cpu {
            server: b1.server - b0.server,
            apiserver: b1.apiserver - b0.apiserver,
            bench: b1.bench - b0.bench,
            server_syscw: b1.server_syscw - b0.server_syscw,
        };

        // Before the watchers.
        let api_metrics = self.apiserver_metrics().await?;
        let wm_before = if kind == SideKind::Watchmux { Some(self.watchmux_metrics().await?) } else { None };
        let cm_watch = [("resource", "configmaps"), ("verb", "WATCH"), ("group", "")];
        let cm_cluster_watch = [("resource", "configmaps"), ("verb", "WATCH"), ("group", ""), ("scope", "cluster")];
        let api_watches_before = metric_sum(&api_metrics, "apiserver_longrunning_requests", &cm_watch);
        let api_cluster_watches_before = metric_sum(&api_metrics, "apiserver_longrunning_requests", &cm_cluster_watch);
        let api_heap_before = metric_sum(&api_metrics, "go_memstats_heap_inuse_bytes", &[]);
        let rss_before = rss_bytes(server_pid)?;
        let api_rss_before = rss_bytes(api_pid)?;

        // The common starting point.
        let (status, list) =
            self.send(http::Method::GET, &format!("/api/v1/namespaces/{NS}/configmaps"), None, Bytes::new()).await?;
        if !status.is_success() {
            bail!("LIST: {status}");
        }
        let list: serde_json::Value = serde_json::from_slice(&list)?;
        let rv = list["metadata"]["resourceVersion"].as_str().ok_or_else(|| anyhow!("LIST without RV"))?.to_owned();
        let path: Arc<str> = format!("/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={rv}").into();

        // Open the watchers.
        let shared = Arc::new(Shared::default());
        let stop = CancellationToken::new();
        // On an early return too, every watcher of this side stops.
        let _stop_on_drop = stop.clone().drop_guard();
        let permits = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
        let open_start = Instant::now();
        let mut conns: Vec<Option<Sender>> = Vec::new();
        if cfg.shape == Shape::H2 {
            for _ in 0..connections {
                conns.push(Some(target.connect(Shape::H2).await.context("HTTP/2 connection")?));
            }
        }
        let mut tasks = Vec::with_capacity(cfg.n);
        for i in 0..cfg.n {
            let conn = match cfg.shape {
                Shape::H2 => match conns[i / per_conn].as_ref() {
                    Some(Sender::H2(s)) => Some(Sender::H2(s.clone())),
                    _ => unreachable!(),
                },
                Shape::H1 => None,
            };
            tasks.push(tokio::spawn(run_watcher(
                target.clone(),
                cfg.shape,
                conn,
                path.clone(),
                permits.clone(),
                shared.clone(),
                stop.clone(),
                cfg.writes,
            )));
        }
        drop(conns); // the watchers hold their connections
        let open_deadline = open_start + OPEN_DEADLINE;
        while shared.opened.load(Ordering::Relaxed) + shared.failed.load(Ordering::Relaxed) < cfg.n
            && Instant::now() < open_deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let open_secs = open_start.elapsed().as_secs_f64();
        let opened = shared.opened.load(Ordering::Relaxed);
        eprintln!(
            "fanout: {kind:?} N={} {:?}: {opened} watches open, {} failed, in {open_secs:.1}s",
            cfg.n,
            cfg.shape,
            shared.failed.load(Ordering::Relaxed)
        );

        // Idle, then memory.
        tokio::time::sleep(IDLE).await;
        let rss_after = rss_bytes(server_pid)?;
        let api_rss_after = rss_bytes(api_pid).context("kube-apiserver gone (restarted by another test?)")?;
        let api_metrics = self.apiserver_metrics().await?;
        let api_watches_open = metric_sum(&api_metrics, "apiserver_longrunning_requests", &cm_watch);
        let api_cluster_watches_open = metric_sum(&api_metrics, "apiserver_longrunning_requests", &cm_cluster_watch);
        let api_heap_after = metric_sum(&api_metrics, "go_memstats_heap_inuse_bytes", &[]);
        let wm_open = if kind == SideKind::Watchmux { Some(self.watchmux_metrics().await?) } else { None };

        // Through watchmux, a reference: one more watcher straight on the API
        // server (its own HTTP/2 connection, same resourceVersion), opened
        // after the counts above. When an event reaches it is when the API
        // server made it available, so the difference is watchmux's own delay.
        let reference = if kind == SideKind::Watchmux {
            let r_shared = Arc::new(Shared::default());
            let conn = self.api_target.connect(Shape::H2).await.context("reference connection")?;
            let task = tokio::spawn(run_watcher(
                self.api_target.clone(),
                Shape::H2,
                Some(conn),
                path.clone(),
                Arc::new(Semaphore::new(1)),
                r_shared.clone(),
                stop.clone(),
                cfg.writes,
            ));
            let until = Instant::now() + Duration::from_secs(10);
            while r_shared.opened.load(Ordering::Relaxed) + r_shared.failed.load(Ordering::Relaxed) == 0
                && Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Some(task)
        } else {
            None
        };

        // The writes.
        let expected = opened * cfg.writes;
        let w0 = cpu_now(server_pid, api_pid)?;
        let p0 = Instant::now();
        let (issued, write_errors, max_write_ms) = self.write_phase(0).await;
        let write_secs = p0.elapsed().as_secs_f64();
        let last_write = *issued.last().expect("writes > 0");
        let deadline = last_write + DELIVERY_DEADLINE;
        while (shared.received.load(Ordering::Relaxed) as usize) < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep_until((p0 + window).into()).await;
        let w1 = cpu_now(server_pid, api_pid)?;
        let phase_secs = p0.elapsed().as_secs_f64();
        let phase = Cpu {
            server: w1.server - w0.server,
            apiserver: w1.apiserver - w0.apiserver,
            bench: w1.bench - w0.bench,
            server_syscw: w1.server_syscw - w0.server_syscw,
        };
        let wm_after = if kind == SideKind::Watchmux { Some(self.watchmux_metrics().await?) } else { None };
        let api_metrics = self.apiserver_metrics().await?;
        let api_watches_after_writes = metric_sum(&api_metrics, "apiserver_longrunning_requests", &cm_watch);

        if apiserver_pid(cfg)? != api_pid {
            bail!("kube-apiserver was restarted during the measurement (by another test?)");
        }

        // Close everything and collect.
        stop.cancel();
        let reference = match reference {
            Some(task) => Some(task.await?),
            None => None,
        };
        let mut outcomes = Vec::with_capacity(tasks.len());
        for t in tasks {
            outcomes.push(t.await?);
        }

        let mut latencies = Vec::with_capacity(expected);
        let mut per_write_last: Vec<Option<Duration>> = vec![None; cfg.writes];
        let (mut duplicates, mut error_events, mut ended_early, mut body_errors, mut missing_some) =
            (0u64, 0u64, 0, 0, 0);
        let mut failure_samples = Vec::new();
        let mut body_error_samples = Vec::new();
        let mut error_line_sample = None;
        let all_mask = if cfg.writes == 64 { u64::MAX } else { (1u64 << cfg.writes) - 1 };
        let mut received = 0usize;
        for o in &outcomes {
            if o.status != Some(StatusCode::OK) {
                if failure_samples.len() < 3 {
                    failure_samples.push(format!(
                        "status {:?}: {}",
                        o.status.map(|s| s.as_u16()),
                        o.open_error.as_deref().unwrap_or("")
                    ));
                }
                continue;
            }
            for &(seq, at) in &o.first_seen {
                let lat = at.saturating_duration_since(issued[seq as usize - 1]);
                latencies.push(lat);
                let slot = &mut per_write_last[seq as usize - 1];
                *slot = Some(slot.map_or(lat, |l: Duration| l.max(lat)));
            }
            received += o.first_seen.len();
            if o.seen_mask != all_mask {
                missing_some += 1;
            }
            duplicates += o.duplicates as u64;
            error_events += o.error_events as u64;
            if o.ended_early {
                ended_early += 1;
            }
            if let Some(e) = &o.body_error {
                body_errors += 1;
                if body_error_samples.len() < 3 {
                    body_error_samples.push(e.clone());
                }
            }
            if error_line_sample.is_none() {
                error_line_sample = o.first_error_line.clone();
            }
        }
        latencies.sort();

        if std::env::var_os("FANOUT_DEBUG").is_some() {
            // Per write: receipt latencies over the watchers, and the reference's.
            let mut per_write: Vec<Vec<Duration>> = vec![Vec::new(); cfg.writes];
            for o in &outcomes {
                for &(seq, t) in &o.first_seen {
                    per_write[seq as usize - 1].push(t.saturating_duration_since(issued[seq as usize - 1]));
                }
            }
            let first_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
                - issued[0].elapsed();
            eprintln!("fanout: {kind:?} first write issued at unix {:.3} s", first_unix.as_secs_f64());
            for (i, v) in per_write.iter_mut().enumerate() {
                v.sort();
                let r = reference.as_ref().and_then(|r| r.first_seen.iter().find(|(q, _)| *q as usize == i + 1));
                eprintln!(
                    "fanout: {kind:?} write {:2} at +{:6.0} ms: n {} min {} p50 {} max {} reference {}",
                    i + 1,
                    issued[i].duration_since(issued[0]).as_secs_f64() * 1000.0,
                    v.len(),
                    ms(v.first().copied()),
                    ms(percentile(v, 0.5)),
                    ms(v.last().copied()),
                    ms(r.map(|&(_, t)| t.saturating_duration_since(issued[i]))),
                );
            }
        }

        // Each delivery against the reference watcher's receipt of the same write.
        let (reference_latencies, beyond_reference) = match &reference {
            Some(r) if r.status == Some(StatusCode::OK) => {
                let mut at: Vec<Option<Instant>> = vec![None; cfg.writes];
                let mut own = Vec::new();
                for &(seq, t) in &r.first_seen {
                    at[seq as usize - 1] = Some(t);
                    own.push(t.saturating_duration_since(issued[seq as usize - 1]));
                }
                own.sort();
                let mut beyond: Vec<Duration> = outcomes
                    .iter()
                    .flat_map(|o| o.first_seen.iter())
                    .filter_map(|&(seq, t)| Some(t.saturating_duration_since(at[seq as usize - 1]?)))
                    .collect();
                beyond.sort();
                (Some(own), Some(beyond))
            }
            _ => (None, None),
        };

        let wm = match (wm_before, wm_open, wm_after) {
            (Some(before), Some(open), Some(after)) => {
                let d = |name: &str, labels: &[(&str, &str)]| {
                    metric_sum(&after, name, labels) - metric_sum(&open, name, labels)
                };
                let cm = [("resource", "configmaps")];
                let reasons_before = metric_samples(&before, "watchmux_cache_passthrough_total");
                let reasons_after = metric_samples(&after, "watchmux_cache_passthrough_total");
                let passthrough_reasons = reasons_after
                    .iter()
                    .map(|(l, v)| {
                        (l.clone(), v - reasons_before.iter().find(|(lb, _)| lb == l).map_or(0.0, |(_, v)| *v))
                    })
                    .filter(|(_, v)| *v != 0.0)
                    .collect();
                let enc_open = metric_samples(&open, "watchmux_cache_encodes_total");
                let encodes_by_variant = metric_samples(&after, "watchmux_cache_encodes_total")
                    .iter()
                    .map(|(l, v)| (l.clone(), v - enc_open.iter().find(|(lb, _)| lb == l).map_or(0.0, |(_, v)| *v)))
                    .collect();
                Some(WatchmuxMetrics {
                    registered_open: metric_sum(&open, "watchmux_registered_watchers", &cm),
                    encodes_delta: d("watchmux_cache_encodes_total", &[]),
                    encodes_by_variant,
                    deliveries_delta: d("watchmux_watch_cache_deliveries_total", &cm),
                    events_received_delta: d("watchmux_watch_cache_events_received_total", &cm),
                    terminated_delta: metric_sum(&after, "watchmux_terminated_watchers_total", &cm)
                        - metric_sum(&before, "watchmux_terminated_watchers_total", &cm),
                    passthrough_delta: metric_sum(&after, "watchmux_cache_passthrough_total", &[])
                        - metric_sum(&before, "watchmux_cache_passthrough_total", &[]),
                    passthrough_reasons,
                    passthrough_requests_delta: metric_sum(&after, "watchmux_passthrough_requests_total", &[])
                        - metric_sum(&before, "watchmux_passthrough_requests_total", &[]),
                    upstream_watch_restarts_delta: metric_sum(&after, "watchmux_upstream_watch_restarts_total", &[])
                        - metric_sum(&before, "watchmux_upstream_watch_restarts_total", &[]),
                })
            }
            _ => None,
        };

        Ok(SideResult {
            kind,
            connections,
            per_conn,
            opened,
            failed: cfg.n - opened,
            failure_samples,
            open_secs,
            rss_before,
            rss_after,
            api_rss_before,
            api_rss_after,
            api_heap_before,
            api_heap_after,
            api_watches_before,
            api_watches_open,
            api_watches_after_writes,
            api_cluster_watches: (api_cluster_watches_before, api_cluster_watches_open),
            received,
            lost: expected - received,
            watchers_missing_some: missing_some,
            duplicates,
            ended_early,
            body_errors,
            body_error_samples,
            error_events,
            error_line_sample,
            latencies,
            per_write_last,
            write_secs,
            baseline,
            baseline_secs,
            phase,
            phase_secs,
            write_errors,
            max_write_ms,
            wm,
            reference_latencies,
            beyond_reference,
        })
    }
}

// ---------------------------------------------------------------------------
// Report

fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[((sorted.len() as f64 - 1.0) * p).round() as usize])
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.1}", d.as_secs_f64() * 1000.0))
}

/// Rounded, without a "-0".
fn fmt0(x: f64) -> String {
    format!("{:.0}", x.round() + 0.0)
}

fn fmt1(x: f64) -> String {
    format!("{:.1}", (x * 10.0).round() / 10.0 + 0.0)
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1024.0 * 1024.0))
}

fn signed_mib(d: f64) -> String {
    format!("{:+.1}", d / (1024.0 * 1024.0))
}

fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Net CPU milliseconds: the phase minus the baseline scaled to the phase's length.
fn net_ms(cfg: &Config, phase: u64, baseline: u64, phase_secs: f64, baseline_secs: f64) -> (f64, f64, f64) {
    let tick_ms = 1000.0 / cfg.clk_tck;
    let raw = phase as f64 * tick_ms;
    let base = baseline as f64 * tick_ms * (phase_secs / baseline_secs);
    (raw - base, raw, base)
}

fn report(
    cfg: &Config,
    api_streams_advertised: Option<u32>,
    proxy_streams_advertised: Option<u32>,
    sides: &[SideResult],
) {
    let shape = match cfg.shape {
        Shape::H2 => "HTTP/2, many watches per connection",
        Shape::H1 => "HTTP/1.1, one connection per watcher",
    };
    println!();
    println!("### {} watchers, {shape}", thousands(cfg.n));
    println!();
    println!(
        "{} writes, one every {} ms; CPU window {:.1} s (fixed, longer only if deliveries run late); \
         kube-apiserver advertises {} concurrent HTTP/2 streams per connection, watchmux {}.",
        cfg.writes,
        cfg.interval.as_millis(),
        cfg.window().as_secs_f64(),
        api_streams_advertised.map_or("no limit on".into(), |v| v.to_string()),
        proxy_streams_advertised.map_or("no limit on".into(), |v| v.to_string()),
    );
    println!();
    let name = |k: SideKind| match k {
        SideKind::Direct => "direct",
        SideKind::Watchmux => "through watchmux",
    };
    print!("| measurement |");
    for s in sides {
        print!(" {} |", name(s.kind));
    }
    println!();
    print!("|---|");
    for _ in sides {
        print!("---|");
    }
    println!();
    let row = |label: &str, f: &dyn Fn(&SideResult) -> String| {
        print!("| {label} |");
        for s in sides {
            print!(" {} |", f(s));
        }
        println!();
    };
    row("server process measured", &|s| match s.kind {
        SideKind::Direct => "kube-apiserver".into(),
        SideKind::Watchmux => "watchmux".into(),
    });
    row("connections × watches per connection", &|s| format!("{} × {}", thousands(s.connections), s.per_conn));
    row("watches answered 200 / failed", &|s| format!("{} / {}", thousands(s.opened), s.failed));
    row("time to open all watches, s", &|s| format!("{:.1}", s.open_secs));
    row("server RSS before → all open and idle, MiB", &|s| format!("{} → {}", mib(s.rss_before), mib(s.rss_after)));
    row("**server RSS per idle watcher, KiB**", &|s| {
        if s.opened == 0 {
            return "–".into();
        }
        format!("**{:.1}**", (s.rss_after as f64 - s.rss_before as f64) / s.opened as f64 / 1024.0)
    });
    row("kube-apiserver RSS change, MiB", &|s| signed_mib(s.api_rss_after as f64 - s.api_rss_before as f64));
    row("kube-apiserver Go heap in use change, MiB", &|s| signed_mib(s.api_heap_after - s.api_heap_before));
    row(
        "kube-apiserver configmaps WATCHes held: before → open → after writes (cluster-scoped: before → open); through watchmux, after writes counts the reference watcher",
        &|s| {
            format!(
                "{} → {} → {} ({} → {})",
                s.api_watches_before,
                s.api_watches_open,
                s.api_watches_after_writes,
                s.api_cluster_watches.0,
                s.api_cluster_watches.1
            )
        },
    );
    row("writes: failed / slowest, ms", &|s| format!("{} / {:.0}", s.write_errors, s.max_write_ms));
    row("deliveries received / expected", &|s| {
        format!("{} / {}", thousands(s.received), thousands(s.opened * cfg.writes))
    });
    row("**events lost** (watchers missing any)", &|s| {
        format!("**{}** ({})", thousands(s.lost), s.watchers_missing_some)
    });
    row("duplicates / streams ended early / stream errors / ERROR events", &|s| {
        format!("{} / {} / {} / {}", s.duplicates, s.ended_early, s.body_errors, s.error_events)
    });
    row("latency, write issued → receipt: p50 ms", &|s| ms(percentile(&s.latencies, 0.5)));
    row("**p99 ms**", &|s| format!("**{}**", ms(percentile(&s.latencies, 0.99))));
    row("max ms", &|s| ms(s.latencies.last().copied()));
    row("reference: one direct watcher during the same writes, p50 / max ms", &|s| match &s.reference_latencies {
        Some(v) => format!("{} / {}", ms(percentile(v, 0.5)), ms(v.last().copied())),
        None => "–".into(),
    });
    row("receipt after that direct watcher's, same write: p50 / p99 / max ms", &|s| match &s.beyond_reference {
        Some(v) => format!("{} / {} / {}", ms(percentile(v, 0.5)), ms(percentile(v, 0.99)), ms(v.last().copied())),
        None => "–".into(),
    });
    row("per write, until the last watcher had it: median / max ms", &|s| {
        let mut v: Vec<Duration> = s.per_write_last.iter().flatten().copied().collect();
        v.sort();
        format!("{} / {}", ms(percentile(&v, 0.5)), ms(v.last().copied()))
    });
    row("server CPU over the write phase, ms: raw − baseline = net", &|s| {
        let (net, raw, base) = net_ms(cfg, s.phase.server, s.baseline.server, s.phase_secs, s.baseline_secs);
        format!("{} − {} = {}", fmt0(raw), fmt0(base), fmt0(net))
    });
    row("**server CPU per 1,000 delivered events, ms**", &|s| {
        let (net, ..) = net_ms(cfg, s.phase.server, s.baseline.server, s.phase_secs, s.baseline_secs);
        if s.received == 0 {
            return "–".into();
        }
        format!("**{}**", fmt1(net / (s.received as f64 / 1000.0)))
    });
    row("server write system calls per delivered event (net of baseline)", &|s| {
        if s.received == 0 {
            return "–".into();
        }
        let base = s.baseline.server_syscw as f64 * (s.phase_secs / s.baseline_secs);
        format!("{:.2}", (s.phase.server_syscw as f64 - base) / s.received as f64)
    });
    row("kube-apiserver CPU over the write phase, ms: raw − baseline = net", &|s| {
        let (net, raw, base) = net_ms(cfg, s.phase.apiserver, s.baseline.apiserver, s.phase_secs, s.baseline_secs);
        format!("{} − {} = {}", fmt0(raw), fmt0(base), fmt0(net))
    });
    row("load generator CPU over the write phase, ms", &|s| {
        format!("{:.0}", s.phase.bench as f64 * 1000.0 / cfg.clk_tck)
    });
    row("write phase / CPU window length, s", &|s| format!("{:.1} / {:.1}", s.write_secs, s.phase_secs));
    row("watchmux_cache_encodes_total Δ over the write phase", &|s| match &s.wm {
        Some(w) => {
            let by: Vec<String> = w
                .encodes_by_variant
                .iter()
                .map(|(l, v)| format!("{}: {v}", l.trim_start_matches('{').trim_end_matches('}')))
                .collect();
            format!("{} ({})", w.encodes_delta, by.join(", "))
        }
        None => "–".into(),
    });
    row("watchmux registered watchers (open) / deliveries Δ / upstream events Δ", &|s| match &s.wm {
        Some(w) => format!("{} / {} / {}", w.registered_open, w.deliveries_delta, w.events_received_delta),
        None => "–".into(),
    });
    row("watchmux terminated watchers / cache pass-throughs / forwarded requests / upstream watch restarts", &|s| {
        match &s.wm {
            Some(w) => format!(
                "{} / {} / {} / {}",
                w.terminated_delta, w.passthrough_delta, w.passthrough_requests_delta, w.upstream_watch_restarts_delta
            ),
            None => "–".into(),
        }
    });
    println!();
    for s in sides {
        for f in &s.failure_samples {
            println!("- {}: watch open failure: {f}", name(s.kind));
        }
        for e in &s.body_error_samples {
            println!("- {}: stream error: {e}", name(s.kind));
        }
        if let Some(l) = &s.error_line_sample {
            println!("- {}: ERROR event: {l}", name(s.kind));
        }
        if let Some(w) = &s.wm {
            for (l, v) in &w.passthrough_reasons {
                println!("- {}: cache pass-through {l}: {v}", name(s.kind));
            }
        }
    }
}

// ---------------------------------------------------------------------------

/// The fast newline search agrees with the obvious one.
fn self_check() {
    use rand::Rng;
    let mut rng = rand::rng();
    for _ in 0..2000 {
        let len = rng.random_range(0..100);
        let hay: Vec<u8> = (0..len).map(|_| if rng.random_bool(0.03) { b'\n' } else { rng.random() }).collect();
        assert_eq!(find_newline(&hay), hay.iter().position(|&b| b == b'\n'), "{hay:?}");
    }
    assert_eq!(find_seq(br#"{"type":"MODIFIED","object":{"data":{"pad":"x","seq":"17"}}}"#), Some(17));
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    self_check();
    let cfg = Config::from_env()?;
    let rcvbuf = std::env::var("FANOUT_RCVBUF").ok().filter(|v| !v.is_empty());
    RCVBUF.set(rcvbuf.map(|v| v.parse()).transpose()?).expect("set once");
    let kubeconfig = env("WATCHMUX_BENCH_KUBECONFIG")?;
    let up = watchmux::config::kubeconfig::resolve(Some(kubeconfig.as_ref()), None)?;
    let direct = Arc::new(Upstream::new(&up, UpstreamOptions::default())?);
    let auth = match &up.auth {
        UpstreamAuth::Token(t) => HeaderValue::from_str(&format!("Bearer {t}"))?,
        other => bail!("the bench needs a bearer-token kubeconfig, got {other:?}"),
    };
    let api_addr: SocketAddr =
        up.server.authority().ok_or_else(|| anyhow!("server without authority"))?.as_str().parse()?;
    let base_tls = watchmux::upstream::tls::client_config(&up)?;
    let mut tls_h2 = base_tls.clone();
    tls_h2.alpn_protocols = vec![b"h2".to_vec()];
    let mut tls_h1 = base_tls;
    tls_h1.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls_h2 = Arc::new(tls_h2);
    let api_target = Target::Direct { addr: api_addr, tls_h2: tls_h2.clone(), tls_h1: Arc::new(tls_h1), auth };

    // What each server lets one HTTP/2 connection carry.
    let api_adv = {
        let tcp = TcpStream::connect(api_addr).await?;
        advertised_max_streams(tls_connect(tls_h2, tcp).await?).await?
    };
    let proxy_adv = advertised_max_streams(TcpStream::connect(cfg.proxy).await?).await?;
    let api_streams = cfg.api_streams.unwrap_or(api_adv.map_or(250, |v| (v as usize).min(250)));
    if cfg.shape == Shape::H2 {
        if api_adv.is_some_and(|v| api_streams > v as usize) {
            eprintln!("fanout: warning: {api_streams} watches per connection exceed kube-apiserver's {api_adv:?}");
        }
        if proxy_adv.is_some_and(|v| cfg.proxy_streams > v as usize) {
            eprintln!("fanout: warning: {} watches per connection exceed watchmux's {proxy_adv:?}", cfg.proxy_streams);
        }
    }

    let bench = Bench { cfg, direct, api_target, api_streams };

    // A namespace and one ~1 KiB ConfigMap in it.
    let ns = serde_json::json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":NS}});
    let (s, _) =
        bench.send(http::Method::POST, "/api/v1/namespaces", Some("application/json"), ns.to_string().into()).await?;
    if !(s.is_success() || s == StatusCode::CONFLICT) {
        bail!("creating namespace {NS}: {s}");
    }
    let cm = serde_json::json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":CM},
        "data":{"pad":"x".repeat(1000),"seq":"0"}});
    let (s, _) = bench
        .send(
            http::Method::POST,
            &format!("/api/v1/namespaces/{NS}/configmaps"),
            Some("application/json"),
            cm.to_string().into(),
        )
        .await?;
    if !(s.is_success() || s == StatusCode::CONFLICT) {
        bail!("creating configmap {NS}/{CM}: {s}");
    }

    let mut results = Vec::new();
    for &kind in &bench.cfg.sides {
        // One retry when another test restarted the API server under us.
        let r = match bench.run_side(kind).await {
            Ok(r) => r,
            Err(e) if format!("{e:#}").contains("kube-apiserver") => {
                eprintln!("fanout: {kind:?} side: {e:#}; waiting for the API server and measuring this side again");
                for _ in 0..60 {
                    if bench.apiserver_metrics().await.is_ok() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                bench.run_side(kind).await.with_context(|| format!("{kind:?} side, second attempt"))?
            }
            Err(e) => return Err(e.context(format!("{kind:?} side"))),
        };
        results.push(r);
    }
    report(&bench.cfg, api_adv, proxy_adv, &results);
    Ok(())
}
