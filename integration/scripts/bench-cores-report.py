#!/usr/bin/env python3
"""make bench-cores' summary: one core against two, from the run's files.

Usage: bench-cores-report.py <.run/bench-cores>

Reads what integration/scripts/bench-cores.sh left there (ingest-<cores>-u<n>.json,
storm-<cores>.json, threads-storm[-clients]-<cores>.json, side-<part>-<cores>.json,
perf-<load>-{top,threads}.txt), prints the Markdown summary and writes cores.json:
per load and side the throughput, watchmux's CPU, throughput per CPU-second,
each thread's share of a core and its wait for one, and the load average;
the ratios two cores / one core; and per profile the share of the work in
the cache's one reflector task, with the bound it puts on two cores.

Throughput per CPU-second that stays flat from one core to two says the work
spread (a fall: contention). On a machine shared with other load, every
thread stays runnable whatever serializes it, so it is the profile's serial
share that says what two cores could give at most.
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


def deliveries_side(logs, tag, unselected):
    """The open-throttle phase of the ingest run on these cores."""
    run = load(os.path.join(logs, f"ingest-{tag}-u{unselected}.json"))
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
        "runnable_cores": runnable(threads),
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
        "runnable_cores": runnable(window.get("threads", [])),
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
    """Each thread's share of a core, and in brackets the share it waited runnable."""
    return ", ".join(f"{t['core_share']:.2f} ({t['waited_share']:.2f})" for t in threads[:limit]) or "–"


def runnable(threads):
    """Cores the threads were runnable on, running or waiting for a CPU: what
    they would have used with the cores to themselves."""
    return round(sum(t["core_share"] + t["waited_share"] for t in threads), 3) if threads else None


def load_text(x):
    ld = x["load"] or {}
    return f"{ld.get('load_start', '–')} / {ld.get('load_end', '–')}"


# Per part: its title, the columns (header, cell of a side), the throughput
# the raw ratio is of (a time is inverted), and what the ratio says.
PARTS = {
    "deliveries": (
        "Deliveries a second, one core against two (the ingest bench's open throttle): {what}",
        [("deliveries / s", lambda x: fmt(x["deliveries_per_s"]) + ("" if x["complete"] else " (incomplete)")),
         ("watchmux CPU, cores", lambda x: f"{x['watchmux_cores']:.2f}"),
         ("deliveries per CPU-second", lambda x: fmt(x["per_cpu_second"])),
         ("its threads: share of a core (waiting for one)", lambda x: threads_text(x["threads"])),
         ("runnable, cores", lambda x: fmt(x["runnable_cores"], 2)),
         ("bench CPU, cores", lambda x: f"{x['bench_cores']:.2f}")],
        "deliveries_per_s", False, "deliveries a second",
    ),
    "storm": (
        "A watch-list storm through the tier, one core against two",
        [("synced / failed", lambda x: f"{x['synced']:,} / {x['failed']}"),
         ("last synced after, s (p50)", lambda x: f"{x['last_synced_s']:.1f} ({x['p50_synced_s']:.1f})"),
         ("tier CPU, s; cores while it lasted", lambda x: f"{x['watchmux_cpu_s']:.1f}; {fmt(x['watchmux_cores'], 2)}"),
         ("kubelets per CPU-second", lambda x: fmt(x["per_cpu_second"])),
         ("busiest 4 s, its threads: share of a core (waiting for one)",
          lambda x: threads_text((x["busiest_window"] or {}).get("threads", []))),
         ("runnable, cores", lambda x: fmt(x["runnable_cores"], 2)),
         ("the kubelets' busiest 2 s, cores", lambda x: fmt(x["clients_busiest_window_cores"], 2))],
        "last_synced_s", True, "faster to the last kubelet synced",
    ),
}


