//! Faults of the upstream and of watchmux itself, under steady writes:
//! kube-apiserver frozen (SIGSTOP) or killed and restarted, etcd frozen,
//! a half-open connection between watchmux and the API server (every
//! connection, or only the open ones while new ones work), and watchmux
//! killed and started again.

use std::time::{Duration, Instant};

use crate::common::prom;
use crate::relay::Mode;
use crate::score::Target;
use crate::stage::{Ctx, Outcome, Plan, Stage, via_within};
use crate::world::{Stopped, Watchmux, admin_get, metrics, restart_apiserver};

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
    under_writes_on(ctx, id, Plan::default(), fault).await
}

/// [`under_writes`] on a stage of `plan`'s.
async fn under_writes_on(
    ctx: &Ctx,
    id: &'static str,
    plan: Plan<'_>,
    fault: impl AsyncFnOnce(&mut Stage) -> anyhow::Result<(Instant, Instant, String)>,
) -> anyhow::Result<Outcome> {
    let mut st = Stage::new(ctx, id, plan).await?;
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

/// Restarts in a rolling update of watchmux.
const ROLLOUT_ROUNDS: usize = 3;

/// A rolling update as a Deployment or DaemonSet makes it, three times over:
/// watchmux stopped gracefully (SIGTERM: its watch streams end, in-flight
/// requests finish) and started again at once, writes throughout. Each
/// watcher comes back with the version it last saw, older than the new
/// process's first list: the backfill (one upstream watch per resource)
/// serves it, so no watcher gets a 410 or lists again, and nothing is lost
/// or delivered twice (the fleet's own checks against the writes).
pub async fn watchmux_rollout(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let outcome = under_writes(ctx, "watchmux-rollout", async |st: &mut Stage| {
        let start = Instant::now();
        let mut took = Vec::new();
        for _ in 0..ROLLOUT_ROUNDS {
            took.push(restart_gracefully(&mut st.wm).await?);
        }
        let end = Instant::now();
        Ok((start, end, format!(
            "watchmux stopped (SIGTERM) and started again {ROLLOUT_ROUNDS} times in a row, each time ready again after {} s (--cache-warm); writes throughout",
            took.join(", ")
        )))
    })
    .await?;
    Ok(without_relists(outcome))
}

/// The replicas of `tier-rollout`.
const TIER_REPLICAS: usize = 3;

/// A tier of three replicas behind one address (a TCP load balancer, as a
/// Service), each replaced in turn as a Deployment's rolling update does:
/// stopped (SIGTERM) and started again, writes throughout. A stopped
/// replica's watchers reconnect through the balancer, to another replica or
/// the new one, with the version they last saw; a new replica serves it from
/// its backfill. No 410, no LIST after the first, nothing lost or duplicated.
pub async fn tier_rollout(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let plan = Plan { replicas: TIER_REPLICAS, ..Plan::default() };
    let outcome = under_writes_on(ctx, "tier-rollout", plan, async |st: &mut Stage| {
        let start = Instant::now();
        let mut took = vec![restart_gracefully(&mut st.wm).await?];
        for replica in &mut st.replicas {
            took.push(restart_gracefully(replica).await?);
        }
        let end = Instant::now();
        Ok((start, end, format!(
            "a tier of {TIER_REPLICAS} replicas behind a TCP load balancer, each stopped (SIGTERM) and started again in turn, ready again after {} s (--cache-warm); writes throughout",
            took.join(", ")
        )))
    })
    .await?;
    Ok(without_relists(outcome))
}

/// One replica of a rolling update: SIGTERM, then a new process on the same
/// addresses; the seconds until it was ready again, for the report.
async fn restart_gracefully(wm: &mut Watchmux) -> anyhow::Result<String> {
    let round = Instant::now();
    wm.terminate().await;
    wm.respawn().await?;
    Ok(format!("{:.1}", round.elapsed().as_secs_f64()))
}

/// A problem for every LIST and 410 the fleet saw: across a restart the
/// API server would have resumed every one of them.
fn without_relists(mut outcome: Outcome) -> Outcome {
    let watchers = &outcome.details["watchers"];
    for (key, what) in [("lists", "LISTs"), ("gone_410", "410s")] {
        let n = watchers[key].as_u64().unwrap_or(u64::MAX);
        if n != 0 {
            let problem = format!("{n} {what} from watchers across the restarts (the API server would resume them)");
            outcome.problems.push(problem);
        }
    }
    outcome
}

/// How long after the freeze every watcher must have the change written at
/// it: HTTP/2 keep-alive's 2 s without a read and 3 s for the ack, the
/// watch's restart, and room for a loaded machine. The figure itself is
/// reported (`time_to_current_ms`); this bound only fails the case when the
/// frozen connection was clearly not found by keep-alive (30 s + 10 s before).
const MOVED_WITHIN: Duration = Duration::from_secs(15);

/// The control-plane half-open: every connection watchmux holds to the API
/// server at one instant stops forwarding without a close, while new
/// connections are forwarded. Before, the cache's watches and the
/// readiness probe shared the frozen connection: a change made at the
/// freeze reached watchers 36 s later, and /readyz called the upstream
/// unresponsive. Now keep-alive finds the frozen connection within 5 s,
/// the watch resumes from its resourceVersion on a new one (no relist),
/// and the probe's own lane is replaced when a probe goes unanswered, so
/// /readyz stays ready throughout.
pub async fn half_open_existing(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let mut st = Stage::new(ctx, "half-open-existing", Plan::default()).await?;
    st.start_churn(ctx.cfg.write_rate);
    tokio::time::sleep(LEAD_IN).await;
    let frozen_before = st.relay.frozen();
    st.relay.freeze_existing();
    let start = Instant::now();
    // /readyz sampled through the freeze and past keep-alive's bound.
    let admin = st.wm.admin;
    let readiness = tokio::spawn(async move {
        let (mut samples, mut not_ready) = (0u32, Vec::new());
        while start.elapsed() < MOVED_WITHIN {
            samples += 1;
            match admin_get(admin, "/readyz?verbose").await {
                Ok((200, _)) => {}
                Ok((code, body)) => {
                    not_ready.push(format!("{code} at {:.1} s: {}", start.elapsed().as_secs_f64(), body.trim()))
                }
                Err(e) => not_ready.push(format!("{e:#}")),
            }
            tokio::time::sleep(Duration::from_millis(250)).await; // sampling, not waiting on an event
        }
        (samples, not_ready)
    });
    let target = st.marker_and_wait(start, ctx.cfg.deadline).await?;
    let moved = start.elapsed();
    let all_current = st.fleet.current(target.rv) == st.fleet.n;
    let (samples, not_ready) = readiness.await?;
    let relists = st.metric_delta("watchmux_upstream_relists_total").await;
    let frozen = st.relay.frozen() - frozen_before;
    let fault = format!(
        "relay froze the {frozen} connections watchmux held to the API server (no bytes, no close, for good); new connections forwarded; writes straight at the API server"
    );
    let notes = vec![
        format!("every watcher had the change written at the freeze after {:.1} s", moved.as_secs_f64()),
        format!("/readyz not ready in {} of {samples} samples over {} s", not_ready.len(), MOVED_WITHIN.as_secs()),
        format!("{relists} relists"),
    ];
    let (groups, notes, mut details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), notes).await?;
    details["moved_after_s"] = moved.as_secs_f64().into();
    details["readyz_not_ready"] = not_ready.clone().into();
    details["relists"] = relists.into();
    Ok(Outcome::new("half-open-existing", fault, groups, notes, details)
        .check(frozen > 0, || "the relay froze no connection".into())
        .check(all_current && moved < MOVED_WITHIN, || format!("watchers current only after {moved:?}"))
        .check(not_ready.is_empty(), || format!("/readyz not ready: {not_ready:?}"))
        .check(relists == 0.0, || format!("{relists} relists: the watch did not resume")))
}
