//! Faults of the clients, beside a fleet of well-behaved watchers that must
//! stay current throughout: watchers that never read, slowloris
//! connections, and rounds of many watchers connecting and going away.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::common::client::{Sender, Shape, Target as Endpoint, handshake};
use crate::common::prom;
use crate::common::stats::{mib, p50_p99_max};
use crate::score::Target;
use crate::stage::{Ctx, Outcome, Plan, Stage};
use crate::world::metrics;

/// A marker every this often while a client fault goes on.
const MARKER_EVERY: Duration = Duration::from_secs(3);

/// Writes markers every [`MARKER_EVERY`] until `until`; each one's target
/// counts from its write. The last one is written at `until`.
pub(super) async fn markers_until(st: &Stage, ctx: &Ctx, until: Instant) -> anyhow::Result<Vec<Target>> {
    let mut targets = Vec::new();
    while Instant::now() + MARKER_EVERY < until {
        tokio::time::sleep(MARKER_EVERY).await;
        let from = Instant::now();
        let (rv, _) = st.writer.marker().await?;
        targets.push(Target { rv, from });
    }
    tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
    targets.push(st.marker_and_wait(Instant::now(), ctx.cfg.deadline).await?);
    Ok(targets)
}

/// A connection of its own to watchmux with a small receive buffer, so
/// that a client that stops reading is felt quickly.
async fn small_buffer_connection(addr: SocketAddr, shape: Shape) -> anyhow::Result<Sender> {
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let tcp = socket.connect(addr).await?;
    handshake(tcp, shape).await
}

/// Watches that never read their bodies, half over HTTP/1.1 (a connection
/// each), half over HTTP/2 (ten to a connection), while the writer changes
/// objects as fast as it can: the fleet must stay current.
pub async fn non_readers(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let mut st = Stage::new(ctx, "non-readers", Plan::default()).await?;
    let terminated = |t: &str| prom::sum(t, "watchmux_terminated_watchers_total", &[]);
    let registered = |t: &str| prom::sum(t, "watchmux_registered_watchers", &[]);
    let before = metrics(st.wm.admin).await;
    let path = format!("{}?watch=1&resourceVersion=0", st.writer.kind.collection);
    let addr = st.proxy.addr();
    let mut held = Vec::new();
    let mut h2: Option<Sender> = None;
    for i in 0..ctx.cfg.non_readers {
        let shape = if i % 2 == 0 { Shape::H1 } else { Shape::H2 };
        let conn = match (shape, &h2) {
            (Shape::H2, Some(c)) if i % 20 != 1 => c.clone(),
            _ => small_buffer_connection(addr, shape).await?,
        };
        if shape == Shape::H2 {
            h2 = Some(conn.clone());
        }
        let resp = tokio::time::timeout(Duration::from_secs(10), conn.send(st.proxy.request(shape, &path))).await??;
        anyhow::ensure!(resp.status() == 200, "non-reader watch: {}", resp.status());
        held.push((conn, resp));
    }
    let start = Instant::now();
    st.start_churn(ctx.cfg.write_rate_max);
    let targets = markers_until(&st, ctx, start + Duration::from_secs_f64(ctx.cfg.client_fault_secs)).await?;
    let after = metrics(st.wm.admin).await;
    let closed = terminated(&after) - terminated(&before);
    let slow = |o: &str| {
        let outcome = [("outcome", o)];
        prom::sum(&after, "watchmux_slow_watchers_total", &outcome)
            - prom::sum(&before, "watchmux_slow_watchers_total", &outcome)
    };
    let (to_ring, expired) = (slow("moved_to_ring"), slow("expired"));
    let still = registered(&after) - st.fleet.n as f64;
    drop(held);
    let fault = format!(
        "{} watches through watchmux that never read (half HTTP/1.1, half HTTP/2; 4 KiB receive buffers) while {} writes/s at most went on for {:.0} s",
        ctx.cfg.non_readers, ctx.cfg.write_rate_max, ctx.cfg.client_fault_secs
    );
    let notes = vec![format!(
        "watchmux moved {to_ring} of the non-readers to its events history, {expired} of them then fell behind it (410), \
         closed {closed} ({still} still registered at the end); {} writes",
        st.writer.writes()
    )];
    let (groups, notes, mut details) = st.finish(ctx, (start, Instant::now()), &targets, Vec::new(), notes).await?;
    details["non_readers_closed_by_watchmux"] = closed.into();
    details["non_readers_moved_to_history"] = to_ring.into();
    details["non_readers_expired_behind_history"] = expired.into();
    Ok(Outcome::new("non-readers", fault, groups, notes, details))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Loris {
    /// Connects and sends nothing.
    Silent,
    /// An HTTP/1.1 request head, one byte a second.
    Head,
    /// The HTTP/2 preface, one byte a second.
    Preface,
}

impl Loris {
    fn bytes(self) -> &'static [u8] {
        match self {
            Loris::Silent => b"",
            Loris::Head => {
                b"GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            }
            Loris::Preface => b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        }
    }
}

/// One slowloris connection: when watchmux closed it (from the connect), if it did before `stop`.
async fn loris(addr: SocketAddr, kind: Loris, stop: CancellationToken) -> Option<Duration> {
    let mut tcp = TcpStream::connect(addr).await.ok()?;
    let opened = Instant::now();
    let mut sent = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut buf = [0u8; 1024];
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            r = tcp.read(&mut buf) => match r {
                Ok(0) | Err(_) => return Some(opened.elapsed()),
                Ok(_) => {} // an error answer: wait for the close
            },
            _ = tick.tick() => {
                if let Some(b) = kind.bytes().get(sent) {
                    if tcp.write_all(std::slice::from_ref(b)).await.is_err() {
                        return Some(opened.elapsed());
                    }
                    sent += 1;
                }
            }
        }
    }
}

