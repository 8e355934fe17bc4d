//! The synthetic Pods the upstream serves: M pods spread over the nodes, each
//! about `object_bytes` of JSON, as LIST pages (the objects are made once, and
//! a page is a copy of a run of them) and, for the benches that replay
//! changes, as ready-made `MODIFIED` event lines whose resourceVersion is
//! patched in place.
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

/// One pod's object with resourceVersion `rv`, `labels` labels (the first
/// two `app` and `pod`, then `l2`, `l3`...) and an annotation padding it to
/// `pad` bytes (kubelet-shaped: spec.nodeName, one container, a status).
fn pod_json(pod: usize, node: usize, rv: u64, pad: usize, labels: usize) -> String {
    let labels: Vec<String> = (0..labels)
        .map(|i| match i {
            0 => r#""app":"ingest""#.to_owned(),
            1 => format!(r#""pod":"pod-{pod:06}""#),
            i => format!(r#""l{i}":"v{i}""#),
        })
        .collect();
    format!(
        concat!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"pod-{pod:06}","namespace":"{ns}","#,
            r#""uid":"00000000-0000-4000-8000-{pod:012}","resourceVersion":"{rv}","#,
            r#""creationTimestamp":"2026-01-01T00:00:00Z","labels":{{{labels}}},"#,
            r#""annotations":{{"bench/pad":"{pad}"}}}},"#,
            r#""spec":{{"nodeName":"{node}","containers":[{{"name":"app","image":"registry.k8s.io/pause:3.10","#,
            r#""resources":{{}}}}],"restartPolicy":"Always","schedulerName":"default-scheduler"}},"#,
            r#""status":{{"phase":"Running","hostIP":"10.1.{hi}.{lo}","podIP":"10.2.{hi}.{lo}","#,
            r#""startTime":"2026-01-01T00:00:00Z"}}}}"#
        ),
        pod = pod,
        ns = NAMESPACE,
        rv = rv,
        labels = labels.join(","),
        pad = "x".repeat(pad),
        node = node_name(node),
        hi = node / 250,
        lo = node % 250,
    )
}

/// Every pod's object (and event line, if asked for).
pub struct Pods {
    /// Every object as listed, comma-separated, in pod order.
    objects: Bytes,
    /// Where pod p's object starts in `objects`; one more entry, past the end.
    starts: Vec<usize>,
    /// `{"type":"MODIFIED","object":<pod>}\n` with the slot at `rv_at` (empty: no events).
    lines: Vec<Vec<u8>>,
    rv_at: Vec<usize>,
    pub nodes: usize,
    /// The JSON size of one object, as served.
    pub object_bytes: usize,
}

impl Pods {
    /// `count` pods over `nodes` nodes (pod p on node p mod nodes), each
    /// about `object_bytes` of JSON with two labels, with an event line each.
    pub fn new(count: usize, nodes: usize, object_bytes: usize) -> Self {
        Self::make(count, nodes, object_bytes, 2, true)
    }

    /// The same pods, with `labels` labels each (the JSON as long: the
    /// padding makes up the difference), for a bench that replays no
    /// change: the objects alone.
    pub fn without_events(count: usize, nodes: usize, object_bytes: usize, labels: usize) -> Self {
        Self::make(count, nodes, object_bytes, labels, false)
    }

    fn make(count: usize, nodes: usize, object_bytes: usize, labels: usize, events: bool) -> Self {
        let bare = pod_json(0, 0, RV_BASE, 0, labels).len();
        let pad = object_bytes.saturating_sub(bare);
        let (mut lines, mut rv_at) = (Vec::new(), Vec::new());
        let mut objects = BytesMut::with_capacity(count * (object_bytes + 8));
        let mut starts = Vec::with_capacity(count + 1);
        let mut served = 0;
        for pod in 0..count {
            // Listed at versions below the list's, as the store would hold them.
            let object = pod_json(pod, pod % nodes, RV_BASE - (count - pod) as u64, pad, labels);
            served = object.len();
            if pod > 0 {
                objects.put_u8(b',');
            }
            starts.push(objects.len());
            objects.put_slice(object.as_bytes());
            if events {
                // The event's slot holds RV_BASE's 11 digits, overwritten per event.
                let slot = pod_json(pod, pod % nodes, RV_BASE, pad, labels);
                let line = format!("{{\"type\":\"MODIFIED\",\"object\":{slot}}}\n");
                let needle = "\"resourceVersion\":\"";
                rv_at.push(line.find(needle).expect("the object has a resourceVersion") + needle.len());
                lines.push(line.into_bytes());
            }
        }
        // Past the end, as if a comma followed the last object.
        starts.push(objects.len() + 1);
        Self { objects: objects.freeze(), starts, lines, rv_at, nodes, object_bytes: served }
    }

    pub fn count(&self) -> usize {
        self.starts.len() - 1
    }

    /// Every object's JSON bytes together, as the LIST serves them.
    pub fn json_bytes(&self) -> usize {
        self.objects.len() + 1 - self.count()
    }

    /// The LIST page of at most `limit` pods from pod `from` (every pod from
    /// it when `limit` is 0) and the continue token of the next page, if any:
    /// as kube-apiserver pages a LIST with `limit`.
    pub fn page(&self, from: usize, limit: usize) -> (Bytes, Option<String>) {
        let from = from.min(self.count());
        let to = if limit == 0 { self.count() } else { (from + limit).min(self.count()) };
        let next = (to < self.count()).then(|| to.to_string());
        let items = if to > from { &self.objects[self.starts[from]..self.starts[to] - 1] } else { &[][..] };
        let mut body = BytesMut::with_capacity(items.len() + 160);
        body.put_slice(br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":""#);
        body.put_slice(RV_BASE.to_string().as_bytes());
        body.put_u8(b'"');
        if let Some(token) = &next {
            body.put_slice(br#","continue":""#);
            body.put_slice(token.as_bytes());
            body.put_slice(br#"","remainingItemCount":"#);
            body.put_slice((self.count() - to).to_string().as_bytes());
        }
        body.put_slice(br#"},"items":["#);
        body.put_slice(items);
        body.put_slice(b"]}");
        (body.freeze(), next)
    }

    /// The LIST of the pods bound to `node` (`fieldSelector=spec.nodeName=`,
    /// which watchmux passes through while its cache is not ready), whole.
    pub fn node_list(&self, node: usize) -> Bytes {
        let mut body = BytesMut::new();
        body.put_slice(br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":""#);
        body.put_slice(RV_BASE.to_string().as_bytes());
        body.put_slice(br#""},"items":["#);
        for (i, pod) in (node..self.count()).step_by(self.nodes.max(1)).enumerate() {
            if i > 0 {
                body.put_u8(b',');
            }
            body.put_slice(&self.objects[self.starts[pod]..self.starts[pod + 1] - 1]);
        }
        body.put_slice(b"]}");
        body.freeze()
    }

    /// Event `seq` (from 1): a MODIFIED of pod `(seq - 1) mod count`.
    pub fn pod_of(&self, seq: u64) -> usize {
        ((seq - 1) % self.count() as u64) as usize
    }

    /// The node whose kubelet event `seq` is for.
    pub fn node_of(&self, seq: u64) -> usize {
        self.pod_of(seq) % self.nodes
    }

    /// Event `seq`'s line, appended to `out` (the pods were made with events).
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

/// The patched lines are what a JSON encoder would write, and the pages
/// join up to the whole list (checked at start).
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

    let whole: serde_json::Value = serde_json::from_slice(&pods.page(0, 0).0).unwrap();
    let items = whole["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    let listed: usize = items.iter().map(|i| serde_json::to_vec(i).unwrap().len()).sum();
    assert_eq!(listed, pods.json_bytes(), "json_bytes counts exactly the objects");
    let (first, next) = pods.page(0, 2);
    let first: serde_json::Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    assert_eq!(first["metadata"]["continue"], "2");
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    let (last, end) = pods.page(next.unwrap().parse().unwrap(), 2);
    let last: serde_json::Value = serde_json::from_slice(&last).unwrap();
    assert_eq!(last["items"][0]["metadata"]["name"], "pod-000002");
    assert_eq!((end, last["metadata"].get("continue")), (None, None));
    let node: serde_json::Value = serde_json::from_slice(&pods.node_list(1)).unwrap();
    assert_eq!(node["items"].as_array().unwrap().len(), 1);
    assert_eq!(node["items"][0]["spec"]["nodeName"], node_name(1));
    let bare = Pods::without_events(3, 2, 1024, 0);
    assert!(bare.lines.is_empty());
    assert_eq!(bare.json_bytes(), pods.json_bytes(), "the padding makes up for the labels");
    let many: serde_json::Value = serde_json::from_slice(&Pods::without_events(1, 1, 1024, 5).page(0, 0).0).unwrap();
    assert_eq!(many["items"][0]["metadata"]["labels"].as_object().unwrap().len(), 5);
}
