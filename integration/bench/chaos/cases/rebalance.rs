//! `tier-rebalance` (issue 45, item 3): how evenly a tier's replicas share
//! their clients' connections after a rollout, with the chart's tier
//! defaults (`--goaway-chance 0.02 --max-connection-age 5m`) and, side by
//! side in the same run, with both off.
//!
//! Two tiers of three replicas, each behind its own TCP balancer, each with
//! its own kubelet-shaped fleet (a few watches to an HTTP/2 connection, each
//! watch with client-go's timeoutSeconds of 5 to 10 minutes) and its own
//! writes; both rolled out at once (each replica stopped with SIGTERM and
//! started again, in turn); then every replica's
//! `watchmux_connections_open{listener="api"}` sampled every 15 s. The
//! figure is the spread, (max - min) / mean over a tier's replicas, and
//! when it came within 20 % to stay. No client may see an error, a 410 or
//! a LIST on the way (the watchers' own counts, and the shared scoring).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::prom;
use crate::stage::{Ctx, Outcome, Plan, Stage, Watchers};
use crate::world::{Watchmux, metrics};

/// The tier's defaults (the chart's `tier` values) under test.
pub const TIER_FLAGS: &[&str] =
    &["--cache-resources", "configmaps", "--cache-warm", "--goaway-chance", "0.02", "--max-connection-age", "5m"];
/// The same tier with neither.
const OFF_FLAGS: &[&str] = &["--cache-resources", "configmaps", "--cache-warm"];
/// How often the replicas' connections are counted.
const SAMPLE_EVERY: Duration = Duration::from_secs(15);
/// How close the replicas' counts must come: (max - min) / mean.
const WITHIN: f64 = 0.2;
/// Watches to one HTTP/2 connection: a kubelet's handful (its pods, its
/// node, the services, the objects its pods mount).
const PER_CONN: usize = 5;
/// client-go's reflector: timeoutSeconds drawn from 5 to 10 minutes.
const WATCH_TIMEOUT_S: std::ops::Range<u64> = 300..600;
/// The replicas of each tier.
const REPLICAS: usize = 3;
/// Between one replica ready and the next stopped: a new pod's
/// `minReadySeconds` and readiness, long enough for the stopped replica's
/// clients to have settled on the others (back in about a second), as in a
/// real rollout. Without it the three restarts fall within the clients'
/// own reconnections, which the balancer then spreads evenly anyway.
const ROLLOUT_PAUSE: Duration = Duration::from_secs(15);

/// One tier's counts over time: seconds since the rollout's end, and the
/// open API connections of each replica.
struct Series {
    samples: Vec<(f64, Vec<f64>)>,
}

impl Series {
    /// (max - min) / mean of one sample's counts; 0 for no connections.
    fn spread(counts: &[f64]) -> f64 {
        let mean = counts.iter().sum::<f64>() / counts.len() as f64;
        if mean == 0.0 {
            return 0.0;
        }
        let max = counts.iter().copied().fold(f64::MIN, f64::max);
        let min = counts.iter().copied().fold(f64::MAX, f64::min);
        (max - min) / mean
    }

    /// The first sample's time from which every sample is within
    /// [`WITHIN`]; None if the last one is not.
    fn within_from(&self) -> Option<f64> {
        let mut from = None;
        for (t, counts) in &self.samples {
            match (Self::spread(counts) <= WITHIN, from) {
                (true, None) => from = Some(*t),
                (false, _) => from = None,
                (true, Some(_)) => {}
            }
        }
        from
    }

    fn json(&self) -> Value {
        let samples: Vec<Value> = self
            .samples
            .iter()
            .map(|(t, counts)| json!({"t_s": t, "connections": counts, "spread": Self::spread(counts)}))
            .collect();
        json!({"samples": samples, "within_20pct_from_s": self.within_from()})
    }
}

/// The replicas' admin addresses, the first one first.
fn admins(st: &Stage) -> Vec<SocketAddr> {
    std::iter::once(&st.wm).chain(&st.replicas).map(|w: &Watchmux| w.admin).collect()
}

