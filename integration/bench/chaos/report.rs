//! The results: a Markdown table (a row per watcher group of each case, then
//! what each case did and found) and the same as JSON.

use serde_json::json;

use super::Config;
use super::stage::Outcome;
use crate::common::stats::{fmt1, p50_p99_max};

impl Outcome {
    /// No error, no failed check, and every watcher converged, lost nothing and was current in time.
    pub fn passed(&self) -> bool {
        self.error.is_none()
            && self.problems.is_empty()
            && self
                .groups
                .iter()
                .all(|(_, t)| t.converged == t.n && t.lost_objects() == 0 && t.lost_events() == 0 && t.stuck == 0)
    }
}

pub fn markdown(cfg: &Config, outcomes: &[Outcome], total_secs: f64) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{} watchers a case ({}, {} to a connection), {} objects of {} B, {} writes/s, deadline {} s; {} case(s) in {} s\n\n",
        cfg.n,
        cfg.shape.name(),
        cfg.per_conn,
        cfg.objects,
        cfg.object_bytes,
        cfg.write_rate,
        cfg.deadline.as_secs(),
        outcomes.len(),
        fmt1(total_secs)
    ));
    s.push_str("| case | watchers | converged | lost objects / events | stuck | time to current, ms (p50 / p99 / max) | run, s | verdict |\n");
    s.push_str("|---|---|---|---|---|---|---|---|\n");
    for o in outcomes {
        let verdict = match (&o.error, o.passed()) {
            (Some(_), _) => "**error**",
            (None, true) => "pass",
            (None, false) => "**FAIL**",
        };
        if o.groups.is_empty() {
            s.push_str(&format!("| {} | – | – | – | – | – | {} | {verdict} |\n", o.id, fmt1(o.secs)));
        }
        for (i, (name, t)) in o.groups.iter().enumerate() {
            let case = if i == 0 { o.id.to_owned() } else { format!("{} ({name})", o.id) };
            s.push_str(&format!(
                "| {case} | {} | {}/{} | {} / {} | {} | {} | {} | {verdict} |\n",
                t.n,
                t.converged,
                t.n,
                t.lost_objects(),
                t.lost_events(),
                t.stuck,
                p50_p99_max(&t.to_current),
                if i == 0 { fmt1(o.secs) } else { String::new() },
            ));
        }
    }
    s.push_str("\nWhat each case did, and what it found:\n\n");
    for o in outcomes {
        s.push_str(&format!("- **{}**: {}", o.id, if o.fault.is_empty() { "–" } else { &o.fault }));
        if let Some(e) = &o.error {
            s.push_str(&format!(". **Error**: {e}"));
        }
        s.push('\n');
        for n in o.problems.iter().map(|p| format!("**problem**: {p}")).chain(o.notes.iter().cloned()) {
            s.push_str(&format!("  - {n}\n"));
        }
        for (name, t) in &o.groups {
            if t.collapsed > 0 {
                s.push_str(&format!("  - {name}: {} versions collapsed by a relist (not lost)\n", t.collapsed));
            }
            if t.out_of_order + t.undecodable > 0 {
                s.push_str(&format!(
                    "  - {name}: **{} events out of order, {} undecodable**\n",
                    t.out_of_order, t.undecodable
                ));
            }
            for e in &t.examples {
                s.push_str(&format!("  - {name}: {e}\n"));
            }
        }
        if o.warnings > 0 {
            s.push_str(&format!("  - watchmux logged {} warning/error line(s)\n", o.warnings));
        }
    }
    s
}

pub fn json(cfg: &Config, outcomes: &[Outcome], total_secs: f64) -> serde_json::Value {
    json!({
        "config": {
            "watchers": cfg.n, "per_connection": cfg.per_conn, "shape": cfg.shape.name(),
            "objects": cfg.objects, "object_bytes": cfg.object_bytes, "write_rate": cfg.write_rate,
            "deadline_s": cfg.deadline.as_secs(),
        },
        "total_secs": total_secs,
        "cases": outcomes.iter().map(|o| json!({
            "case": o.id,
            "passed": o.passed(),
            "error": o.error,
            "fault": o.fault,
            "secs": o.secs,
            "groups": o.groups.iter().map(|(name, t)| { let mut v = t.json(); v["group"] = name.clone().into(); v }).collect::<Vec<_>>(),
            "notes": o.notes,
            "problems": o.problems,
            "watchmux_warnings": o.warnings,
            "details": o.details,
        })).collect::<Vec<_>>(),
    })
}
