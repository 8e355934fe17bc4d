//! Churn with slow watchers (issue 26 item 2): objects the size of an
//! EndpointSlice (4 KiB), every watcher interested, and some watchers that
//! read at a tenth of the churn's rate while it goes on, then at full speed.
//! The same slow watchers run through watchmux and straight at
//! kube-apiserver in the same run, so the figures compare: how often each
//! cuts them (stream ends, 410s, relists, re-watches), and what the fleet of
//! fast watchers through watchmux sees of it (time to current at each marker).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::lines::Pace;
use crate::common::prom;
use crate::common::stats::p50_p99_max;
use crate::fleet::Fleet;
use crate::stage::{Ctx, Outcome, Plan, Stage};
use crate::world::metrics;

use super::clients::markers_until;

/// A watch event's bytes besides its object's padding (metadata, envelope).
const EVENT_OVERHEAD: usize = 400;

/// What the client counters of a fleet moved by during the fault.
fn moved(before: [u64; 5], after: [u64; 5]) -> [u64; 5] {
    [0, 1, 2, 3, 4].map(|i| after[i] - before[i])
}

fn counters_note(name: &str, d: [u64; 5]) -> String {
    format!("{name}: {} streams ended, {} × 410, {} re-watches, {} relists", d[2], d[3], d[0], d[1])
}

pub async fn slow_watchers(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let cfg = &ctx.cfg;
    let plan = Plan { object_bytes: Some(cfg.slow_object_bytes), ..Plan::default() };
    let mut st = Stage::new(ctx, "slow-watchers", plan).await?;
    let bytes_per_sec = cfg.slow_read_share * cfg.slow_write_rate * (cfg.slow_object_bytes + EVENT_OVERHEAD) as f64;
    let pace = Pace::new(bytes_per_sec);
    let collection = st.writer.kind.collection.clone();
    let n = cfg.slow_watchers;
    let via = Fleet::start_paced(&st.proxy, cfg.shape, cfg.per_conn, &collection, n, pace.clone());
    let direct = Fleet::start_paced(&ctx.api.api_target, cfg.shape, cfg.per_conn, &collection, n, pace.clone());
    for (name, f) in [("through watchmux", &via), ("straight at kube-apiserver", &direct)] {
        let ready = f.wait_ready(Duration::from_secs(60)).await;
        anyhow::ensure!(ready == n, "only {ready} of {n} slow watchers {name} opened their watch");
    }
    let (via_before, direct_before) = (via.counters.snapshot(), direct.counters.snapshot());
    let wm_before = metrics(st.wm.admin).await;
    let api_before = ctx.api.apiserver_metrics().await.unwrap_or_default();

    let start = Instant::now();
    st.start_churn(cfg.slow_write_rate);
    let targets = markers_until(&st, ctx, start + Duration::from_secs_f64(cfg.client_fault_secs)).await?;
    let end = Instant::now();
    // The churn stops and the slow readers recover: what they are owed
    // comes at full speed. A stream the server ended reaches its reader
    // only after what was sent before the end, so the counts are taken once
    // every slow watcher has the last version.
    st.stop_churn().await;
    pace.on.store(false, Ordering::Relaxed);
    let (last, _) = st.writer.marker().await?;
    let mut recovered = Vec::new();
    for (name, f) in [("through watchmux", &via), ("straight at kube-apiserver", &direct)] {
        let current = f.wait_current(last, Duration::from_secs(60)).await;
        recovered.push(format!(
            "{current}/{n} slow watchers {name} current {:.1} s after the churn",
            end.elapsed().as_secs_f64()
        ));
    }
    let (via_during, direct_during) = (via.counters.snapshot(), direct.counters.snapshot());
    let wm_after = metrics(st.wm.admin).await;
    let api_after = ctx.api.apiserver_metrics().await.unwrap_or_default();

    let wm_delta =
        |name: &str, labels: &[(&str, &str)]| prom::sum(&wm_after, name, labels) - prom::sum(&wm_before, name, labels);
    let outcome = |o| wm_delta("watchmux_slow_watchers_total", &[("outcome", o)]);
    let (moved_to_ring, caught_up, expired) = (outcome("moved_to_ring"), outcome("caught_up"), outcome("expired"));
    let wm_terminated = wm_delta("watchmux_terminated_watchers_total", &[]);
    let configmaps = [("resource", "configmaps")];
    let api_terminated = prom::sum(&api_after, "apiserver_terminated_watchers_total", &configmaps)
        - prom::sum(&api_before, "apiserver_terminated_watchers_total", &configmaps);
    let (via_d, direct_d) = (moved(via_before, via_during), moved(direct_before, direct_during));

    let fault = format!(
        "{} writes/s of {} B ConfigMaps for {:.0} s to {} watchers through watchmux, of which {n} read at {:.0} KiB/s \
         ({} of the churn's bytes), and {n} more as slow straight at kube-apiserver",
        cfg.slow_write_rate,
        cfg.slow_object_bytes,
        cfg.client_fault_secs,
        st.fleet.n + n,
        bytes_per_sec / 1024.0,
        cfg.slow_read_share
    );
    let mut notes = vec![
        format!(
            "watchmux: {moved_to_ring} slow watchers moved to the ring, {caught_up} caught up, {expired} behind the ring (410); {wm_terminated} closed"
        ),
        format!(
            "kube-apiserver: {api_terminated} configmaps watchers terminated (apiserver_terminated_watchers_total)"
        ),
        counters_note("slow through watchmux", via_d),
        counters_note("slow straight at kube-apiserver", direct_d),
    ];
    notes.extend(recovered);
    let extra = vec![("slow via watchmux".to_owned(), via), ("slow direct".to_owned(), direct)];
    let (groups, more, mut details) = st.finish(ctx, (start, end), &targets, extra, Vec::new()).await?;
    notes.extend(more);
    let fast = &groups[0].1;
    notes.push(format!("fast watchers' time to current at each marker: {}", p50_p99_max(&fast.to_current)));
    details["slow"] = serde_json::json!({
        "watchmux": {"moved_to_ring": moved_to_ring, "caught_up": caught_up, "expired": expired, "closed": wm_terminated},
        "apiserver_terminated_watchers": api_terminated,
        "via_watchmux": {"streams_ended": via_d[2], "gone_410": via_d[3], "watch_requests": via_d[0], "lists": via_d[1]},
        "direct": {"streams_ended": direct_d[2], "gone_410": direct_d[3], "watch_requests": direct_d[0], "lists": direct_d[1]},
        "read_bytes_per_sec": bytes_per_sec,
    });
    Ok(Outcome::new("slow-watchers", fault, groups, notes, details)
        .check(via_d[2] == 0 && via_d[3] == 0, || {
            format!("watchmux cut slow watchers: {} streams ended, {} × 410", via_d[2], via_d[3])
        })
        .check(wm_terminated == 0.0, || format!("watchmux closed {wm_terminated} watchers")))
}
