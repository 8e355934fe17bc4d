//! A black hole between watchmux and the API server over HTTP/1.1
//! (`--upstream-http1-only`), with consistent reads coming in all along:
//! the relay forwards nothing on any connection, old or new, and closes
//! none, for `CHAOS_BLACK_HOLE_S` (60 s); then new connections are
//! forwarded again (the old ones stay black holes, as a network that
//! dropped their bytes leaves them). HTTP/1.1 has no PING: only the watch's
//! own silence tells it dead, and the freshness proof's catch-up watches,
//! each on a new connection, must not keep it alive. Held to: watchmux
//! abandons the silent watch (`watchmux_upstream_watch_silent_total`), and
//! its cache is less than a second stale within a few seconds of the
//! link's return, and does not saw back up.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::common::prom;
use crate::relay::Mode;
use crate::score::Target;
use crate::stage::{Ctx, Outcome, Plan, Stage, via_within};
use crate::world::metrics;

const LEAD_IN: Duration = Duration::from_secs(2);
/// How often a consistent LIST goes through watchmux.
const READ_EVERY: Duration = Duration::from_millis(250);
/// Within this long of the link's return the cache must be under a second stale...
const BACK_WITHIN: Duration = Duration::from_secs(10);
/// ...and not saw back up for this long after: never this stale again. The
/// fault this case was written for sawed from 0 to 9 to 11 s every 12 to 16 s
/// (a dead watch kept alive, the catch-ups carrying the cache); on this
/// shared 2-core machine a second or two of a stalled process (the
/// harness's own scrape then stalls as long) is not that.
const STAYS_FOR: Duration = Duration::from_secs(20);
const STAYS_UNDER: f64 = 5.0;
const STALENESS: &str = "watchmux_watch_cache_staleness_seconds";

pub async fn black_hole_h1(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let hole =
        Duration::from_secs_f64(std::env::var("CHAOS_BLACK_HOLE_S").ok().and_then(|s| s.parse().ok()).unwrap_or(60.0));
    let flags = ["--cache-resources", "configmaps", "--cache-warm", "--upstream-http1-only"];
    let mut st = Stage::new(ctx, "black-hole-h1", Plan { flags: &flags, ..Plan::default() }).await?;
    st.start_churn(ctx.cfg.write_rate);
    // Consistent reads all along: each may start a catch-up watch, whose
    // changes wake the reflector.
    let stop = CancellationToken::new();
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let reads = {
        let (proxy, path, stop) = (st.proxy.clone(), st.writer.kind.collection.clone(), stop.clone());
        let (ok, failed) = (ok.clone(), failed.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                match via_within(&proxy, &path, Duration::from_secs(10)).await {
                    Ok((code, _)) if code.is_success() => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(READ_EVERY).await;
            }
        })
    };
    tokio::time::sleep(LEAD_IN).await;
    st.relay.set(Mode::BlackHole);
    let start = Instant::now();
    tokio::time::sleep(hole).await;
    st.relay.set(Mode::Forward);
    let end = Instant::now();
    let staleness = async || prom::sum(&metrics(st.wm.admin).await, STALENESS, &[("resource", "configmaps")]);
    // When the cache is first under a second stale, and the worst after.
    let mut back: Option<Duration> = None;
    let mut worst_after = 0.0_f64;
    // Every sample after the return: (seconds since it, staleness).
    let mut samples: Vec<(f64, f64)> = Vec::new();
    while end.elapsed() < BACK_WITHIN + STAYS_FOR {
        let s = staleness().await;
        samples.push(((end.elapsed().as_secs_f64() * 10.0).round() / 10.0, (s * 100.0).round() / 100.0));
        match back {
            None if s < 1.0 => back = Some(end.elapsed()),
            Some(at) if end.elapsed() < at + STAYS_FOR => worst_after = worst_after.max(s),
            _ => {}
        }
        if back.is_some_and(|at| end.elapsed() >= at + STAYS_FOR) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let target: Target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    stop.cancel();
    let _ = reads.await;
    let silent = st.metric_delta("watchmux_upstream_watch_silent_total").await;
    let restarts = st.metric_delta("watchmux_upstream_watch_restarts_total").await;
    let relists = st.metric_delta("watchmux_upstream_relists_total").await;
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let back_s = back.map(|d| d.as_secs_f64());
    let notes = vec![
        format!(
            "cache under 1 s stale {} after the link's return; worst staleness in the {} s after: {worst_after:.2} s",
            back_s.map_or("never".into(), |s| format!("{s:.1} s")),
            STAYS_FOR.as_secs()
        ),
        format!("silent upstream watches abandoned: {silent}; watch restarts: {restarts}; relists: {relists}"),
        format!(
            "consistent LISTs through watchmux: {ok} answered 2xx, {failed} not (during the hole they wait or fail)"
        ),
    ];
    let fault = format!(
        "relay black-holed every watchmux→API server connection, old and new (no bytes, no close) for {:.1} s, over HTTP/1.1, consistent LISTs every {} ms",
        (end - start).as_secs_f64(),
        READ_EVERY.as_millis()
    );
    let (groups, notes, mut details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), notes).await?;
    details["back_under_1s_after_s"] = back_s.into();
    details["worst_staleness_after_s"] = worst_after.into();
    details["silent_watches"] = silent.into();
    details["relists"] = relists.into();
    details["staleness_after_return"] = serde_json::json!(samples);
    Ok(Outcome::new("black-hole-h1", fault, groups, notes, details)
        .check(silent >= 1.0, || "watchmux never abandoned its silent upstream watch".into())
        .check(back.is_some_and(|d| d <= BACK_WITHIN), || {
            format!("the cache was not under 1 s stale within {BACK_WITHIN:?} of the link's return")
        })
        .check(worst_after < STAYS_UNDER, || format!("staleness went back up to {worst_after:.2} s after the return")))
}
