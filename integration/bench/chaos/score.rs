//! Holding the watchers to the truth: the API server's own list at the
//! end, and the writer's log of every acknowledged write.
//!
//! - converged: the watcher's final state (name → uid, resourceVersion)
//!   equals the API server's.
//! - lost objects: final-state differences, summed over watchers: missing
//!   (the API server has it, the watcher not), stale (an older version),
//!   phantom (the watcher still holds what was deleted: a missed deletion).
//! - lost events: writes the watcher never saw although it got past their
//!   version: an object version never seen, unless a later write replaced
//!   it before a list the watcher made or within the fault (where a relist,
//!   the watcher's or watchmux's, legitimately tells only the latest
//!   version: those are counted as collapsed instead); and deletions it was
//!   never told of (an object replaced by a new one of the same name without
//!   a DELETED between).
//! - stuck: watchers without the post-fault marker's version by the deadline.
//! - time to current: from the fault's end to the moment each watcher had
//!   the marker's version.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use http::Method;
use serde_json::{Value, json};

use super::fleet::StateView;
use super::world::direct;
use super::writer::{Op, Write};
use crate::common::api::Api;
use crate::common::stats::latency_json;

/// The API server's state of a collection: name → (uid, resourceVersion).
pub struct Truth {
    pub objects: HashMap<String, (String, u64)>,
}

/// A consistent LIST straight from the API server.
pub async fn truth(api: &Api, collection: &str) -> anyhow::Result<Truth> {
    let (status, body) = direct(api, Method::GET, collection).await?;
    if !status.is_success() {
        bail!("LIST {collection}: {status}");
    }
    let list: Value = serde_json::from_slice(&body)?;
    let mut objects = HashMap::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let m = &item["metadata"];
        let name = m["name"].as_str().ok_or_else(|| anyhow!("item without a name"))?;
        let uid = m["uid"].as_str().unwrap_or_default();
        let rv = m["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
        objects.insert(name.to_owned(), (uid.to_owned(), rv));
    }
    Ok(Truth { objects })
}

/// One fault's marker: its version and the instant time to current counts from.
#[derive(Clone, Copy)]
pub struct Target {
    pub rv: u64,
    pub from: Instant,
}

/// A group of watchers held to the truth.
#[derive(Default, Debug)]
pub struct Tally {
    pub n: usize,
    pub converged: usize,
    pub missing: u64,
    pub stale: u64,
    pub phantom: u64,
    pub missed_versions: u64,
    pub missed_deletions: u64,
    pub collapsed: u64,
    pub watchers_with_loss: usize,
    pub stuck: usize,
    pub out_of_order: u64,
    pub undecodable: u64,
    /// Per watcher and target: from the target's instant to the watcher having its version.
    pub to_current: Vec<Duration>,
    /// A few examples of what was lost, for the report.
    pub examples: Vec<String>,
}

impl Tally {
    pub fn lost_objects(&self) -> u64 {
        self.missing + self.stale + self.phantom
    }

    pub fn lost_events(&self) -> u64 {
        self.missed_versions + self.missed_deletions
    }

    pub fn json(&self) -> Value {
        json!({
            "watchers": self.n,
            "converged": self.converged,
            "lost_objects": {"missing": self.missing, "stale": self.stale, "phantom": self.phantom},
            "lost_events": {"versions": self.missed_versions, "deletions": self.missed_deletions},
            "collapsed_by_relist": self.collapsed,
            "watchers_with_loss": self.watchers_with_loss,
            "stuck": self.stuck,
            "out_of_order": self.out_of_order,
            "undecodable": self.undecodable,
            "time_to_current_ms": latency_json(&self.to_current),
            "examples": self.examples,
        })
    }
}

/// The writes after each one, by name: for each write, the next write to the same name.
fn next_write_by_name(writes: &[Write]) -> Vec<Option<usize>> {
    let mut next = vec![None; writes.len()];
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, w) in writes.iter().enumerate() {
        if let Some(prev) = last.insert(&w.name, i) {
            next[prev] = Some(i);
        }
    }
    next
}

/// Scores `views` against `truth` and `writes`. `window`: the fault's
/// span, where a relist may collapse versions; `targets`: the markers
/// written after (or during) the fault, the last one deciding who is
/// stuck; `deadline`: how long each target may take.
pub fn tally(
    views: &[StateView],
    truth: &Truth,
    writes: &[Write],
    window: (Instant, Instant),
    targets: &[Target],
    deadline: Duration,
) -> Tally {
    let next = next_write_by_name(writes);
    let in_window = |t: Instant| t >= window.0 && t <= window.1;
    let mut t = Tally { n: views.len(), ..Default::default() };
    for (wi, v) in views.iter().enumerate() {
        t.out_of_order += v.out_of_order;
        t.undecodable += v.undecodable;
        for target in targets {
            match v.reached_at(target.rv) {
                Some(at) if at <= target.from + deadline => {
                    t.to_current.push(at.saturating_duration_since(target.from))
                }
                _ => {}
            }
        }
        if let Some(last) = targets.last()
            && v.reached_at(last.rv).is_none_or(|at| at > last.from + deadline)
        {
            t.stuck += 1;
        }
        // The final state.
        let (mut missing, mut stale, mut phantom) = (0, 0, 0);
        for (name, (uid, rv)) in &truth.objects {
            match v.state.get(name) {
                None => missing += 1,
                Some((u, r)) if u != uid || r != rv => stale += 1,
                Some(_) => {}
            }
        }
        for name in v.state.keys() {
            if !truth.objects.contains_key(name) {
                phantom += 1;
            }
        }
        if missing + stale + phantom == 0 {
            t.converged += 1;
        } else if t.examples.len() < 5 {
            t.examples.push(format!(
                "watcher {wi}: {missing} missing, {stale} stale, {phantom} phantom (holds {} objects, at rv {})",
                v.state.len(),
                v.progress.last().map_or(0, |p| p.0)
            ));
        }
        t.missing += missing;
        t.stale += stale;
        t.phantom += phantom;
        // The writes it got past.
        let (first, reached) = (v.first_list_rv().unwrap_or(0), v.progress.last().map_or(0, |p| p.0));
        let mut missed = 0;
        for (i, w) in writes.iter().enumerate() {
            let Some(rv) = w.rv.filter(|rv| *rv > first && *rv <= reached) else { continue };
            if w.op == Op::Delete || v.seen.contains(&rv) {
                continue;
            }
            let replaced = next[i].map(|j| &writes[j]);
            let collapsed = replaced.is_some_and(|r| {
                (in_window(w.acked) && in_window(r.acked)) || v.lists.iter().skip(1).any(|(_, at)| *at > r.acked)
            });
            if collapsed {
                t.collapsed += 1;
            } else {
                missed += 1;
                if t.examples.len() < 5 {
                    t.examples.push(format!("watcher {wi}: never saw {} at rv {rv} ({:?})", w.name, w.op));
                }
            }
        }
        t.missed_versions += missed;
        t.missed_deletions += v.replaced_without_delete;
        if missing + stale + phantom + missed + v.replaced_without_delete > 0 {
            t.watchers_with_loss += 1;
        }
    }
    t.to_current.sort();
    t
}
