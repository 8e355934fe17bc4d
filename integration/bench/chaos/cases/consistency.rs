//! The cache's consistency check (issue 26 item 1) under the writer's
//! churn: a fault injected into what watchmux's cache applies (its
//! `fault-injection` build, `src/cache/fault.rs`) must be found and healed
//! by one relist, with every watcher converging; and at the highest write
//! rate with the check every second, no false alarm.

use std::time::{Duration, Instant};

use anyhow::bail;

use crate::common::prom;
use crate::stage::{Ctx, Outcome, Plan, Stage};
use crate::world::metrics;

const LEAD_IN: Duration = Duration::from_secs(2);
/// How long each step (found, relisted, checked clean twice) may take.
const STEP_LIMIT: Duration = Duration::from_secs(30);
const CHECKS: &str = "watchmux_cache_consistency_checks_total";
const RELISTS: &str = "watchmux_upstream_relists_total";

fn flags(period: &str) -> [&str; 5] {
    ["--cache-resources", "configmaps", "--cache-warm", "--consistency-check-period", period]
}

async fn checks(st: &Stage, result: &str) -> f64 {
    prom::sum(&metrics(st.wm.admin).await, CHECKS, &[("resource", "configmaps"), ("result", result)])
}

async fn inconsistent_relists(st: &Stage) -> f64 {
    prom::sum(&metrics(st.wm.admin).await, RELISTS, &[("resource", "configmaps"), ("cause", "inconsistent")])
}

/// Waits until `value` reaches `at_least`, at most [`STEP_LIMIT`]; the time it took.
async fn until(what: &str, at_least: f64, mut value: impl AsyncFnMut() -> f64) -> anyhow::Result<Duration> {
    let t = Instant::now();
    while value().await < at_least {
        if t.elapsed() > STEP_LIMIT {
            bail!("{what}: not within {STEP_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(t.elapsed())
}

/// One fault (`drop`, `duplicate`, `corrupt`) on an object created for it
/// while the writer churns; the check every second.
async fn fault_case(ctx: &Ctx, id: &'static str, fault: &str) -> anyhow::Result<Outcome> {
    let victim = format!("victim-{fault}-{}", std::process::id());
    let spec = format!("{fault}:configmaps:{victim}");
    let env = [("WATCHMUX_FAULT_INJECT", spec.as_str())];
    let mut st = Stage::new(ctx, id, Plan { flags: &flags("1s"), env: &env, ..Plan::default() }).await?;
    st.start_churn(ctx.cfg.write_rate);
    tokio::time::sleep(LEAD_IN).await;
    let start = Instant::now();
    st.writer.create(&victim).await?;
    if fault == "duplicate" {
        // Its creation, replayed after this deletion, brings it back.
        st.writer.delete(&victim).await?;
    }
    let found = until("the fault found", 1.0, async || checks(&st, "mismatch").await).await?;
    let relisted = until("one relist", 1.0, async || inconsistent_relists(&st).await).await?;
    let ok = checks(&st, "ok").await;
    until("two clean checks after the relist", ok + 2.0, async || checks(&st, "ok").await).await?;
    let end = Instant::now();
    let (mismatches, relists) = (checks(&st, "mismatch").await, inconsistent_relists(&st).await);
    let target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    let what =
        format!("`{fault}` injected on one object's event under {} writes/s; the check every 1 s", ctx.cfg.write_rate);
    let notes = vec![format!(
        "found {:.1} s after the write, relisted {:.1} s later; {mismatches} mismatch(es), {relists} relist(s) for it",
        found.as_secs_f64(),
        relisted.as_secs_f64()
    )];
    let (groups, notes, details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), notes).await?;
    Ok(Outcome::new(id, what, groups, notes, details)
        .check(mismatches == 1.0, || format!("{mismatches} mismatches, want exactly 1"))
        .check(relists == 1.0, || format!("{relists} relists for inconsistency, want exactly 1")))
}

pub async fn drop_event(ctx: &Ctx) -> anyhow::Result<Outcome> {
    fault_case(ctx, "check-drop", "drop").await
}

pub async fn duplicate_event(ctx: &Ctx) -> anyhow::Result<Outcome> {
    fault_case(ctx, "check-duplicate", "duplicate").await
}

pub async fn corrupt_event(ctx: &Ctx) -> anyhow::Result<Outcome> {
    fault_case(ctx, "check-corrupt", "corrupt").await
}

/// No fault: the writer at `write_rate_max` for `check_churn_secs` with the
/// check every second; every check must agree with the upstream.
pub async fn no_false_alarm(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let mut st = Stage::new(ctx, "check-churn", Plan { flags: &flags("1s"), ..Plan::default() }).await?;
    let before: Vec<(String, f64)> =
        prom::by_label(&metrics(st.wm.admin).await, CHECKS, "result", &[("resource", "configmaps")]);
    st.start_churn(ctx.cfg.write_rate_max);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(ctx.cfg.check_churn_secs)).await;
    st.stop_churn().await;
    let end = Instant::now();
    let after = prom::by_label(&metrics(st.wm.admin).await, CHECKS, "result", &[("resource", "configmaps")]);
    let delta = |result: &str| {
        let at = |v: &[(String, f64)]| v.iter().find(|(r, _)| r == result).map_or(0.0, |(_, n)| *n);
        at(&after) - at(&before)
    };
    let writes = st.writer.log().len();
    let (ok, mismatch, error) = (delta("ok"), delta("mismatch"), delta("error"));
    let skipped = delta("skipped_relisting") + delta("skipped_compacted");
    let target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    let what = format!(
        "the writer at up to {} writes/s for {:.0} s, the check every 1 s, no fault",
        ctx.cfg.write_rate_max, ctx.cfg.check_churn_secs
    );
    let notes =
        vec![format!("{writes} writes; checks: {ok} ok, {mismatch} mismatch, {error} error, {skipped} skipped")];
    let (groups, notes, details) = st.finish(ctx, (start, end), &[target], Vec::new(), notes).await?;
    Ok(Outcome::new("check-churn", what, groups, notes, details)
        .check(mismatch == 0.0, || format!("{mismatch} false alarms"))
        .check(ok >= 1.0, || "no check passed".to_owned()))
}
