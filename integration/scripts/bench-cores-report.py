#!/usr/bin/env python3
"""make bench-cores' summary: one core against two, from the run's files.

Usage: bench-cores-report.py <.run/bench-cores>

Reads what integration/scripts/bench-cores.sh left there (ingest-<cores>-u<n>.json,
storm-<cores>.json, threads-storm-<cores>.json, side-<part>-<cores>.json,
perf-deliveries-top.txt), prints the Markdown summary and writes cores.json:
per part and side the throughput, watchmux's CPU, throughput per CPU-second,
the busiest thread's share of a core and the load average, then the ratios
two cores / one core. Throughput per CPU-second that stays flat from one core
to two says the work spread; one that falls says something serializes or
contends, and the busiest thread at a whole core says one task does.
"""

import glob
import json
import os
import sys

SIDES = [("0", "one core"), ("0to1", "two cores")]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def deliveries_side(logs, tag):
    """The open-throttle phase of the ingest run on these cores."""
    files = sorted(glob.glob(os.path.join(logs, f"ingest-{tag}-u*.json")))
    run = load(files[0]) if files else None
    if not run:
        return None
    phase = run["phases"][-1]
    delivered = phase["received_kubelets"] + phase["received_unselected"]
    threads = phase.get("watchmux_threads", [])
    return {
        "events": phase["events"],
        "unselected_watchers": run["unselected_watchers"],
        "connections": run["connections"],
        "deliveries": delivered,
        "complete": phase["complete"],
        "seconds": round(phase["secs"], 2),
        "deliveries_per_s": round(phase["deliveries_rate"]),
        "applied_per_s": phase["applied_rate"],
        "watchmux_cpu_s": round(phase["watchmux_cpu_secs"], 2),
        "watchmux_cores": round(phase["watchmux_cores"], 3),
        "per_cpu_second": round(delivered / phase["watchmux_cpu_secs"]) if phase["watchmux_cpu_secs"] else None,
        "bench_cores": round(phase["bench_cores"], 3),
        "watchmux_waited": round(phase["watchmux_waited"], 3),
        "threads": [{k: t[k] for k in ("name", "core_share", "waited_share")} for t in threads],
        "busiest_thread_share": round(threads[0]["core_share"], 3) if threads else None,
    }


def storm_side(logs, tag):
    """The watch-list storm through the tier on these cores."""
    run = load(os.path.join(logs, f"storm-{tag}.json"))
    if not run or not run.get("storms"):
        return None
    s = run["storms"][0]
    sampled = load(os.path.join(logs, f"threads-storm-{tag}.json")) or {}
    proc = sampled.get("process") or {}
    window = proc.get("window") or {}
    clients = ((load(os.path.join(logs, f"threads-storm-clients-{tag}.json")) or {}).get("process") or {}).get("window") or {}
    last_s = s["synced_ms"]["max"] / 1e3
    return {
        "kubelets": s["kubelets"],
        "synced": s["synced"],
        "failed": s["failed"],
        "last_synced_s": round(last_s, 2),
        "p50_synced_s": round(s["synced_ms"]["p50"] / 1e3, 2),
        "kubelets_per_s": round(s["synced"] / last_s, 1) if last_s else None,
        "watchmux_cpu_s": round(s["watchmux_cpu_s"], 2),
        "watchmux_cores": round(s["watchmux_cpu_s"] / last_s, 3) if last_s else None,
        "per_cpu_second": round(s["synced"] / s["watchmux_cpu_s"], 1) if s["watchmux_cpu_s"] else None,
        "initial_bytes": s["initial_bytes"],
        "busiest_window": window,
        "busiest_thread_share": window.get("busiest_thread_share"),
        "clients_busiest_window_cores": clients.get("cores"),
        "world": run.get("world"),
    }


def ratio(two, one, key):
    if not one or not two or not one.get(key) or two.get(key) is None:
        return None
    return round(two[key] / one[key], 2)


