//! Faults of what is watched: a CRD deleted under its watchers and created
//! again, and objects near the API server's size limits.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, value::RawValue};

use crate::common::api::Api;
use crate::common::stats::mib;
use crate::stage::{Ctx, Outcome, Plan, Stage, namespace, via};
use crate::world::direct;
use crate::writer::{Kind, MARKER};

const GROUP: &str = "chaos.watchmux.dev";
const CRD: &str = "widgets.chaos.watchmux.dev";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    })
}

/// Polls `path` straight at the API server until it answers `code`, at most `limit`.
async fn until_direct(api: &Api, path: &str, code: StatusCode, limit: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + limit;
    loop {
        if direct(api, Method::GET, path).await.is_ok_and(|(s, _)| s == code) {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("{path} never answered {code} within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_crd(api: &Api, collection: &str) -> anyhow::Result<()> {
    api.create(CRDS, &crd()).await?;
    until_direct(api, collection, StatusCode::OK, Duration::from_secs(60)).await
}

async fn delete_crd(api: &Api) -> anyhow::Result<()> {
    direct(api, Method::DELETE, &format!("{CRDS}/{CRD}")).await?;
    until_direct(api, &format!("{CRDS}/{CRD}"), StatusCode::NOT_FOUND, Duration::from_secs(60)).await
}

/// A CRD watched through watchmux is deleted: every watch stream must end
/// (after DELETED for its objects) and lists and watches then answer the
/// API server's 404; the CRD is created again and the watchers, relisting,
/// must converge on the new objects.
pub async fn crd_lifecycle(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let ns = namespace("crd");
    let kind = Kind {
        collection: format!("/apis/{GROUP}/v1/namespaces/{ns}/widgets"),
        api_version: format!("{GROUP}/v1"),
        kind: "Widget".into(),
        field: "spec",
    };
    let _ = delete_crd(&ctx.api).await;
    create_crd(&ctx.api, &kind.collection).await.context("creating the CRD")?;
    let flags = ["--cache-resources", &format!("configmaps,{CRD}"), "--cache-warm"];
    let mut st = Stage::new(ctx, "crd", Plan { kind: Some(kind.clone()), flags: &flags, ..Plan::default() }).await?;
    st.start_churn(ctx.cfg.write_rate);
    tokio::time::sleep(Duration::from_secs(2)).await;
    st.stop_churn().await;
    let broken_before = st.fleet.counters.reconnects.load(std::sync::atomic::Ordering::Relaxed);
    let start = Instant::now();
    delete_crd(&ctx.api).await?;
    let deleted = start.elapsed();
    // Every stream ends.
    let until = Instant::now() + Duration::from_secs(30);
    let ended = loop {
        let ended = st.fleet.counters.reconnects.load(std::sync::atomic::Ordering::Relaxed) - broken_before;
        if ended as usize >= st.fleet.n || Instant::now() > until {
            break ended;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let all_ended = start.elapsed();
    // The API server's 404, byte for byte.
    let paths = [
        format!("{}?resourceVersion=0", kind.collection),
        format!("{}?watch=1&resourceVersion=0", kind.collection),
        kind.collection.clone(),
    ];
    let mut same = 0;
    let mut differences = Vec::new();
    for path in &paths {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let v = via(&st.proxy, path).await?;
            let d = direct(&ctx.api, Method::GET, path).await?;
            if v == d && v.0 == StatusCode::NOT_FOUND {
                same += 1;
                break;
            }
            if Instant::now() > until {
                differences.push(format!("{path}: {} through watchmux, {} direct", v.0, d.0));
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Created again, with new objects.
    create_crd(&ctx.api, &kind.collection).await.context("creating the CRD again")?;
    let end = Instant::now();
    st.writer.forget();
    st.writer.create(MARKER).await?;
    for name in st.names.iter().take(10) {
        st.writer.create(name).await?;
    }
    let target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    let fault = format!(
        "CRD {CRD} deleted ({:.1} s until gone) and created again {:.1} s later, with new objects; watchers back off and relist as client-go's",
        deleted.as_secs_f64(),
        (end - start - deleted).as_secs_f64()
    );
    let mut notes = vec![
        format!(
            "{ended}/{} watch streams ended, the last {:.1} s after the delete",
            st.fleet.n,
            all_ended.as_secs_f64()
        ),
        format!("404 through watchmux identical to the API server's: {same}/{}", paths.len()),
    ];
    notes.extend(differences);
    let (groups, notes, mut details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), notes).await?;
    details["streams_ended"] = ended.into();
    details["identical_404"] = same.into();
    let _ = delete_crd(&ctx.api).await;
    let n = groups[0].1.n;
    Ok(Outcome::new("crd", fault, groups, notes, details)
        .check(ended as usize >= n, || format!("only {ended} of {n} watch streams ended after the CRD's deletion"))
        .check(same == paths.len(), || "a 404 through watchmux differs from the API server's".into()))
}

#[derive(Deserialize)]
struct RawList<'a> {
    #[serde(borrow)]
    items: &'a RawValue,
}

/// Large objects: `large_count` ConfigMaps of `large_kib` KiB created (then
/// some updated) while the fleet watches; a LIST through watchmux must carry
/// the API server's items byte for byte.
pub async fn large(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let st = Stage::new(ctx, "large", Plan::default()).await?;
    let big = crate::writer::Writer::new(ctx.api.clone(), st.writer.kind.clone(), ctx.cfg.large_kib * 1024);
    let start = Instant::now();
    let names: Vec<String> = (0..ctx.cfg.large_count).map(|i| format!("big-{i:04}")).collect();
    let mut tasks = Vec::new();
    for part in 0..4 {
        let (big, names) = (big.clone(), names.clone());
        tasks.push(tokio::spawn(async move {
            for name in names.iter().skip(part).step_by(4) {
                big.create(name).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    for name in names.iter().take(20) {
        big.update(name).await?;
    }
    let end = Instant::now();
    let target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    // The items, byte for byte: a consistent LIST through watchmux and straight.
    let (vs, vb) = via(&st.proxy, &st.writer.kind.collection).await?;
    let (ds, db) = direct(&ctx.api, Method::GET, &st.writer.kind.collection).await?;
    anyhow::ensure!(vs.is_success() && ds.is_success(), "LIST: {vs} through watchmux, {ds} direct");
    let (v, d): (RawList, RawList) = (serde_json::from_slice(&vb)?, serde_json::from_slice(&db)?);
    let identical = v.items.get() == d.items.get();
    let (vs0, vb0) = via(&st.proxy, &format!("{}?resourceVersion=0", st.writer.kind.collection)).await?;
    let identical_rv0 = vs0.is_success() && serde_json::from_slice::<RawList>(&vb0)?.items.get() == d.items.get();
    let elapsed = (end - start).as_secs_f64();
    let fault = format!(
        "{} ConfigMaps of {} KiB created (4 writers) and 20 of them updated while the watchers watch: {:.1} s, {} MiB written",
        ctx.cfg.large_count,
        ctx.cfg.large_kib,
        elapsed,
        mib((ctx.cfg.large_count + 20) as f64 * ctx.cfg.large_kib as f64 * 1024.0)
    );
    let notes = vec![format!(
        "LIST items through watchmux byte-identical to the API server's: consistent {}, resourceVersion=0 {} ({} MiB)",
        if identical { "yes" } else { "NO" },
        if identical_rv0 { "yes" } else { "NO" },
        mib(d.items.get().len() as f64)
    )];
    st.writer.absorb(&big);
    let (groups, notes, mut details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), notes).await?;
    details["list_items_identical"] =
        json!({"consistent": identical, "rv0": identical_rv0, "bytes": d.items.get().len()});
    details["large_write_secs"] = elapsed.into();
    Ok(Outcome::new("large", fault, groups, notes, details)
        .check(identical && identical_rv0, || "LIST items through watchmux differ from the API server's".into()))
}