/// Slowloris connections (silent, a request head or the HTTP/2 preface one
/// byte a second) beside the fleet: watchmux's deadlines must close them
/// while the fleet stays current.
pub async fn slowloris(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let mut st = Stage::new(ctx, "slowloris", Plan::default()).await?;
    let open = |t: &str| prom::sum(t, "watchmux_connections_open", &[]);
    let open_before = open(&metrics(st.wm.admin).await);
    st.start_churn(ctx.cfg.write_rate);
    let stop = CancellationToken::new();
    let kinds = [Loris::Silent, Loris::Head, Loris::Preface];
    let start = Instant::now();
    let tasks: Vec<_> = (0..ctx.cfg.slowloris)
        .map(|i| {
            let kind = kinds[i % kinds.len()];
            (kind, tokio::spawn(loris(st.proxy.addr(), kind, stop.clone())))
        })
        .collect();
    let span = Duration::from_secs_f64(ctx.cfg.slowloris_secs);
    let targets = markers_until(&st, ctx, start + span).await?;
    stop.cancel();
    let open_after = open(&metrics(st.wm.admin).await);
    let mut notes = Vec::new();
    let mut by_kind = serde_json::Map::new();
    let mut results: Vec<(Loris, Option<Duration>)> = Vec::new();
    for (kind, t) in tasks {
        results.push((kind, t.await.ok().flatten()));
    }
    for kind in kinds {
        let mut closed: Vec<Duration> = results.iter().filter(|(k, _)| *k == kind).filter_map(|(_, d)| *d).collect();
        closed.sort();
        let total = results.iter().filter(|(k, _)| *k == kind).count();
        notes.push(format!(
            "{kind:?}: {}/{total} closed by watchmux, after {} ms (p50/p99/max)",
            closed.len(),
            p50_p99_max(&closed)
        ));
        by_kind.insert(
            format!("{kind:?}"),
            serde_json::json!({"connections": total, "closed": closed.len(), "closed_after_ms": crate::common::stats::latency_json(&closed)}),
        );
    }
    notes.push(format!(
        "connections open at watchmux: {open_before} before, {open_after} at the end (fleet's included)"
    ));
    let fault = format!(
        "{} connections to watchmux: a third silent, a third sending an HTTP/1.1 request head and a third the HTTP/2 preface, one byte a second, for {:.0} s; writes throughout",
        ctx.cfg.slowloris,
        span.as_secs_f64()
    );
    let (groups, notes, mut details) = st.finish(ctx, (start, Instant::now()), &targets, Vec::new(), notes).await?;
    let open_after_all = results.iter().filter(|(_, d)| d.is_none()).count();
    details["slowloris"] = by_kind.into();
    Ok(Outcome::new("slowloris", fault, groups, notes, details).check(open_after_all == 0, || {
        format!("{open_after_all} slowloris connections still open after {:.0} s", span.as_secs_f64())
    }))
}

/// One round's watcher: a watch from the current state, read until dropped.
async fn plain_watch(conn: Sender, endpoint: Endpoint, shape: Shape, path: String, stop: CancellationToken) {
    let Ok(resp) = conn.send(endpoint.request(shape, &path)).await else { return };
    let mut body = resp.into_body();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            f = body.frame() => if !matches!(f, Some(Ok(_))) { return },
        }
    }
}

