//! The results of one configuration: Markdown tables on stdout (sides as
//! columns; then one row per cell and side) and the same figures as JSON.

use serde_json::json;

use crate::common::client::{Shape, SideKind};
use crate::common::procfs::{Sample, ticks_ms};
use crate::common::stats::{
    SideTable, Table, fmt0, fmt1, fmt2, latency_json, mib, ms, p50_p99_max, percentile, signed_mib, thousands,
};
use crate::side::{CellResult, SideResult};
use crate::{Bench, CellPlan, Skipped};

/// Variants the watchers ask for: JSON only, so one encode per change.
const VARIANTS: f64 = 1.0;

/// Net of the baseline scaled to the phase's length: (net, raw, baseline).
fn net(phase: u64, baseline: u64, c: &CellResult) -> (f64, f64, f64) {
    let scale = c.phase_secs / c.baseline_secs;
    (phase as f64 - baseline as f64 * scale, phase as f64, baseline as f64 * scale)
}

fn net_ms(f: impl Fn(&Sample) -> u64, c: &CellResult) -> (f64, f64, f64) {
    let (n, r, b) = net(f(&c.phase), f(&c.baseline), c);
    let t = ticks_ms(1);
    (n * t, r * t, b * t)
}

pub struct Derived {
    pub server_cpu_net_ms: f64,
    pub server_cpu_raw_ms: f64,
    pub server_cpu_base_ms: f64,
    pub cpu_per_1000: Option<f64>,
    pub api_cpu_net_ms: f64,
    pub bench_cpu_ms: f64,
    pub syscw_per_event: Option<f64>,
    pub bytes_per_event: Option<f64>,
    /// Write system calls over (connections × writes): 1.0 is one write per connection per change.
    pub syscw_per_conn_write: Option<f64>,
    pub encodes: Option<f64>,
}

pub fn derive(s: &SideResult, c: &CellResult) -> Derived {
    let (server_net, server_raw, server_base) = net_ms(|x| x.server, c);
    let (api_net, ..) = net_ms(|x| x.apiserver, c);
    let per_event =
        |f: fn(&Sample) -> u64| (c.received > 0).then(|| net(f(&c.phase), f(&c.baseline), c).0 / c.received as f64);
    let conn_writes = (s.connections * c.writes.ok()) as f64;
    // watchmux's TLS stream writes with send(2), which /proc/<pid>/io does
    // not count (procfs::write_io): no figure rather than a false zero. The
    // strace configuration of bench-fanout.sh counts every write call.
    let writes_counted =
        !(s.kind == SideKind::Watchmux && std::env::var("WATCHMUX_BENCH_PROXY_TLS").as_deref() == Ok("1"));
    let per_event = |f: fn(&Sample) -> u64| per_event(f).filter(|_| writes_counted);
    Derived {
        server_cpu_net_ms: server_net,
        server_cpu_raw_ms: server_raw,
        server_cpu_base_ms: server_base,
        cpu_per_1000: (c.received > 0).then(|| server_net / (c.received as f64 / 1000.0)),
        api_cpu_net_ms: api_net,
        bench_cpu_ms: ticks_ms(c.phase.bench),
        syscw_per_event: per_event(|x| x.server_syscw),
        bytes_per_event: per_event(|x| x.server_wchar),
        syscw_per_conn_write: (conn_writes > 0.0 && writes_counted)
            .then(|| net(c.phase.server_syscw, c.baseline.server_syscw, c).0 / conn_writes),
        encodes: c.encodes.as_ref().map(|e| e.iter().map(|(_, v)| v).sum()),
    }
}

fn opt(x: Option<f64>, f: fn(f64) -> String) -> String {
    x.map_or("–".into(), f)
}

fn kib(bytes: usize) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