def fmt(v, digits=0):
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def threads_text(threads, limit=4):
    return ", ".join(f"{t['core_share']:.2f}" for t in threads[:limit]) or "–"


def main():
    logs = sys.argv[1]
    result = {"parts": {}}
    for part, read in (("deliveries", deliveries_side), ("storm", storm_side)):
        sides = {}
        for tag, _ in SIDES:
            side = read(logs, tag)
            if side is None:
                continue
            side["load"] = load(os.path.join(logs, f"side-{part}-{tag}.json"))
            sides[tag] = side
        if sides:
            result["parts"][part] = sides
    d = result["parts"].get("deliveries", {})
    s = result["parts"].get("storm", {})
    if d:
        one, two = d.get("0"), d.get("0to1")
        result["deliveries_ratio"] = ratio(two, one, "deliveries_per_s")
        result["deliveries_per_cpu_second_ratio"] = ratio(two, one, "per_cpu_second")
        print("### Deliveries a second, one core against two (the ingest bench's open throttle)")
        print()
        print("| watchmux on | deliveries / s | watchmux CPU, cores | deliveries per CPU-second | its threads' shares of a core | waited for a CPU | bench CPU, cores | load average start / end |")
        print("|---|---|---|---|---|---|---|---|")
        for tag, title in SIDES:
            x = d.get(tag)
            if x:
                ld = x["load"] or {}
                print(f"| {title} | {fmt(x['deliveries_per_s'])}{'' if x['complete'] else ' (incomplete)'} | {x['watchmux_cores']:.2f} | "
                      f"{fmt(x['per_cpu_second'])} | {threads_text(x['threads'])} | {x['watchmux_waited'] * 100:.0f} % | "
                      f"{x['bench_cores']:.2f} | {ld.get('load_start', '–')} / {ld.get('load_end', '–')} |")
        print()
        print(f"Two cores / one: {fmt(result['deliveries_ratio'], 2)} raw (goal 1.8), "
              f"{fmt(result['deliveries_per_cpu_second_ratio'], 2)} per CPU-second (1.0: the work spread).")
        print()
    if s:
        one, two = s.get("0"), s.get("0to1")
        result["storm_ratio"] = ratio(one, two, "last_synced_s")
        result["storm_per_cpu_second_ratio"] = ratio(two, one, "per_cpu_second")
        print("### A watch-list storm through the tier, one core against two")
        print()
        print("| tier on | synced / failed | last synced after, s (p50) | tier CPU, s; cores while it lasted | kubelets per CPU-second | busiest 2 s: cores; its threads' shares | the kubelets' busiest 2 s, cores | load average start / end |")
        print("|---|---|---|---|---|---|---|---|")
        for tag, title in SIDES:
            x = s.get(tag)
            if x:
                ld = x["load"] or {}
                w = x["busiest_window"] or {}
                print(f"| {title} | {x['synced']:,} / {x['failed']} | {x['last_synced_s']:.1f} ({x['p50_synced_s']:.1f}) | "
                      f"{x['watchmux_cpu_s']:.1f}; {fmt(x['watchmux_cores'], 2)} | {fmt(x['per_cpu_second'], 0)} | "
                      f"{fmt(w.get('cores'), 2)}; {threads_text(w.get('threads', []))} | {fmt(x['clients_busiest_window_cores'], 2)} | "
                      f"{ld.get('load_start', '–')} / {ld.get('load_end', '–')} |")
        print()
        print(f"Two cores / one: {fmt(result['storm_ratio'], 2)} faster to the last kubelet synced (goal 1.8), "
              f"{fmt(result['storm_per_cpu_second_ratio'], 2)} kubelets per CPU-second (1.0: the work spread).")
        print()
    top = os.path.join(logs, "perf-deliveries-top.txt")
    if os.path.exists(top):
        with open(top) as f:
            result["perf_deliveries_top"] = [line.rstrip() for line in f][:40]
    with open(os.path.join(logs, "cores.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