/// Rounds of many watchers that connect, get their initial events and go
/// away (streams reset on shared HTTP/2 connections, or HTTP/1.1
/// connections closed): watchmux's registered watchers and open connections
/// must come back to where they were after every round, and its memory must
/// not grow round after round.
pub async fn connect_rounds(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let mut st = Stage::new(ctx, "churn", Plan::default()).await?;
    st.start_churn(ctx.cfg.write_rate);
    let registered = |t: &str| prom::sum(t, "watchmux_registered_watchers", &[]);
    let open = |t: &str| prom::sum(t, "watchmux_connections_open", &[]);
    let m0 = metrics(st.wm.admin).await;
    let (reg0, open0) = (registered(&m0), open(&m0));
    let rss0 = st.wm.rss().unwrap_or(0) as f64;
    let path = format!("{}?watch=1&resourceVersion=0", st.writer.kind.collection);
    let (w, per_conn) = (ctx.cfg.round_watchers, 50);
    let start = Instant::now();
    let mut rounds = Vec::new();
    let mut targets = Vec::new();
    let mut problems = Vec::new();
    for round in 0..ctx.cfg.rounds {
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        let mut conns = Vec::new();
        for i in 0..w {
            let shape = if i % 2 == 0 { Shape::H2 } else { Shape::H1 };
            let conn = match (shape, conns.last()) {
                (Shape::H2, Some(c)) if i % (2 * per_conn) != 0 => Sender::clone(c),
                _ => st.proxy.connect(shape).await?,
            };
            if shape == Shape::H2 {
                conns.push(conn.clone());
            }
            tasks.push(tokio::spawn(plain_watch(conn, st.proxy.clone(), shape, path.clone(), stop.clone())));
        }
        let until = Instant::now() + Duration::from_secs(30);
        let mut peak = 0.0;
        while Instant::now() < until {
            peak = registered(&metrics(st.wm.admin).await);
            if peak >= reg0 + w as f64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let rss_peak = st.wm.rss().unwrap_or(0) as f64;
        // Away: every round's task ends, dropping its stream; HTTP/1.1
        // connections close with it, HTTP/2 ones when the last stream goes.
        stop.cancel();
        for t in tasks {
            let _ = t.await;
        }
        drop(conns);
        let gone = Instant::now();
        let until = gone + Duration::from_secs(30);
        let (mut reg, mut opened);
        loop {
            let m = metrics(st.wm.admin).await;
            (reg, opened) = (registered(&m), open(&m));
            if (reg <= reg0 && opened <= open0) || Instant::now() > until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let back_after = gone.elapsed().as_secs_f64();
        let rss = st.wm.rss().unwrap_or(0) as f64;
        if reg != reg0 || opened != open0 {
            problems.push(format!(
                "round {}: {reg} registered (baseline {reg0}), {opened} connections open (baseline {open0}) 30 s after",
                round + 1
            ));
        }
        let from = Instant::now();
        let (rv, _) = st.writer.marker().await?;
        targets.push(Target { rv, from });
        eprintln!(
            "chaos: churn round {}: peak {peak} registered, back to {reg} in {back_after:.1}s; rss {} MiB",
            round + 1,
            mib(rss)
        );
        rounds.push(serde_json::json!({"round": round + 1, "registered_peak": peak, "registered_after": reg,
            "connections_open_after": opened, "back_after_s": back_after, "rss_peak_bytes": rss_peak, "rss_after_bytes": rss}));
    }
    let end = Instant::now();
    targets.push(st.marker_and_wait(end, ctx.cfg.deadline).await?);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_end = st.wm.rss().unwrap_or(0) as f64;
    let rss_first = rounds.first().and_then(|r| r["rss_after_bytes"].as_f64()).unwrap_or(rss0);
    let back: Vec<f64> = rounds.iter().filter_map(|r| r["back_after_s"].as_f64()).collect();
    let notes = vec![
        format!(
            "registered watchers back to {reg0} after {}/{} rounds (slowest {:.1} s)",
            ctx.cfg.rounds - problems.len(),
            ctx.cfg.rounds,
            back.iter().cloned().fold(0.0, f64::max)
        ),
        format!(
            "RSS {} MiB before, {} after round 1, {} 5 s after the last ({:+.1} MiB from round 1)",
            mib(rss0),
            mib(rss_first),
            mib(rss_end),
            (rss_end - rss_first) / (1024.0 * 1024.0)
        ),
    ];
    let fault = format!(
        "{} rounds of {w} watchers through watchmux (half HTTP/2, {per_conn} to a connection, streams reset; half HTTP/1.1, connections closed); writes throughout",
        ctx.cfg.rounds
    );
    let (groups, notes, mut details) = st.finish(ctx, (start, end), &targets, Vec::new(), notes).await?;
    details["rounds"] = rounds.into();
    details["registered_baseline"] = reg0.into();
    details["rss_bytes"] = serde_json::json!({"before": rss0, "after_round_1": rss_first, "end": rss_end});
    details["leak_suspected"] = (!problems.is_empty()).into();
    let mut outcome = Outcome::new("churn", fault, groups, notes, details);
    outcome.problems = problems;
    Ok(outcome)
}