pub fn markdown(
    bench: &Bench,
    api_adv: Option<u32>,
    proxy_adv: Option<u32>,
    sides: &[SideResult],
    skipped: &[Skipped],
) {
    let cfg = &bench.cfg;
    let shape = match cfg.shape {
        Shape::H2 => "HTTP/2, many watches per connection",
        Shape::H1 => "HTTP/1.1, one connection per watcher",
    };
    println!();
    println!("### {} watchers, {shape}", thousands(cfg.n));
    println!();
    println!(
        "kube-apiserver advertises {} concurrent HTTP/2 streams per connection, watchmux {}.",
        api_adv.map_or("no limit on".into(), |v| v.to_string()),
        proxy_adv.map_or("no limit on".into(), |v| v.to_string()),
    );
    println!();
    let mut t = SideTable::new(sides, |s| s.kind.title());
    t.row("server process measured", |s| match s.kind {
        SideKind::Direct => "kube-apiserver".into(),
        SideKind::Watchmux => "watchmux".into(),
    });
    t.row("connections × watches per connection", |s| format!("{} × {}", thousands(s.connections), s.per_conn));
    t.row("watches answered 200 / failed; time to open all, s", |s| {
        format!("{} / {}; {:.1}", thousands(s.opened), s.failed, s.open_secs)
    });
    t.row("server RSS before → all open and idle, MiB", |s| {
        format!("{} → {}", mib(s.rss_before as f64), mib(s.rss_after as f64))
    });
    t.row("**server RSS per idle watcher, KiB**", |s| opt(s.rss_per_watcher_kib(), |v| format!("**{v:.1}**")));
    t.row("kube-apiserver RSS / Go heap in use change, MiB", |s| {
        format!(
            "{} / {}",
            signed_mib(s.api_rss_after as f64 - s.api_rss_before as f64),
            signed_mib(s.api_heap_after - s.api_heap_before)
        )
    });
    t.row("kube-apiserver configmaps WATCHes held: before → open", |s| {
        format!("{} → {}", s.api_watches.0, s.api_watches.1)
    });
    t.row("watches the server closed and the watcher resumed (watchers)", |s| {
        format!("{} ({})", s.resumed, s.watchers_resumed)
    });
    t.row("duplicates / streams ended for good / stream errors / ERROR events", |s| {
        format!("{} / {} / {} / {}", s.duplicates, s.ended_early, s.stream_errors.len(), s.error_events)
    });
    t.print();

    let mut t = Table::new(&[
        "changes/s (achieved)",
        "object",
        "side",
        "writes ok / failed",
        "delivered / expected",
        "**lost**",
        "latency ack → receipt p50 / p99 / max, ms",
        "issue → receipt p99, ms",
        "after direct reference p50 / p99 / max, ms",
        "**watchmux fan-out p50 / p99, ms** (queued; handed)",
        "server CPU net of baseline, ms",
        "**server CPU per 1,000 events, ms**",
        "kube-apiserver CPU net, ms",
        "write syscalls / event",
        "bytes written / event",
        "write syscalls / (connection × change)",
        "encodes / changes × variants",
    ]);
    for (i, plan) in bench.cells.iter().enumerate() {
        for s in sides {
            let c = &s.cells[i];
            let d = derive(s, c);
            t.row(vec![
                format!("{} ({:.0})", plan.rate, c.writes.achieved_rate()),
                kib(plan.object_bytes),
                s.kind.title().into(),
                format!("{} / {}", c.writes.ok(), c.writes.errors),
                format!("{} / {}", thousands(c.received), thousands(c.expected)),
                format!("**{}** ({} watchers)", thousands(c.lost()), c.watchers_missing_some),
                p50_p99_max(&c.lat_ack),
                ms(percentile(&c.lat_issue, 0.99)),
                c.beyond_reference.as_ref().map_or("–".into(), |v| p50_p99_max(v)),
                fanout_cell(c),
                format!(
                    "{} − {} = {}",
                    fmt0(d.server_cpu_raw_ms),
                    fmt0(d.server_cpu_base_ms),
                    fmt0(d.server_cpu_net_ms)
                ),
                opt(d.cpu_per_1000, |v| format!("**{}**", fmt1(v))),
                fmt0(d.api_cpu_net_ms),
                opt(d.syscw_per_event, fmt2),
                opt(d.bytes_per_event, fmt0),
                opt(d.syscw_per_conn_write, fmt2),
                d.encodes.map_or("–".into(), |e| format!("{e} / {}", c.writes.ok() as f64 * VARIANTS)),
            ]);
        }
    }
    t.print();
    for s in skipped {
        println!("- left out: {} changes/s of {} B objects: {}", s.rate, s.size, s.why);
    }
    for s in sides {
        for f in &s.failure_samples {
            println!("- {}: watch open failure: {f}", s.kind.title());
        }
        for e in &s.stream_errors {
            println!("- {}: stream error: {e}", s.kind.title());
        }
        if let Some(l) = &s.error_line_sample {
            println!("- {}: ERROR event: {l}", s.kind.title());
        }
    }
}