/// Each replica's open API connections now.
async fn connections(admins: &[SocketAddr]) -> Vec<f64> {
    let mut counts = Vec::with_capacity(admins.len());
    for admin in admins {
        let text = metrics(*admin).await;
        counts.push(prom::sum(&text, "watchmux_connections_open", &[("listener", "api")]));
    }
    counts
}

/// Each replica of `st` stopped (SIGTERM) and started again in turn, the
/// next one [`ROLLOUT_PAUSE`] after the last is ready, as a Deployment's
/// rolling update goes.
async fn rollout(st: &mut Stage) -> anyhow::Result<()> {
    st.wm.terminate().await;
    st.wm.respawn().await?;
    for replica in &mut st.replicas {
        tokio::time::sleep(ROLLOUT_PAUSE).await; // the rollout's pace, not a wait on an event
        replica.terminate().await;
        replica.respawn().await?;
    }
    Ok(())
}

/// A tier's stage: its own ports (`CHAOS_PORT` + `offset`, two a
/// replica) and the kubelet-shaped fleet.
async fn tier(ctx: &Ctx, id: &'static str, flags: &'static [&'static str], offset: u16) -> anyhow::Result<Stage> {
    let watchers = Watchers { n: ctx.cfg.n, per_conn: PER_CONN, watch_timeout: WATCH_TIMEOUT_S };
    let plan = Plan {
        flags,
        replicas: REPLICAS,
        ports: Some(ctx.setup.listen.port() + offset),
        watchers: Some(watchers),
        ..Plan::default()
    };
    Stage::new(ctx, id, plan).await
}

/// The watchers' own counts of what a client would see as trouble.
fn trouble(st: &Stage) -> Value {
    let c = &st.fleet.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    json!({
        "stream_errors": get(&c.stream_errors),
        "refused": get(&c.refused),
        "gone_410": get(&c.gone),
        "lists": get(&c.list_requests),
        "watch_requests": get(&c.watch_requests),
        "streams_ended": get(&c.reconnects),
        "resent_after_goaway": get(&c.resent),
    })
}

pub async fn tier_rebalance(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let observe = Duration::from_secs(crate::common::env::env_or("CHAOS_REBALANCE_S", 600)?);
    // Ports 10 to 15 and 20 to 25 past CHAOS_PORT: inside the run's range.
    let mut on = tier(ctx, "rebalance-on", TIER_FLAGS, 10).await?;
    let mut off = tier(ctx, "rebalance-off", OFF_FLAGS, 20).await?;
    let lists_before = (trouble(&on)["lists"].clone(), trouble(&off)["lists"].clone());
    on.start_churn(ctx.cfg.write_rate);
    off.start_churn(ctx.cfg.write_rate);
    let before = (connections(&admins(&on)).await, connections(&admins(&off)).await);
    let start = Instant::now();
    let (rolled_on, rolled_off) = tokio::join!(rollout(&mut on), rollout(&mut off));
    rolled_on?;
    rolled_off?;
    let end = Instant::now();
    let rollout_s = (end - start).as_secs_f64();
    eprintln!("chaos: tier-rebalance: both tiers rolled out in {rollout_s:.1}s; sampling for {observe:?}");
    let (admins_on, admins_off) = (admins(&on), admins(&off));
    let (mut series_on, mut series_off) = (Series { samples: Vec::new() }, Series { samples: Vec::new() });
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    while end.elapsed() <= observe {
        tick.tick().await; // the sampling period, not a wait on an event
        let t = end.elapsed().as_secs_f64();
        let (a, b) = (connections(&admins_on).await, connections(&admins_off).await);
        eprintln!("chaos: tier-rebalance: {t:>5.0}s on {a:?} off {b:?}");
        series_on.samples.push((t, a));
        series_off.samples.push((t, b));
    }
    let target_on = on.marker_and_wait(Instant::now(), ctx.cfg.deadline).await?;
    let target_off = off.marker_and_wait(Instant::now(), ctx.cfg.deadline).await?;
    let (trouble_on, trouble_off) = (trouble(&on), trouble(&off));
    let finished_on = prom_sum_all(&admins_on, "watchmux_connections_finished_total", &[("reason", "max_age")]).await;
    let window = (start, Instant::now());
    let (groups_on, notes_on, details_on) = on.finish(ctx, window, &[target_on], Vec::new(), Vec::new()).await?;
    let (groups_off, notes_off, details_off) = off.finish(ctx, window, &[target_off], Vec::new(), Vec::new()).await?;
    let within = |s: &Series| s.within_from().map_or("never".to_owned(), |t| format!("{t:.0} s"));
    let fault = format!(
        "two tiers of {REPLICAS} replicas, each behind a TCP balancer with {} kubelet-shaped watchers ({PER_CONN} to an HTTP/2 connection), rolled out side by side (each replica in turn, {} s apart) in {rollout_s:.1} s; connections sampled every {} s for {} s",
        ctx.cfg.n,
        ROLLOUT_PAUSE.as_secs(),
        SAMPLE_EVERY.as_secs(),
        observe.as_secs()
    );
    let mut notes = vec![
        format!("tier defaults (goaway chance 0.02, max age 5m): within 20 % from {}", within(&series_on)),
        format!("both off: within 20 % from {}", within(&series_off)),
    ];
    notes.extend(notes_on.into_iter().map(|n| format!("on: {n}")));
    notes.extend(notes_off.into_iter().map(|n| format!("off: {n}")));
    let renamed = |groups: Vec<(String, crate::score::Tally)>, tier: &'static str| {
        groups.into_iter().map(move |(name, tally)| (format!("{name} ({tier})"), tally))
    };
    let groups: Vec<_> = renamed(groups_on, "tier defaults").chain(renamed(groups_off, "both off")).collect();
    let details = json!({
        "replicas": REPLICAS,
        "watchers_per_tier": ctx.cfg.n,
        "watches_per_connection": PER_CONN,
        "watch_timeout_s": [WATCH_TIMEOUT_S.start, WATCH_TIMEOUT_S.end],
        "sample_every_s": SAMPLE_EVERY.as_secs(),
        "observe_s": observe.as_secs(),
        "rollout_s": rollout_s,
        "rollout_pause_s": ROLLOUT_PAUSE.as_secs(),
        "tier_flags": TIER_FLAGS,
        "before_rollout": {"on": before.0, "off": before.1},
        "lists_before_rollout": {"on": lists_before.0, "off": lists_before.1},
        "on": {"series": series_on.json(), "clients": trouble_on, "max_age_goaways": finished_on, "stage": details_on},
        "off": {"series": series_off.json(), "clients": trouble_off, "stage": details_off},
        "watchmux_warnings": details_on["watchmux_warnings"].as_u64().unwrap_or(0)
            + details_off["watchmux_warnings"].as_u64().unwrap_or(0),
    });
    let mut outcome = Outcome::new("tier-rebalance", fault, groups, notes, details);
    for (tier, t, lists_before) in [("on", &trouble_on, &lists_before.0), ("off", &trouble_off, &lists_before.1)] {
        for key in ["stream_errors", "refused", "gone_410"] {
            let n = t[key].as_u64().unwrap_or(u64::MAX);
            if n != 0 {
                outcome.problems.push(format!("{tier}: {n} {key} seen by the watchers"));
            }
        }
        let lists = t["lists"].as_u64().unwrap_or(0) - lists_before.as_u64().unwrap_or(0);
        if lists != 0 {
            outcome.problems.push(format!("{tier}: {lists} LISTs after the first"));
        }
    }
    Ok(outcome.check(series_on.within_from().is_some(), || {
        format!("the tier's defaults did not bring the replicas within 20 % in {} s", observe.as_secs())
    }))
}

/// The sum of `name` with `labels` over the replicas at `admins`.
async fn prom_sum_all(admins: &[SocketAddr], name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut sum = 0.0;
    for admin in admins {
        sum += prom::sum(&metrics(*admin).await, name, labels);
    }
    sum
}
