//! Compaction with a cut: watchmux is cut off from the API server, objects
//! are changed, deleted and created again straight at the API server, etcd
//! is compacted past everything watchmux saw and the API server restarted,
//! so that watchmux can only catch up by relisting; then the cut ends.
//!
//! Besides the fleet, gap clients list straight from the API server during
//! the cut (a version newer than anything watchmux has) and watch through
//! watchmux from it: each must end with the API server's state, by getting
//! every change after its version or by a 410 and a new list. A 410 is
//! fine; a deletion it never learns of is lost.

use std::time::{Duration, Instant};

use http::Method;

use crate::common::reflector::View as _;
use crate::fleet::{Fleet, StateView};
use crate::relay::Mode;
use crate::stage::{Ctx, Outcome, Plan, Stage};
use crate::world::{compact_etcd, direct, restart_apiserver};

pub async fn compaction(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let st = Stage::new(ctx, "compaction", Plan::default()).await?;
    let names = &st.names;
    let n = names.len();
    anyhow::ensure!(n >= 20, "the compaction case needs CHAOS_OBJECTS of 20 or more");
    st.relay.set(Mode::Cut);
    let start = Instant::now();
    let before = st.writer.writes();
    // Before the gap clients' version: changed, deleted, deleted and created again, new.
    for name in &names[0..5] {
        st.writer.update(name).await?;
        st.writer.update(name).await?;
    }
    for name in &names[5..10] {
        st.writer.delete(name).await?;
    }
    for name in &names[5..8] {
        st.writer.create(name).await?;
    }
    for i in 0..5 {
        st.writer.create(&format!("new-{i}")).await?;
    }
    // The gap clients' list, straight from the API server.
    let (status, body) = direct(&ctx.api, Method::GET, &st.writer.kind.collection).await?;
    anyhow::ensure!(status.is_success(), "direct LIST: {status}");
    let seeds: Vec<(StateView, Option<u64>)> = (0..ctx.cfg.gap_clients)
        .map(|_| {
            let mut v = StateView::default();
            let rv = v.listed(&body, Instant::now());
            (v, rv)
        })
        .collect();
    let x = seeds.first().and_then(|s| s.1).unwrap_or(0);
    let gap =
        Fleet::start_from(&st.proxy, ctx.cfg.shape, ctx.cfg.per_conn, &st.writer.kind.collection, seeds, None, None);
    let gap_ready = gap.wait_ready(Duration::from_secs(10)).await;
    // After it: deletions (which the gap clients must learn of) and changes.
    for name in &names[10..14] {
        st.writer.delete(name).await?;
    }
    for name in &names[14..18] {
        st.writer.update(name).await?;
    }
    st.writer.delete("new-0").await?;
    st.writer.create(&names[12]).await?;
    let rev = compact_etcd(ctx.setup.etcd).await?;
    restart_apiserver(&ctx.setup, "TERM").await?;
    st.relay.set(Mode::Forward);
    let end = Instant::now();
    let target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    gap.wait_current(target.rv, ctx.cfg.deadline.saturating_sub(end.elapsed())).await;
    let fault = format!(
        "relay cut; {} writes straight at the API server (updates, deletions, re-creations, new objects); \
         {} gap clients listed at rv {x} and watched through watchmux; etcd compacted at {rev}; \
         kube-apiserver restarted (SIGTERM); relay restored: {:.1} s cut",
        st.writer.writes() - before,
        ctx.cfg.gap_clients,
        (end - start).as_secs_f64()
    );
    let notes = vec![format!("gap clients' watch accepted: {gap_ready}/{}", ctx.cfg.gap_clients)];
    let extra = vec![("gap clients".to_owned(), gap)];
    let (groups, notes, details) = st.finish(ctx, (start, Instant::now()), &[target], extra, notes).await?;
    let g = ctx.cfg.gap_clients;
    Ok(Outcome::new("compaction", fault, groups, notes, details)
        .check(gap_ready == g, || format!("only {gap_ready} of {g} gap clients' watches were accepted")))
}