/// watchmux's own fan-out time, both stages: `p50 / p99; p50 / p99` in ms.
fn fanout_cell(c: &CellResult) -> String {
    if c.fanout.is_empty() {
        return "–".into();
    }
    c.fanout.iter().map(|f| format!("{} / {}", fmt2(f.p50 * 1e3), fmt2(f.p99 * 1e3))).collect::<Vec<_>>().join("; ")
}

fn cell_json(plan: &CellPlan, s: &SideResult, c: &CellResult) -> serde_json::Value {
    let d = derive(s, c);
    json!({
        "rate": plan.rate,
        "size": plan.size,
        "object_bytes": plan.object_bytes,
        "writes_planned": plan.writes,
        "writes_ok": c.writes.ok(),
        "write_errors": c.writes.errors,
        "achieved_rate": c.writes.achieved_rate(),
        "slowest_write_ms": c.writes.slowest_ms,
        "received": c.received,
        "expected": c.expected,
        "lost": c.lost(),
        "watchers_missing_some": c.watchers_missing_some,
        "latency_ack_ms": latency_json(&c.lat_ack),
        "latency_issue_ms": latency_json(&c.lat_issue),
        "beyond_reference_ms": c.beyond_reference.as_ref().map(|v| latency_json(v)),
        "server_cpu_net_ms": d.server_cpu_net_ms,
        "server_cpu_raw_ms": d.server_cpu_raw_ms,
        "server_cpu_baseline_ms": d.server_cpu_base_ms,
        "cpu_ms_per_1000_events": d.cpu_per_1000,
        "apiserver_cpu_net_ms": d.api_cpu_net_ms,
        "bench_cpu_ms": d.bench_cpu_ms,
        "phase_secs": c.phase_secs,
        "baseline_secs": c.baseline_secs,
        "write_syscalls_per_event": d.syscw_per_event,
        "bytes_written_per_event": d.bytes_per_event,
        "write_syscalls_per_connection_change": d.syscw_per_conn_write,
        "encodes": d.encodes,
        "encodes_expected": c.writes.ok() as f64 * VARIANTS,
        "encodes_by_variant": c.encodes.as_ref().map(|e| e.iter().map(|(l, v)| json!({"labels": l, "delta": v})).collect::<Vec<_>>()),
        "watchmux_deliveries": c.wm_deliveries,
        "watchmux_terminated": c.wm_terminated,
        "watchmux_fanout_ms": c.fanout.iter().map(|f| json!({
            "stage": f.stage, "events": f.events, "p50": f.p50 * 1e3, "p99": f.p99 * 1e3,
        })).collect::<Vec<_>>(),
    })
}

pub fn json(bench: &Bench, sides: &[SideResult], skipped: &[Skipped]) -> serde_json::Value {
    json!({
        "scenario": "fanout",
        "n": bench.cfg.n,
        "shape": bench.cfg.shape.name(),
        // kube-apiserver always serves TLS; watchmux does with FANOUT_TLS=1.
        "watchmux_tls": bench.api.proxy_tls.is_some(),
        "skipped": skipped.iter().map(|s| json!({"rate": s.rate, "size": s.size, "why": s.why})).collect::<Vec<_>>(),
        "sides": sides.iter().map(|s| json!({
            "side": s.kind.name(),
            "connections": s.connections,
            "per_connection": s.per_conn,
            "opened": s.opened,
            "failed": s.failed,
            "open_secs": s.open_secs,
            "rss_before": s.rss_before,
            "rss_after": s.rss_after,
            "rss_per_idle_watcher_kib": s.rss_per_watcher_kib(),
            "apiserver_rss_delta": s.api_rss_after as f64 - s.api_rss_before as f64,
            "apiserver_heap_delta": s.api_heap_after - s.api_heap_before,
            "apiserver_configmap_watches": [s.api_watches.0, s.api_watches.1],
            "duplicates": s.duplicates,
            "ended_early": s.ended_early,
            "resumed": s.resumed,
            "watchers_resumed": s.watchers_resumed,
            "stream_errors": s.stream_errors.len(),
            "error_events": s.error_events,
            "cells": bench.cells.iter().zip(&s.cells).map(|(p, c)| cell_json(p, s, c)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
