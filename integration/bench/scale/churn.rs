//! The churn phase: with every kubelet of a storm synced and watching, a
//! steady trickle of the writes a cluster sees all day, at the issue's rate
//! of 1% of the pods a minute (`SCALE_CHURN_PODS_PER_MINUTE_PERCENT`), each
//! pod's update followed by an update of one of its service's EndpointSlices
//! (as the EndpointSlice controller follows a pod's readiness). Written
//! straight to kube-apiserver on both sides, as the kubelets and
//! controllers write; what differs is who carries the events to the watchers.
//!
//! Each write is a merge patch of an annotation: a MODIFIED event of the
//! whole object for every watcher of it, like a status update.

use std::time::{Duration, Instant};

use anyhow::bail;

use crate::common::api::Api;
use crate::objects::World;

/// What one churn phase wrote.
#[derive(Debug, Default, Clone, Copy)]
pub struct Churned {
    pub pod_writes: u64,
    pub slice_writes: u64,
    /// Pod updates whose node's kubelet synced and watches its pods: the
    /// events the kubelets must receive.
    pub expected_pod_events: u64,
    pub seconds: f64,
}

/// Writes for `duration` at `percent_per_minute` of the pods a minute,
/// starting at pod `first` (so consecutive phases touch different pods).
pub async fn run(
    api: &Api,
    w: World,
    watched: &std::collections::HashSet<usize>,
    duration: Duration,
    percent_per_minute: f64,
    first: usize,
) -> anyhow::Result<Churned> {
    let per_second = w.pods() as f64 * percent_per_minute / 100.0 / 60.0;
    let began = Instant::now();
    let mut out = Churned::default();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut owed = 0.0;
    let mut p = first;
    while began.elapsed() < duration {
        tick.tick().await;
        owed += per_second / 10.0;
        while owed >= 1.0 {
            owed -= 1.0;
            let pod = p % w.pods();
            p += 1;
            // A value never written before (a patch that changes nothing
            // is no event): the time, to the nanosecond.
            let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
            let patch = format!(r#"{{"metadata":{{"annotations":{{"scale.watchmux.dev/churn":"{n}"}}}}}}"#);
            let path = format!("/api/v1/namespaces/{}/pods/{}", w.namespace(pod), World::pod_name(pod));
            let status = api.merge_patch(&path, patch.clone()).await?;
            if !status.is_success() {
                bail!("churn: PATCH {path}: {status}");
            }
            out.pod_writes += 1;
            if watched.contains(&w.pod_node(pod)) {
                out.expected_pod_events += 1;
            }
            // The first slice of the pod's service (pod p is behind service p % services).
            let s = pod % w.services;
            let path = format!(
                "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices/service-{s:04}-0",
                w.service_namespace(s)
            );
            let status = api.merge_patch(&path, patch).await?;
            if !status.is_success() {
                bail!("churn: PATCH {path}: {status}");
            }
            out.slice_writes += 1;
        }
    }
    out.seconds = began.elapsed().as_secs_f64();
    Ok(out)
}