def report(result, part, kind, sides, what=""):
    """Prints one part's table and ratios, and puts the ratios in `result`."""
    title, columns, key, inverse, what_ratio = PARTS[kind]
    title = title.format(what=what)
    one, two = sides.get("0"), sides.get("0to1")
    ratios = {
        "raw": ratio(one, two, key) if inverse else ratio(two, one, key),
        "per_cpu_second": ratio(two, one, "per_cpu_second"),
        "runnable_cores": ratio(two, one, "runnable_cores"),
    }
    result[f"{part}_ratios"] = ratios
    print(f"### {title}")
    print()
    print("| watchmux on | " + " | ".join(h for h, _ in columns) + " | load average start / end |")
    print("|---" * (len(columns) + 2) + "|")
    for tag, side_title in SIDES:
        if tag in sides:
            x = sides[tag]
            print(f"| {side_title} | " + " | ".join(cell(x) for _, cell in columns) + f" | {load_text(x)} |")
    print()
    print(f"Two cores / one: {fmt(ratios['raw'], 2)} {what_ratio} (goal 1.8); {fmt(ratios['per_cpu_second'], 2)} per "
          f"CPU-second (1.0: the work spread); {fmt(ratios['runnable_cores'], 2)} cores runnable (2.0: both "
          "workers had work the whole time).")
    print()


# Where a profile's samples went, by the frame each kind of task polls from
# (inclusive shares: the frame and everything it calls). The reflector is one
# task a cache: its share of two cores is the part that cannot spread.
WHERE = [
    ("the cache's reflector task (one a cache: reads the upstream watch, applies each event, offers it)", "run_cache"),
    ("HTTP/2 connections (one task each: framing, flow control, socket writes)",
     "h2::proto::connection::Connection<T,P,B>::poll"),
    ("watch streams (one task each: the events' bytes into h2)",
     "hyper::proto::h2::server::H2Stream<F,B,Ex> as core::future::future::Future>::poll"),
    ("TLS (rustls, both directions)", "rustls::"),
]


def profiles(logs, result):
    """Each perf profile's shares by kind of task, printed and kept in
    `result`, with the bound the reflector's share puts on two cores: it is
    one task, so with a share s of the work it can use one core at most,
    and the rest overlaps it (the streams serve event n while it applies
    n + 1): two cores give at most min(2, 1 / s) times one core's
    throughput (s below the listing: 2)."""
    for path in sorted(glob.glob(os.path.join(logs, "perf-*-top.txt"))):
        name = os.path.basename(path)[len("perf-"):-len("-top.txt")]
        with open(path) as f:
            lines = [line.rstrip() for line in f]
        shares = []
        for what, needle in WHERE:
            found = [float(line.split("%")[0]) for line in lines if needle in line]
            shares.append({"what": what, "frame": needle, "share": max(found) / 100 if found else None})
        serial = shares[0]["share"] or 0.0
        bound = round(min(2.0, 1 / serial) if serial > 0 else 2.0, 2)
        threads = []
        threads_path = os.path.join(logs, f"perf-{name}-threads.txt")
        if os.path.exists(threads_path):
            with open(threads_path) as f:
                threads = [line.strip() for line in f if line.strip()]
        result.setdefault("profiles", {})[name] = {
            "where": shares, "two_cores_at_most": bound, "threads": threads, "top": [line[:200] for line in lines[:40]],
        }
        print(f"Profile {name} (two cores, a run of its own): " + "; ".join(
            f"{s['what'].split(' (')[0]} {s['share'] * 100:.1f} %" for s in shares if s["share"] is not None)
            + (f"; samples by thread {', '.join(t.split()[0] for t in threads)}" if threads else "")
            + f". Two cores give at most {bound:.2f} times one (the reflector's share serial).")
        print()


def deliveries_what(unselected):
    if unselected == 0:
        return "1,000 kubelets alone, one delivery an event (the ingest ceiling)"
    return f"1,000 kubelets and {unselected} watchers of every pod, {unselected + 1} deliveries an event"


def main():
    logs = sys.argv[1]
    result = {"parts": {}}
    unselected_found = sorted(
        (int(os.path.basename(p).split("-u")[1].split(".")[0]) for p in glob.glob(os.path.join(logs, "ingest-0-u*.json"))),
        reverse=True,
    )
    parts = [(f"deliveries-u{u}", "deliveries", lambda tag, u=u: deliveries_side(logs, tag, u), deliveries_what(u))
             for u in unselected_found]
    parts.append(("storm", "storm", lambda tag: storm_side(logs, tag), ""))
    for part, kind, read, what in parts:
        sides = {}
        for tag, _ in SIDES:
            side = read(tag)
            if side is None:
                continue
            side["load"] = load(os.path.join(logs, f"side-{part}-{tag}.json"))
            sides[tag] = side
        if sides:
            result["parts"][part] = sides
            report(result, part, kind, sides, what)
    profiles(logs, result)
    with open(os.path.join(logs, "cores.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
