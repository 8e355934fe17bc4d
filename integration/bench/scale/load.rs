//! Filling kube-apiserver with the simulated cluster ([`World`]): every
//! object created through the API (so etcd holds exactly what a real cluster
//! would, managedFields and all), the statuses written through the status
//! subresource as kubelets write them, many requests in flight over HTTP/2.
//! Creating what already exists counts as done (409), so an interrupted load
//! can be run again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures_util::StreamExt as _;
use futures_util::stream;
use http::StatusCode;

use crate::common::api::Api;
use crate::objects::World;

/// One write of the load: a create, or a status written after it.
enum Write {
    Create { collection: String, object: serde_json::Value },
    Status { path: String, status: serde_json::Value },
}

impl Write {
    async fn run(&self, api: &Api) -> anyhow::Result<()> {
        match self {
            Write::Create { collection, object } => api.create(collection, object).await,
            Write::Status { path, status } => {
                let s = api.merge_patch(path, status.to_string()).await?;
                if !s.is_success() {
                    bail!("status of {path}: {s}");
                }
                Ok(())
            }
        }
    }
}

/// Runs `writes` with `in_flight` at once; the count done and the time taken.
async fn run_all(
    api: &Arc<Api>,
    what: &str,
    in_flight: usize,
    writes: impl Iterator<Item = Write>,
) -> anyhow::Result<(usize, Duration)> {
    let began = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let mut results = stream::iter(writes)
        .map(|w| {
            let (api, done) = (api.clone(), done.clone());
            async move {
                // kube-apiserver refuses for load with 429 (and, starting, 503):
                // wait and try again, a bounded number of times.
                let mut last = None;
                for attempt in 0..20u32 {
                    match w.run(&api).await {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::Relaxed);
                            return Ok(());
                        }
                        Err(e) => {
                            let text = format!("{e:#}");
                            let retriable = [
                                StatusCode::TOO_MANY_REQUESTS,
                                StatusCode::SERVICE_UNAVAILABLE,
                                StatusCode::GATEWAY_TIMEOUT,
                                StatusCode::INTERNAL_SERVER_ERROR,
                            ]
                            .iter()
                            .any(|s| text.contains(s.as_str()))
                                || text.contains("connection");
                            if !retriable {
                                return Err(e);
                            }
                            last = Some(e);
                            tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt + 1))).await;
                        }
                    }
                }
                Err(last.expect("an error").context("20 attempts"))
            }
        })
        .buffer_unordered(in_flight);
    let mut next_report = Instant::now() + Duration::from_secs(15);
    while let Some(r) = results.next().await {
        r.with_context(|| format!("loading {what}"))?;
        if Instant::now() >= next_report {
            let n = done.load(Ordering::Relaxed);
            eprintln!("scale: {what}: {n} written ({:.0}/s)", n as f64 / began.elapsed().as_secs_f64());
            next_report += Duration::from_secs(15);
        }
    }
    Ok((done.load(Ordering::Relaxed), began.elapsed()))
}

/// What the load wrote, by kind: (kind, writes, seconds).
pub type LoadReport = Vec<(String, usize, f64)>;

pub async fn load(api: &Arc<Api>, w: World, in_flight: usize) -> anyhow::Result<LoadReport> {
    let mut report = Vec::new();
    let mut step = |kind: &str, (n, t): (usize, Duration)| {
        eprintln!("scale: {kind}: {n} writes in {:.1} s ({:.0}/s)", t.as_secs_f64(), n as f64 / t.as_secs_f64());
        report.push((kind.to_owned(), n, t.as_secs_f64()));
    };
    for ns in 0..w.namespaces {
        api.ensure_namespace(&w.namespace(ns)).await?;
    }
    let nodes = (0..w.nodes).flat_map(|i| {
        let path = format!("/api/v1/nodes/{}/status", World::node_name(i));
        [
            Write::Create { collection: "/api/v1/nodes".into(), object: w.node(i) },
            Write::Status { path, status: w.node_status(i) },
        ]
    });
    // A node's status needs the node: nodes first, then their statuses (a
    // create and its status in one stream could run out of order).
    let (creates, statuses): (Vec<_>, Vec<_>) = nodes.partition(|x| matches!(x, Write::Create { .. }));
    step("nodes", run_all(api, "nodes", in_flight, creates.into_iter()).await?);
    step("node statuses", run_all(api, "node statuses", in_flight, statuses.into_iter()).await?);
    let config = (0..w.namespaces).flat_map(|ns| {
        (0..w.per_namespace).flat_map(move |k| {
            let coll = |r: &str| format!("/api/v1/namespaces/{}/{r}", w.namespace(ns));
            [
                Write::Create { collection: coll("configmaps"), object: w.config_map(ns, k) },
                Write::Create { collection: coll("secrets"), object: w.secret(ns, k) },
            ]
        })
    });
    step("configmaps and secrets", run_all(api, "configmaps and secrets", in_flight, config).await?);
    let services = (0..w.services).map(|s| Write::Create {
        collection: format!("/api/v1/namespaces/{}/services", w.service_namespace(s)),
        object: w.service(s),
    });
    step("services", run_all(api, "services", in_flight, services).await?);
    let pods = (0..w.pods())
        .map(|p| Write::Create { collection: format!("/api/v1/namespaces/{}/pods", w.namespace(p)), object: w.pod(p) });
    step("pods", run_all(api, "pods", in_flight, pods).await?);
    let pod_statuses = (0..w.pods()).map(|p| Write::Status {
        path: format!("/api/v1/namespaces/{}/pods/{}/status", w.namespace(p), World::pod_name(p)),
        status: w.pod_status(p),
    });
    step("pod statuses", run_all(api, "pod statuses", in_flight, pod_statuses).await?);
    let slices = (0..w.services).flat_map(|s| {
        w.endpoint_slices(s).into_iter().map(move |object| Write::Create {
            collection: format!("/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices", w.service_namespace(s)),
            object,
        })
    });
    step("endpointslices", run_all(api, "endpointslices", in_flight, slices).await?);
    Ok(report)
}
