//! Faults of the upstream and of watchmux itself, under steady writes:
//! kube-apiserver frozen (SIGSTOP) or killed and restarted, etcd frozen,
//! a half-open connection between watchmux and the API server, and
//! watchmux killed and started again.

use std::time::{Duration, Instant};

use crate::common::prom;
use crate::relay::Mode;
use crate::score::Target;
use crate::stage::{Ctx, Outcome, Plan, Stage, via_within};
use crate::world::{Stopped, metrics, restart_apiserver};

/// Writes before the fault, so that it strikes a moving stream.
const LEAD_IN: Duration = Duration::from_secs(2);
/// Changes written right after a freeze, before the marker.
const BURST: usize = 20;
/// When reads through watchmux are tried during a half-open upstream, and how long they may take.
const PROBE_AFTER: Duration = Duration::from_secs(5);
const PROBE_LIMIT: Duration = Duration::from_secs(60);

/// A case of one fault under steady writes: `fault` breaks something and
/// says when it began, when it ended and what it did; then the marker, and
/// the finish every case shares.
async fn under_writes(
    ctx: &Ctx,
    id: &'static str,
    fault: impl AsyncFnOnce(&mut Stage) -> anyhow::Result<(Instant, Instant, String)>,
) -> anyhow::Result<Outcome> {
    let mut st = Stage::new(ctx, id, Plan::default()).await?;
    st.start_churn(ctx.cfg.write_rate);
    tokio::time::sleep(LEAD_IN).await;
    let (start, end, what) = fault(&mut st).await?;
    let target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    let (groups, notes, details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), Vec::new()).await?;
    Ok(Outcome::new(id, what, groups, notes, details))
}

/// kube-apiserver (or etcd) stopped with SIGSTOP for `secs`, then continued;
/// a burst of changes right after it.
async fn freeze(ctx: &Ctx, id: &'static str, pidfile: &str, what: &str, secs: f64) -> anyhow::Result<Outcome> {
    under_writes(ctx, id, async |st: &mut Stage| {
        let stopped = Stopped::new(pidfile)?;
        let start = stopped.at;
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        let end = stopped.resume();
        for _ in 0..BURST {
            st.writer.random_change(&st.names).await;
        }
        let d = (end - start).as_secs_f64();
        Ok((start, end, format!("{what} stopped (SIGSTOP) for {d:.1} s, then SIGCONT; writes throughout")))
    })
    .await
}

pub async fn apiserver_freeze(ctx: &Ctx) -> anyhow::Result<Outcome> {
    freeze(ctx, "freeze", &ctx.setup.apiserver_pidfile, "kube-apiserver", ctx.cfg.freeze_secs).await
}

pub async fn etcd_freeze(ctx: &Ctx) -> anyhow::Result<Outcome> {
    freeze(ctx, "etcd-freeze", &ctx.setup.etcd_pidfile, "etcd", ctx.cfg.etcd_freeze_secs).await
}

/// kube-apiserver killed (SIGKILL) and started again on the same etcd.
pub async fn restart(ctx: &Ctx) -> anyhow::Result<Outcome> {
    under_writes(ctx, "restart", async |_: &mut Stage| {
        let start = Instant::now();
        restart_apiserver(&ctx.setup, "KILL").await?;
        let end = Instant::now();
        let d = (end - start).as_secs_f64();
        Ok((start, end, format!("kube-apiserver killed (SIGKILL) and started again on the same etcd: {d:.1} s until ready; writes throughout")))
    })
    .await
}

