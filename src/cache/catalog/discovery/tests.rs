//! Discovery against an in-process fake upstream answering `/api` and
//! `/apis` in the aggregated form (kube-apiserver since v1.30) or only in
//! the plain one (an older server, or a proxy that drops the form), counting
//! what it is asked.

use std::sync::Arc;

use http::{Request, Response, header};
use hyper::body::Incoming;
use parking_lot::Mutex;
use serde_json::json;

use super::*;
use crate::upstream::{UpstreamOptions, fake_server};

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn resource(name: &str, kind: &str, scope: &str, short: &[&str]) -> serde_json::Value {
    json!({"resource": name, "responseKind": {"group": "", "version": "", "kind": kind}, "scope": scope,
        "singularResource": kind.to_lowercase(), "shortNames": short, "verbs": ["get", "list", "watch"],
        "subresources": [{"subresource": "status", "verbs": ["get"]}]})
}

fn aggregated(path: &str) -> serde_json::Value {
    let items = if path == "/api" {
        json!([{"metadata": {}, "versions": [{"version": "v1", "resources": [
            resource("pods", "Pod", "Namespaced", &["po"]), resource("nodes", "Node", "Cluster", &["no"])]}]}])
    } else {
        json!([
            {"metadata": {"name": "apps"}, "versions": [{"version": "v1", "resources": [
                resource("deployments", "Deployment", "Namespaced", &["deploy"])]}]},
            // The preferred version first.
            {"metadata": {"name": "example.com"}, "versions": [
                {"version": "v2", "resources": [resource("widgets", "Widget", "Cluster", &[])]},
                {"version": "v1", "resources": [resource("widgets", "Widget", "Cluster", &[])]}]}
        ])
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// The plain forms: the index, and one group version's list.
fn plain(path: &str) -> Option<serde_json::Value> {
    Some(match path {
        "/api" => json!({"kind": "APIVersions", "versions": ["v1"]}),
        "/apis" => json!({"kind": "APIGroupList", "groups": [
            {"name": "apps", "versions": [{"version": "v1"}], "preferredVersion": {"version": "v1"}}]}),
        "/api/v1" => json!({"resources": [
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ["get"], "shortNames": ["po"]},
            {"name": "pods/status", "namespaced": true, "kind": "Pod", "verbs": ["get"]}]}),
        "/apis/apps/v1" => json!({"resources": [
            {"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment", "verbs": ["get"]}]}),
        _ => return None,
    })
}

/// A fake whose `/api` and `/apis` answer the aggregated form when asked and
/// `serves_aggregated`; every path asked is recorded.
async fn discovery(serves_aggregated: bool) -> (Discovery, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let addr = fake_server::serve({
        let asked = asked.clone();
        move |req: Request<Incoming>| {
            let asked = asked.clone();
            async move {
                let path = req.uri().path().to_owned();
                asked.lock().push(path.clone());
                let wants = req.headers().get(header::ACCEPT).and_then(|a| a.to_str().ok()).unwrap_or_default();
                let index = path == "/api" || path == "/apis";
                if index && serves_aggregated && wants.starts_with(AGGREGATED) {
                    return Response::builder()
                        .header(header::CONTENT_TYPE, AGGREGATED)
                        .body(crate::body::full(aggregated(&path).to_string()))
                        .unwrap();
                }
                match plain(&path) {
                    Some(v) => Response::builder()
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(crate::body::full(v.to_string()))
                        .unwrap(),
                    None => Response::builder().status(404).body(crate::body::empty()).unwrap(),
                }
            }
        }
    })
    .await;
    (Discovery::new(fake_server::upstream(addr, UpstreamOptions::default())), asked)
}

#[tokio::test]
async fn the_aggregated_form_is_every_resource_in_two_requests() {
    let (d, asked) = discovery(true).await;
    let preferred = d.all_preferred().await.unwrap();
    let v = |g: &str, v: &str| (g.to_owned(), v.to_owned());
    assert_eq!(preferred, [v("", "v1"), v("apps", "v1"), v("example.com", "v2")]);
    let pods = d.resource("", "v1", "pods").await.unwrap().unwrap();
    assert_eq!((pods.kind.as_str(), pods.singular.as_str(), pods.namespaced), ("Pod", "pod", true));
    assert_eq!(pods.short_names, ["po"]);
    let nodes = d.resource("", "v1", "nodes").await.unwrap().unwrap();
    assert!(!nodes.namespaced);
    let apps = d.resources("apps", "v1").await.unwrap();
    assert_eq!(apps.iter().map(|r| r.resource.as_str()).collect::<Vec<_>>(), ["deployments"]);
    assert!(d.resource("example.com", "v1", "widgets").await.unwrap().is_some(), "a version not preferred");
    assert!(d.resources("none.example.com", "v1").await.unwrap().is_empty());
    assert_eq!(*asked.lock(), ["/api", "/apis"], "no group version asked one by one");
}

#[tokio::test]
async fn an_upstream_without_the_aggregated_form_is_read_list_by_list() {
    let (d, asked) = discovery(false).await;
    let preferred = d.all_preferred().await.unwrap();
    assert_eq!(preferred, [(String::new(), "v1".to_owned()), ("apps".to_owned(), "v1".to_owned())]);
    let pods = d.resource("", "v1", "pods").await.unwrap().unwrap();
    assert_eq!((pods.kind.as_str(), pods.namespaced), ("Pod", true));
    assert_eq!(d.resources("", "v1").await.unwrap().len(), 1, "pods/status is a subresource");
    assert_eq!(d.resources("apps", "v1").await.unwrap()[0].resource, "deployments");
    assert_eq!(*asked.lock(), ["/api", "/apis", "/api/v1", "/apis/apps/v1"]);
}
