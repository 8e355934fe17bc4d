//! Issue 16's deleted CRD: when a watched CRD is deleted, the API server
//! sends DELETED for its objects and ends the watch; afterwards its
//! collection answers 404; a CRD re-created with other selectable fields
//! answers for those. Through watchmux the same, cache and all.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::env::*;

const WAIT: Duration = Duration::from_secs(30);

fn crd(group: &str, field: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"color": {"type": "string"}, "size": {"type": "string"}}}}}},
                "selectableFields": [{"jsonPath": format!(".spec.{field}")}]}]}
    })
}

/// Polls the API server until `path` answers `code`.
async fn until_direct(direct: &watchmux::upstream::Upstream, path: &str, code: u16) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while get_direct(direct, path).await.0 != code {
        assert!(tokio::time::Instant::now() < deadline, "{path} never answered {code}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_deleted_crd_ends_its_watches_and_a_recreated_one_gets_a_fresh_cache() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let suffix = namespace("crdlife").replace("e2e-crdlife-", "");
    let group = format!("life{suffix}.watchmux.dev");
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    direct_json(&direct, http::Method::POST, crds, crd(&group, "color")).await;
    let ns = namespace("gadgets");
    create_namespace(&direct, &ns).await;
    let collection = format!("/apis/{group}/v1/namespaces/{ns}/gadgets");
    until_direct(&direct, &collection, 200).await;
    for name in ["g1", "g2"] {
        let g = json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": {"name": name},
            "spec": {"color": "blue", "size": "s"}});
        direct_json(&direct, http::Method::POST, &collection, g).await;
    }
    let wm = Watchmux::start(&cluster, &["--cache-resources", "*"]).await;
    let resp = get(wm.addr, &format!("{collection}?watch=1&resourceVersion=0")).await;
    assert_eq!(resp.status(), 200);
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(pump_watch(resp, tx));

    // Delete the CRD: DELETED for each object, then the stream ends.
    let (code, _) = read(
        direct
            .send(http::Request::delete(format!("{crds}/gadgets.{group}")).body(watchmux::body::empty()).unwrap())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 200);
    let mut deleted = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await.expect("the watch ends in time") {
            Some(Some(seen)) if seen.kind == "DELETED" => deleted.push(seen.name),
            Some(Some(_)) => {}
            Some(None) | None => break,
        }
    }
    deleted.sort();
    assert_eq!(deleted, ["g1", "g2"], "DELETED for every object before the end");

    // Gone: the API server's 404, for lists and watches at any version.
    until_direct(&direct, &collection, 404).await;
    for query in ["resourceVersion=0", "watch=1&resourceVersion=0", ""] {
        let path = format!("{collection}?{query}");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let via = read(get(wm.addr, &path).await).await;
            let dir = get_direct(&direct, &path).await;
            if via == dir {
                assert_eq!(via.0, 404, "{path}");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{path}: {via:?} through watchmux, {dir:?} direct");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Re-created with another selectable field: the new field works, the
    // old one is the API server's 400, both through watchmux's fresh cache.
    direct_json(&direct, http::Method::POST, crds, crd(&group, "size")).await;
    until_direct(&direct, &collection, 200).await;
    let g = json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": {"name": "g3"},
        "spec": {"color": "red", "size": "m"}});
    direct_json(&direct, http::Method::POST, &collection, g).await;
    for (query, code) in [("fieldSelector=spec.size%3Dm", 200), ("fieldSelector=spec.color%3Dred", 400)] {
        let path = format!("{collection}?resourceVersion=0&{query}");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (vc, vb) = read(get(wm.addr, &path).await).await;
            let (dc, db) = get_direct(&direct, &path).await;
            let same = if vc == 200 && dc == 200 {
                let (v, d): (Value, Value) =
                    (serde_json::from_slice(&vb).unwrap(), serde_json::from_slice(&db).unwrap());
                v["items"] == d["items"]
            } else {
                (vc, &vb) == (dc, &db)
            };
            if same {
                assert_eq!(vc, code, "{path}");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{path}: {vc} through watchmux, {dc} direct");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