/// The relay between watchmux and the API server stops forwarding without
/// closing: every connection it carries is frozen for good, new ones are
/// refused (or frozen too) for `half_open_secs`, then forwarded again. Writes go on
/// straight at the API server. Only watchmux's HTTP/2 keepalive can tell;
/// it has given up the frozen watch when its upstream watch starts again.
pub async fn half_open(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let mut st = Stage::new(ctx, "half-open", Plan::default()).await?;
    st.start_churn(ctx.cfg.write_rate);
    tokio::time::sleep(LEAD_IN).await;
    st.relay.set(if ctx.cfg.half_open_hold_new { Mode::BlackHole } else { Mode::Freeze });
    let start = Instant::now();
    let frozen_at = st.relay.attempts();
    let hold = Duration::from_secs_f64(ctx.cfg.half_open_secs);
    // Reads through watchmux while its upstream is frozen: from the cache
    // (resourceVersion=0) and consistent (needs the upstream, or passes through).
    let probes: Vec<_> = ["?resourceVersion=0", ""]
        .into_iter()
        .map(|query| {
            let (proxy, path) = (st.proxy.clone(), format!("{}{query}", st.writer.kind.collection));
            tokio::spawn(async move {
                tokio::time::sleep(PROBE_AFTER).await;
                let t = Instant::now();
                let r = via_within(&proxy, &path, PROBE_LIMIT).await;
                (query, r.map(|(code, _)| code.as_u16()).map_err(|e| format!("{e:#}")), t.elapsed())
            })
        })
        .collect();
    let restarts = async || prom::sum(&metrics(st.wm.admin).await, "watchmux_upstream_watch_restarts_total", &[]);
    let restarts_before = restarts().await;
    let (mut detected, mut new_connection): (Option<Duration>, Option<Duration>) = (None, None);
    let mut thawed: Option<(Instant, u64)> = None;
    let mut polled = Instant::now();
    let (end, rv) = loop {
        if new_connection.is_none() && st.relay.attempts() > frozen_at {
            new_connection = Some(start.elapsed());
        }
        if detected.is_none() && polled.elapsed() >= Duration::from_millis(250) {
            polled = Instant::now();
            if restarts().await > restarts_before {
                detected = Some(start.elapsed());
            }
        }
        match thawed {
            None if start.elapsed() >= hold => {
                st.relay.set(Mode::Forward);
                let end = Instant::now();
                thawed = Some((end, st.writer.marker().await?.0));
            }
            Some((end, rv))
                if (detected.is_some() && st.fleet.current(rv) == st.fleet.n) || end.elapsed() >= ctx.cfg.deadline =>
            {
                break (end, rv);
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let target = Target { rv, from: end };
    let mut reads = Vec::new();
    for p in probes {
        let (query, result, took) = p.await?;
        let what = if query.is_empty() { "a consistent LIST" } else { "a LIST at resourceVersion=0" };
        reads.push(match result {
            Ok(code) => format!(
                "{what} through watchmux {} s into the freeze: {code} after {:.1} s",
                PROBE_AFTER.as_secs(),
                took.as_secs_f64()
            ),
            Err(e) => format!(
                "{what} through watchmux {} s into the freeze: {e} ({:.1} s)",
                PROBE_AFTER.as_secs(),
                took.as_secs_f64()
            ),
        });
    }
    let fault = format!(
        "relay froze every watchmux→API server connection (no bytes, no close, for good) and {} new ones for {:.1} s; writes straight at the API server",
        if ctx.cfg.half_open_hold_new { "froze" } else { "refused" },
        (end - start).as_secs_f64()
    );
    let secs = |d: Option<Duration>| d.map_or("never".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()));
    let note = format!(
        "watchmux's upstream watch started again: {} after the freeze began (its first new upstream connection: {})",
        secs(detected),
        secs(new_connection)
    );
    let mut notes = vec![note];
    notes.extend(reads.iter().cloned());
    let (groups, notes, mut details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), notes).await?;
    details["reads_during_freeze"] = reads.into();
    details["upstream_watch_again_after_s"] = detected.map(|d| d.as_secs_f64()).into();
    details["first_new_upstream_connection_after_s"] = new_connection.map(|d| d.as_secs_f64()).into();
    Ok(Outcome::new("half-open", fault, groups, notes, details)
        .check(detected.is_some(), || "watchmux never gave up its frozen upstream watch".into()))
}

/// watchmux killed (SIGKILL) and started again on the same addresses, 1 s later.
pub async fn watchmux_kill(ctx: &Ctx) -> anyhow::Result<Outcome> {
    under_writes(ctx, "watchmux-kill", async |st: &mut Stage| {
        let start = Instant::now();
        st.wm.kill();
        tokio::time::sleep(Duration::from_secs(1)).await;
        st.wm.respawn().await?;
        let end = Instant::now();
        let d = (end - start).as_secs_f64();
        Ok((start, end, format!("watchmux killed (SIGKILL), started again 1 s later: {d:.1} s until the new one was ready (--cache-warm); writes throughout")))
    })
    .await
}
