//! The synthetic Pods the upstream serves: M pods spread over the nodes, each
//! about `object_bytes` of JSON, as the LIST body and as ready-made
//! `MODIFIED` event lines whose resourceVersion is patched in place.
//!
//! Every resourceVersion the run uses has the same number of digits
//! ([`RV_BASE`] is 10^10), so an event is one copy of its pod's line and 11
//! digits written over its slot: the upstream spends almost nothing per event
//! and can outrun the cache it feeds.

use bytes::{BufMut, Bytes, BytesMut};

/// The LIST's resourceVersion; event `seq` (from 1) carries `RV_BASE + seq`.
pub const RV_BASE: u64 = 10_000_000_000;
/// The digits of every resourceVersion in the run.
const RV_DIGITS: usize = 11;
pub const NAMESPACE: &str = "ingest";

pub fn node_name(node: usize) -> String {
    format!("node-{node:04}")
}

/// One pod's object with resourceVersion `rv` and an annotation padding it to
/// `pad` bytes (kubelet-shaped: spec.nodeName, one container, a status).
fn pod_json(pod: usize, node: usize, rv: u64, pad: usize) -> String {
    format!(
        concat!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"pod-{pod:06}","namespace":"{ns}","#,
            r#""uid":"00000000-0000-4000-8000-{pod:012}","resourceVersion":"{rv}","#,
            r#""creationTimestamp":"2026-01-01T00:00:00Z","labels":{{"app":"ingest","pod":"pod-{pod:06}"}},"#,
            r#""annotations":{{"bench/pad":"{pad}"}}}},"#,
            r#""spec":{{"nodeName":"{node}","containers":[{{"name":"app","image":"registry.k8s.io/pause:3.10","#,
            r#""resources":{{}}}}],"restartPolicy":"Always","schedulerName":"default-scheduler"}},"#,
            r#""status":{{"phase":"Running","hostIP":"10.1.{hi}.{lo}","podIP":"10.2.{hi}.{lo}","#,
            r#""startTime":"2026-01-01T00:00:00Z"}}}}"#
        ),
        pod = pod,
        ns = NAMESPACE,
        rv = rv,
        pad = "x".repeat(pad),
        node = node_name(node),
        hi = node / 250,
        lo = node % 250,
    )
}

/// Every pod's event line, and the LIST body.
pub struct Pods {
    /// `{"type":"MODIFIED","object":<pod>}\n` with the slot at `rv_at`.
    lines: Vec<Vec<u8>>,
    rv_at: Vec<usize>,
    pub nodes: usize,
    /// The JSON size of one object, as served.
    pub object_bytes: usize,
    pub list: Bytes,
}

impl Pods {
    /// `count` pods over `nodes` nodes (pod p on node p mod nodes), each
    /// about `object_bytes` of JSON.
    pub fn new(count: usize, nodes: usize, object_bytes: usize) -> Self {
        let bare = pod_json(0, 0, RV_BASE, 0).len();
        let pad = object_bytes.saturating_sub(bare);
        let mut lines = Vec::with_capacity(count);
        let mut rv_at = Vec::with_capacity(count);
        let mut list = BytesMut::new();
        list.put_slice(
            format!(r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{RV_BASE}"}},"items":["#)
                .as_bytes(),
        );
        let mut served = 0;
        for pod in 0..count {
            // Listed at versions below the list's, as the store would hold them.
            let object = pod_json(pod, pod % nodes, RV_BASE - (count - pod) as u64, pad);
            served = object.len();
            if pod > 0 {
                list.put_u8(b',');
            }
            list.put_slice(object.as_bytes());
            // The event's slot holds RV_BASE's 11 digits, overwritten per event.
            let slot = pod_json(pod, pod % nodes, RV_BASE, pad);
            let line = format!("{{\"type\":\"MODIFIED\",\"object\":{slot}}}\n");
            let needle = "\"resourceVersion\":\"";
            rv_at.push(line.find(needle).expect("the object has a resourceVersion") + needle.len());
            lines.push(line.into_bytes());
        }
        list.put_slice(b"]}");
        Self { lines, rv_at, nodes, object_bytes: served, list: list.freeze() }
    }

    /// Event `seq` (from 1): a MODIFIED of pod `(seq - 1) mod count`.
    pub fn pod_of(&self, seq: u64) -> usize {
        ((seq - 1) % self.lines.len() as u64) as usize
    }

    /// The node whose kubelet event `seq` is for.
    pub fn node_of(&self, seq: u64) -> usize {
        self.pod_of(seq) % self.nodes
    }

    /// Event `seq`'s line, appended to `out`.
    pub fn write_event(&self, seq: u64, out: &mut BytesMut) {
        let pod = self.pod_of(seq);
        let start = out.len();
        out.put_slice(&self.lines[pod]);
        let slot = &mut out[start + self.rv_at[pod]..start + self.rv_at[pod] + RV_DIGITS];
        let mut rv = RV_BASE + seq;
        for d in slot.iter_mut().rev() {
            *d = b'0' + (rv % 10) as u8;
            rv /= 10;
        }
        debug_assert_eq!(rv, 0, "a resourceVersion past {RV_DIGITS} digits");
    }
}

/// A BOOKMARK at `rv`, as kube-apiserver sends one.
pub fn bookmark(rv: u64) -> Bytes {
    Bytes::from(format!(
        "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\",\"creationTimestamp\":null}},\"spec\":{{\"containers\":null}},\"status\":{{}}}}}}\n"
    ))
}

/// The patched lines are what a JSON encoder would write (checked at start).
pub fn self_check() {
    let pods = Pods::new(3, 2, 1024);
    assert!((1000..1100).contains(&pods.object_bytes), "{}", pods.object_bytes);
    let mut out = BytesMut::new();
    pods.write_event(5, &mut out);
    let line = std::str::from_utf8(&out).unwrap();
    assert!(line.ends_with('\n'));
    let event: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(event["object"]["metadata"]["resourceVersion"], (RV_BASE + 5).to_string());
    assert_eq!(event["object"]["metadata"]["name"], "pod-000001");
    assert_eq!(event["object"]["spec"]["nodeName"], node_name(pods.node_of(5)));
    assert_eq!(crate::common::lines::find_rv(out.as_ref()), Some(RV_BASE + 5));
    let list: serde_json::Value = serde_json::from_slice(&pods.list).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
}
