#!/usr/bin/env python3
"""Plots of the benchmark results: reads the JSON the benches wrote to
.run/bench-{fanout,kubelet,restart,scale,ingest,million,upgrade,rebalance,rollout,cores,table}/ (bench-scale's sweep-*.json and alloc-*.json too) and writes PNGs to docs/img/, and the
headline tables to .run/bench-summary.md.

Usage: bench-plots.py [run dir] [image dir]   (defaults: .run, docs/img)

Run by integration/scripts/bench-plots.sh with matplotlib from a venv under
.run/. A scenario without results is skipped (said on stderr).
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

RUN = sys.argv[1] if len(sys.argv) > 1 else ".run"
OUT = sys.argv[2] if len(sys.argv) > 2 else "docs/img"
COLORS = {"direct": "#d62728", "watchmux": "#1f77b4", "nodelocal": "#2ca02c"}
LABELS = {"direct": "straight at kube-apiserver", "watchmux": "through watchmux",
          "nodelocal": "node-locals in front of the tier"}


def load(pattern):
    out = []
    for path in sorted(glob.glob(os.path.join(RUN, pattern))):
        with open(path) as f:
            out.append(json.load(f))
    return out


def size_label(b):
    return f"{b / 1024:.0f} KiB" if b >= 1024 else f"{b} B"


def save(fig, name):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"bench-plots: {path}")


def fanout_cells(runs):
    """(config label, cell label, side, cell dict), in run order."""
    rows = []
    for r in sorted(runs, key=lambda r: (r["shape"] != "h2", r["n"])):
        conf = f"N={r['n']:,} {r['shape']}"
        for s in r["sides"]:
            for c in s["cells"]:
                rows.append((conf, f"{c['rate']}/s\n{size_label(c['size'])}", s["side"], c))
    return rows


def shortfall(rows, conf, cell):
    """The rates the sides reached in one cell, when one fell short of the rate asked.

    A cell is asked for at one rate; when the writer or the server falls behind,
    the rate reached is lower, and a bar is only comparable with its neighbour
    at the rates they both reached, so the label says so; None when both
    reached the rate asked (within 5%).
    """
    got = {sd: c for cf, cl, sd, c in rows if (cf, cl) == (conf, cell)}
    asked = next(iter(got.values()))["rate"]
    reached = {sd: c.get("achieved_rate") for sd, c in got.items()}
    if all(v is not None and v >= 0.95 * asked for v in reached.values()):
        return None
    f = lambda v: "–" if v is None else f"{v:.0f}"  # noqa: E731
    return f"reached {f(reached.get('direct'))} / {f(reached.get('watchmux'))}"


def grouped_bars(fig, rows, value, ylabel, title, target=None, target_label=None):
    """One panel per configuration (N and connection shape), the cells of that
    configuration side by side inside it, a shared log axis with plain numbers.

    A value that is missing or not above zero (a CPU figure net of a baseline
    noisier than the effect) gets no bar but a "n/a" at the bottom: a log axis
    cannot draw it, and a negative bar would claim a negative cost.
    """
    confs = []
    for conf, _, _, _ in rows:
        if conf not in confs:
            confs.append(conf)
    cells_of = {conf: [] for conf in confs}
    for conf, cell, _, _ in rows:
        if cell not in cells_of[conf]:
            cells_of[conf].append(cell)
    widths = [max(1, len(cells_of[c])) for c in confs]
    axes = fig.subplots(1, len(confs), sharey=True, gridspec_kw={"width_ratios": widths}, squeeze=False)[0]
    width = 0.4
    for ax, conf in zip(axes, confs):
        cells = cells_of[conf]
        missing = []
        for i, side in enumerate(["direct", "watchmux"]):
            xs, ys = [], []
            for k, cell in enumerate(cells):
                for cf, cl, sd, c in rows:
                    if (cf, cl) == (conf, cell) and sd == side:
                        v = value(c)
                        x = k + (i - 0.5) * width
                        if v is not None and v > 0:
                            xs.append(x)
                            ys.append(v)
                        else:
                            missing.append((x, side))
            ax.bar(xs, ys, width, color=COLORS[side], label=LABELS[side])
        ax.set_xticks(range(len(cells)))
        labels = []
        for cell in cells:
            short = shortfall(rows, conf, cell)
            labels.append(cell if short is None else f"{cell}\n{short}")
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_xlim(-0.6, len(cells) - 0.4)
        ax.set_yscale("log")
        ax.set_title(conf, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        if target is not None:
            ax.axhline(target, color="k", ls="--", lw=1, label=target_label)
        ax._missing = missing
    # Plain numbers on the log axis (2, 5, 10, 20...), not 10^1.
    axes[0].yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axes[0].yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axes[0].yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for ax in axes:
        bottom = ax.get_ylim()[0]
        for x, side in ax._missing:
            ax.text(x, bottom, " n/a", rotation=90, va="bottom", ha="center", fontsize=7, color=COLORS[side])
    axes[0].set_ylabel(ylabel)
    axes[-1].legend(fontsize=8)
    fig.suptitle(title)
    fig.text(0.5, 0.005, "change rate and object size per cell; "
             "\"reached d / w\": the rates direct and watchmux reached, where one fell short",
             ha="center", fontsize=7)


def side_bars(ax, groups, value, labels):
    """Bars for each side over `groups` (run results), `value(side result)` each.

    A figure net of a baseline can come out below zero when the baseline's
    noise is larger than the effect: no bar then (a negative cost would be
    drawn), but "≈0" at the axis, and the axis starts at zero.
    """
    for i, side in enumerate(["direct", "watchmux"]):
        xs, ys, zeros = [], [], []
        for k, r in enumerate(groups):
            for s in r["sides"]:
                if s["side"] == side and value(s) is not None:
                    x = k + (i - 0.5) * 0.4
                    if value(s) > 0:
                        xs.append(x)
                        ys.append(value(s))
                    else:
                        zeros.append(x)
        ax.bar(xs, ys, 0.4, color=COLORS[side], label=LABELS[side])
        for x in zeros:
            ax.text(x, 0, "≈0", va="bottom", ha="center", fontsize=8, color=COLORS[side])
    ax.set_ylim(bottom=0)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(labels)
    ax.grid(axis="y", alpha=0.3)


def plot_fanout(runs):
    rows = fanout_cells(runs)
    if not rows:
        return
    tls = " (both sides over TLS)" if any(r.get("watchmux_tls") for r in runs) else ""
    fig = plt.figure(figsize=(11, 4.4))
    grouped_bars(fig, rows, lambda c: c["cpu_ms_per_1000_events"], "server CPU per 1,000 delivered events, ms\n(lower is better)",
                 f"Fan-out: CPU of the serving process per 1,000 events, net of the writes' own cost{tls}")
    save(fig, "bench-fanout-cpu.png")

    fig = plt.figure(figsize=(11, 4.4))
    grouped_bars(fig, rows, lambda c: c["latency_ack_ms"]["p99"], "p99, write acknowledged → received, ms\n(lower is better)",
                 f"Fan-out: delivery latency p99{tls}", target=50, target_label="target: 50 ms")
    save(fig, "bench-fanout-latency.png")

    fig = plt.figure(figsize=(11, 4.4))
    grouped_bars(fig, rows, lambda c: c["write_syscalls_per_event"], "write system calls per delivered event\n(lower is better)",
                 f"Fan-out: write system calls (syscw) per delivered event{tls}", target=1, target_label="one per event")
    save(fig, "bench-fanout-syscalls.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    confs = sorted(runs, key=lambda r: (r["shape"] != "h2", r["n"]))
    side_bars(ax, confs, lambda s: s["rss_per_idle_watcher_kib"], [f"N={r['n']:,} {r['shape']}" for r in confs])
    ax.axhline(8, color="k", ls="--", lw=1, label="target: 8 KiB")
    ax.set_ylabel("resident memory per idle watcher, KiB\n(lower is better)")
    ax.set_title("Fan-out: memory per idle watcher (RSS growth / N)")
    ax.legend(fontsize=8)
    save(fig, "bench-fanout-memory.png")


def plot_kubelet(runs):
    if not runs:
        return
    runs = sorted(runs, key=lambda r: r["m"])
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    metrics = [
        ("kube-apiserver WATCHes held\n(lower is better)", lambda s: s["apiserver_watches_open"]),
        ("kube-apiserver CPU while the kubelets start, ms\n(lower is better)",
         lambda s: s.get("apiserver_cpu_start_ms")),
        ("kube-apiserver CPU over the writes, net, ms\n(lower is better)", lambda s: s["apiserver_cpu_net_ms"]),
    ]
    for ax, (title, f) in zip(axes, metrics):
        side_bars(ax, runs, f, [f"M={r['m']:,}" for r in runs])
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.suptitle("Kubelet-shaped load: M kubelets × 5 list+watches")
    save(fig, "bench-kubelet.png")


def plot_restart(runs):
    if not runs:
        return
    r = max(runs, key=lambda r: r["n"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    verbs = sorted({v for s in r["sides"] for v, _ in s["apiserver_configmap_requests_by_verb"]})
    for i, s in enumerate(r["sides"]):
        counts = dict(s["apiserver_configmap_requests_by_verb"])
        xs = [k + (i - 0.5) * 0.4 for k in range(len(verbs))]
        axes[0].bar(xs, [counts.get(v, 0) for v in verbs], 0.4, color=COLORS[s["side"]], label=LABELS[s["side"]])
    axes[0].set_xticks(range(len(verbs)))
    axes[0].set_xticklabels(verbs)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("configmaps requests to the new kube-apiserver\n(lower is better)")
    axes[0].set_title(f"Requests reaching kube-apiserver after its restart, N={r['n']:,}", fontsize=10)
    axes[0].grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    for s in r["sides"]:
        lat = s["from_marker_ms"]
        xs = [lat["p50"], lat["p99"], lat["max"]]
        if None in xs:
            continue
        axes[1].bar([k + (0.2 if s["side"] == "watchmux" else -0.2) for k in range(3)], xs, 0.4,
                    color=COLORS[s["side"]], label=LABELS[s["side"]])
    axes[1].set_xticks(range(3))
    axes[1].set_xticklabels(["p50", "p99", "max"])
    axes[1].set_yscale("log")
    axes[1].set_ylabel("ms after the first post-restart write was acknowledged\n(lower is better)")
    axes[1].set_title("Until each watcher has seen the first write after the restart", fontsize=10)
    axes[1].grid(axis="y", alpha=0.3)
    axes[1].legend(fontsize=8)
    save(fig, "bench-restart.png")


def plot_upgrade(runs):
    """bench-upgrade: one file per side; the largest N's pair, step by step."""
    runs = [r for r in runs if r.get("scenario") == "upgrade"]
    if not runs:
        return
    n = max(r["n"] for r in runs)
    sides = {s["side"]: s for r in runs if r["n"] == n for s in r["sides"]}
    steps = max(len(s["steps"]) for s in sides.values())
    labels = ["before" if k == 0 else f"server {k}\nupgraded" for k in range(steps)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, side in enumerate(["direct", "watchmux"]):
        s = sides.get(side)
        if not s:
            continue
        xs = [k + (i - 0.5) * 0.4 for k in range(len(s["steps"]))]
        lost = s["events_vs_etcd"]["lost"] if s.get("events_vs_etcd") else "?"
        broken = [st["streams_broken"] for st in s["steps"]]
        # The time until every watcher had the write after the step (an event
        # can arrive before the write's own answer: 0).
        waited = [st["from_marker_ms"]["max"] or 0 for st in s["steps"]]
        axes[0].bar(xs, broken, 0.4, color=COLORS[side], label=f"{LABELS[side]} ({lost} events lost vs etcd)")
        axes[1].bar(xs, waited, 0.4, color=COLORS[side], label=LABELS[side])
        for ax, ys, zero in ((axes[0], broken, "0"), (axes[1], waited, "≈0")):
            for x, y in zip(xs, ys):
                if y < 0.5:
                    ax.text(x, 0, zero, va="bottom", ha="center", fontsize=8, color=COLORS[side])
        for x, y, st in zip(xs, waited, s["steps"]):
            if st["current"] < n:
                axes[1].text(x, y, "not all", ha="center", va="bottom", fontsize=7)
    for ax in axes:
        ax.set_xticks(range(steps))
        ax.set_xticklabels(labels, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("watch streams broken during the step\n(lower is better)")
    axes[0].set_title(f"Rolling upgrade 1.36 → 1.37, N={n:,}: streams broken", fontsize=10)
    axes[0].legend(fontsize=8)
    axes[1].set_ylabel("ms after the step's write was acknowledged\n(lower is better)")
    axes[1].set_title("Until every watcher has the write after each step", fontsize=10)
    save(fig, "bench-upgrade.png")


def plot_scale(runs):
    """bench-scale's runs (one per world size): time to synced and
    kube-apiserver's CPU by storm mode and side, and memory by object count."""
    runs = sorted(runs, key=lambda r: r["world"]["nodes"])
    storms = [(r, s) for r in runs for s in r.get("storms", [])]
    if storms:
        modes = [m for m in ("watch-list", "classic") if any(s["mode"] == m for _, s in storms)]
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
        for ax, (title, value, log) in zip(axes, [
            ("time until every kubelet is synced, s\n(bar: p50, tick: max; lower is better)",
             lambda s: s["synced_ms"]["p50"] / 1000, False),
            ("kube-apiserver CPU during the storm, s\n(lower is better, log scale)", lambda s: s["apiserver_cpu_s"], True),
        ]):
            groups = [(r, m) for r in runs for m in modes if any(s["mode"] == m for s in r.get("storms", []))]
            sides = [side for side in ("direct", "watchmux", "nodelocal") if any(s["side"] == side for _, s in storms)]
            width = 0.8 / len(sides)
            for i, side in enumerate(sides):
                labelled = False
                for k, (r, m) in enumerate(groups):
                    for s in r.get("storms", []):
                        if s["mode"] == m and s["side"] == side:
                            x = k + (i - (len(sides) - 1) / 2) * width
                            v = max(value(s), 0.01) if log else value(s)
                            ax.bar(x, v, width, color=COLORS[side], label=None if labelled else LABELS[side])
                            labelled = True
                            if not log:
                                ax.plot([x - width * 0.4, x + width * 0.4], [s["synced_ms"]["max"] / 1000] * 2,
                                        color="k", lw=1)
            ax.set_xticks(range(len(groups)))
            ax.set_xticklabels([f"{m}\n{r['storms'][0]['kubelets']:,} kubelets" for r, m in groups], fontsize=8)
            if log:
                ax.set_yscale("log")
                ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
                ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            else:
                ax.set_ylim(bottom=0)
            ax.set_title(title, fontsize=10)
            ax.grid(axis="y", alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle("Kubelet storm: every kubelet's collections started at one instant")
        save(fig, "bench-scale-storm.png")
    mem = [r for r in runs if r.get("memory")]
    if mem:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        xs = [r["memory"]["objects"] for r in mem]
        series = [
            ("watchmux RSS growth", lambda m: m["watchmux_rss"] - m["watchmux_rss_empty"] if m.get("watchmux_rss_empty") is not None else None,
             COLORS["watchmux"], "-"),
            ("watchmux RSS growth, protobuf forms kept",
             lambda m: m["watchmux_rss_after_protobuf_list"] - m["watchmux_rss_empty"] if m.get("watchmux_rss_empty") is not None else None,
             COLORS["watchmux"], "--"),
            ("kube-apiserver Go heap growth",
             lambda m: m["apiserver_heap_inuse"] - m["apiserver_heap_inuse_before"] if m.get("apiserver_heap_inuse_before") is not None else None,
             COLORS["direct"], "-"),
            ("the objects' JSON", lambda m: m["json_bytes"], "grey", ":"),
        ]
        for label, f, color, ls in series:
            pts = [(x, f(r["memory"])) for x, r in zip(xs, mem) if f(r["memory"]) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] / 2**20 for p in pts], ls, marker="o", color=color, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("cached objects (pods, nodes, services, EndpointSlices, ConfigMaps, Secrets)")
        ax.set_ylabel("MiB (lower is better)")
        ax.set_title("Memory by object count")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        save(fig, "bench-scale-memory.png")


def plot_limit(runs):
    """bench-scale-sweep's steps: one tier, a rising number of kubelets,
    each world (its node count) a line of its own. Where it stops keeping
    up: time to synced, the tier's CPU against what two cores give in that
    time, and its peak RSS."""
    steps = [(r["world"]["nodes"], s) for r in runs for s in r.get("storms", []) if s["side"] == "watchmux"]
    if not steps:
        return
    worlds = sorted({n for n, _ in steps})
    modes = [m for m in ("watch-list", "classic") if any(s["mode"] == m for _, s in steps)]
    styles = {"watch-list": "-", "classic": "--"}
    markers = ["o", "s", "^", "D"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for w, nodes in enumerate(worlds):
        for m in modes:
            pts = sorted((s for n, s in steps if n == nodes and s["mode"] == m), key=lambda s: s["kubelets"])
            if not pts:
                continue
            xs = [s["kubelets"] for s in pts]
            tag = f"{m}, {nodes:,} nodes"
            mk = markers[w % len(markers)]
            axes[0].plot(xs, [s["synced_ms"]["max"] / 1000 for s in pts], styles[m], marker=mk,
                         color=COLORS["watchmux"], label=f"{tag}: last kubelet")
            axes[0].plot(xs, [s["synced_ms"]["p50"] / 1000 for s in pts], styles[m], marker=mk, ms=3,
                         color="grey", label=f"{tag}: p50")
            # The tier's CPU as a share of what two cores give while the
            # storm lasts (until its last kubelet synced): 100% is the machine.
            span = [2 * s["synced_ms"]["max"] / 1000 for s in pts]
            axes[1].plot(xs, [100 * s["watchmux_cpu_s"] / t for s, t in zip(pts, span)], styles[m], marker=mk,
                         color=COLORS["watchmux"], label=f"{tag}: the tier")
            axes[1].plot(xs, [100 * s["apiserver_cpu_s"] / t for s, t in zip(pts, span)], styles[m], marker=mk,
                         color=COLORS["direct"], label=f"{tag}: kube-apiserver")
            axes[2].plot(xs, [s["watchmux_rss_peak"] / 2**20 for s in pts], styles[m], marker=mk,
                         color=COLORS["watchmux"], label=f"{tag}: peak")
    titles = ["time to synced, s (lower is better)",
              "CPU during the storm, % of the machine's 2 cores",
              "the tier's peak RSS, MiB"]
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("kubelets started at one instant")
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    axes[1].axhline(100, color="k", lw=0.8)
    fig.suptitle("One watchmux tier on 2 cores, the storm's clients beside it: where it stops keeping up")
    save(fig, "bench-scale-limit.png")


def plot_alloc(runs):
    """bench-alloc's storms, one line an allocator: the tier's RSS with its
    caches synced, at the storm's peak and for a minute after the last
    kubelet synced, against the steady state of the same kubelets started
    a few at a time (dashed)."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    palette = {"system": "#d62728", "jemalloc": "#1f77b4", "mimalloc": "#2ca02c"}
    mib = 1024 * 1024
    for r in sorted(runs, key=lambda r: r.get("allocator", "")):
        kind, start = r.get("allocator", "?"), r.get("start", "storm")
        storm = [s for s in r["storms"] if s["side"] == "watchmux"][0]
        color = palette.get(kind, "k")
        if start == "paced":
            steady = storm["watchmux_rss_release"][-1]["rss"] / mib
            ax.axhline(steady, color=color, ls="--", lw=0.8, label=f"{kind}: steady (paced start)")
            continue
        xs = [-10, 0, 5] + [x["s"] for x in storm["watchmux_rss_release"]]
        ys = [storm["watchmux_rss_before"], storm["watchmux_rss_peak"], storm["watchmux_rss_settled"]]
        ys = [y / mib for y in ys + [x["rss"] for x in storm["watchmux_rss_release"]]]
        ax.plot(xs, ys, "-o", color=color, ms=3, label=f"{kind}: the storm")
    ax.set_xlabel("seconds after the last kubelet synced (-10: before the storm, 0: its peak)")
    ax.set_ylabel("tier RSS, MiB")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle("Memory after a 2,000-kubelet watch-list storm, by allocator")
    save(fig, "bench-alloc.png")


def plot_ingest(runs):
    """bench-ingest's configurations (watchmux's cores, unselected watchers):
    per phase, the events a second watchmux applied, the same per second of
    its CPU (what a core of its own would give on a loaded machine), and the
    kubelets' lag from the upstream's write, against the issue's 100,000 a
    second on one core."""
    runs = sorted(runs, key=lambda r: (len(r["cpus"]), -r["unselected_watchers"]))
    phases = [p["name"] for p in runs[0]["phases"] if p["name"] != "warm-up"]
    width = 0.8 / len(runs)
    palette = ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for k, r in enumerate(runs):
        cores = "1 core" if r["cpus"] == "0" else f"cores {r['cpus']}"
        label = f"{cores}, {r['kubelet_watchers']:,} kubelets + {r['unselected_watchers']} unselected"
        by_name = {p["name"]: p for p in r["phases"]}
        xs = [i + (k - (len(runs) - 1) / 2) * width for i in range(len(phases))]
        pts = [by_name.get(n) for n in phases]
        color = palette[k % len(palette)]
        axes[0].bar(xs, [(p or {}).get("applied_rate") or 0 for p in pts], width, color=color, label=label)
        axes[1].bar(xs, [(p or {}).get("applied_per_watchmux_cpu_second") or 0 for p in pts], width,
                    color=color, label=label)
        axes[2].plot(range(len(phases)), [((p or {}).get("lag_kubelets_ms") or {}).get("p99") for p in pts],
                     "-o", color=color, label=f"{label}: p99")
        axes[2].plot(range(len(phases)), [((p or {}).get("lag_kubelets_ms") or {}).get("p50") for p in pts],
                     "--", marker=".", color=color, label=f"{label}: p50")
    titles = ["events applied a second", "events applied per second of watchmux's CPU",
              "kubelets' lag, upstream write to receipt, ms"]
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(len(phases)))
        ax.set_xticklabels([n if n == "open" else f"{int(n.split('/')[0]):,}/s" for n in phases])
        ax.set_xlabel("upstream rate asked")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=6)
    for ax in axes[:2]:
        ax.axhline(100_000, color="k", lw=0.8, ls=":")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    axes[2].set_yscale("log")
    fig.suptitle("One Pods cache fed as fast as it takes events (1 KiB objects); dotted: the goal, 100,000/s on one core")
    save(fig, "bench-ingest.png")


def plot_cores(runs):
    """bench-cores' summary (cores.json): per load, two cores against one,
    raw, per second of watchmux's CPU and the bound its profile's serial
    share (the cache's one reflector task) puts on it, against the goal of
    1.8; and watchmux's CPU on each side by thread, with the time its
    threads waited for a CPU the machine's other load held."""
    r = runs[-1]
    titles = {"deliveries-u100": "101 deliveries an event\n(1,000 kubelets + 100 of every pod)",
              "deliveries-u0": "one delivery an event\n(1,000 kubelets alone)",
              "storm": "5,000-kubelet\nwatch-list storm"}
    short = {"deliveries-u100": "101 deliveries", "deliveries-u0": "1 delivery", "storm": "storm"}
    parts = [p for p in ("deliveries-u100", "deliveries-u0", "storm") if p in r["parts"]]
    profile_of = {"deliveries-u100": "deliveries-u100", "deliveries-u0": "deliveries-u0", "storm": "storm"}
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.6))
    ax = axes[0]
    bars = (("raw, on this shared machine", "#1f77b4", lambda p: r[f"{p}_ratios"]["raw"]),
            ("per second of watchmux's CPU", "#aec7e8", lambda p: r[f"{p}_ratios"]["per_cpu_second"]),
            ("at most, from the profile's serial share", "#ff7f0e",
             lambda p: (r.get("profiles", {}).get(profile_of[p]) or {}).get("two_cores_at_most")))
    for k, (label, color, value) in enumerate(bars):
        xs = [i + (k - 1) * 0.27 for i in range(len(parts))]
        vals = [value(p) or 0 for p in parts]
        ax.bar(xs, vals, 0.27, color=color, label=label)
        for x, v in zip(xs, vals):
            ax.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(1.8, color="k", lw=0.8, ls=":", label="goal: 1.8")
    ax.axhline(1.0, color="#7f7f7f", lw=0.6)
    ax.set_xticks(range(len(parts)))
    ax.set_xticklabels([titles[p] for p in parts], fontsize=8)
    ax.set_ylim(0, 2.8)
    ax.set_title("two cores / one core", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    ax.grid(alpha=0.3, axis="y")
    ax = axes[1]
    labels = []
    for part in parts:
        for tag, side_title in (("0", "1 core"), ("0to1", "2 cores")):
            side = r["parts"][part].get(tag)
            if not side:
                continue
            threads = side["threads"] if part != "storm" else (side.get("busiest_window") or {}).get("threads", [])
            x, bottom = len(labels), 0.0
            for i, t in enumerate(threads):
                ax.bar(x, t["core_share"], 0.6, bottom=bottom, edgecolor="white", lw=0.5,
                       color=["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"][i % 4])
                bottom += t["core_share"]
            # The time its threads were runnable but waited for a CPU: what
            # the machine's other load took from it.
            waited = sum(t.get("waited_share", 0.0) for t in threads)
            ax.bar(x, waited, 0.6, bottom=bottom, color="none", edgecolor="#7f7f7f", hatch="//", lw=0.5,
                   label="runnable, waiting for a CPU" if not labels else None)
            load = (side.get("load") or {}).get("load_start")
            ax.text(x, bottom + waited, f"load {load}" if load is not None else "", ha="center", va="bottom", fontsize=7)
            labels.append(f"{short[part]}\n{side_title}")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("cores, one colour a thread")
    ax.set_title("watchmux's threads at the ceiling (load: the machine's load average)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Every core: watchmux on one core (clients on the other) against two (shared with the clients)")
    save(fig, "bench-cores.png")


def plot_rebalance(runs):
    """The last bench-rebalance run: each tier's replicas' open connections
    after the rollout, and their spread, (max - min) / mean."""
    d = runs[-1]["details"]
    tiers = [("on", "tier defaults (goaway chance 0.02, max age 5m)", "#1f77b4"),
             ("off", "both off", "#d62728")]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    for key, label, color in tiers:
        samples = d[key]["series"]["samples"]
        t = [s["t_s"] / 60 for s in samples]
        for i in range(len(samples[0]["connections"])):
            top.plot(t, [s["connections"][i] for s in samples], color=color, alpha=0.35 + 0.2 * i,
                     label=f"{label}: replica {i}")
        bottom.plot(t, [100 * s["spread"] for s in samples], color=color, marker=".", label=label)
    bottom.axhline(20, color="grey", linestyle="--", linewidth=1, label="within 20 %")
    top.set_ylabel("open connections per replica")
    top.set_title(f"After a rollout: {d['replicas']} replicas, {d['watchers_per_tier']:,} kubelet-shaped watchers "
                  f"a tier ({d['watches_per_connection']} a connection)", fontsize=10)
    top.legend(fontsize=7, ncol=2)
    bottom.set_ylabel("spread, (max - min) / mean, %")
    bottom.set_xlabel("minutes after the rollout")
    bottom.legend(fontsize=8)
    save(fig, "rebalance.png")


def plot_rollout(runs):
    """bench-rollout: one file per side (backfill, no-backfill, apiserver);
    the largest N's, each side's relists after the first sync and events
    lost against etcd's watch, reflectors and informers apart."""
    runs = [r for r in runs if r.get("scenario") == "rollout" and r.get("variant")]
    if not runs:
        return
    n = max(r["n"] for r in runs)
    order = ["backfill", "no-backfill", "apiserver"]
    by_side = {r["variant"]: r["sides"][0] for r in runs if r["n"] == n}
    sides = [v for v in order if v in by_side]
    titles = {"backfill": "tier rollout,\nwatchmux as built", "no-backfill": "tier rollout,\nbackfill off (before)",
              "apiserver": "kube-apiserver\nrestarted, no watchmux"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    groups = [("reflector-shaped watchers", "#1f77b4", 0), ("client-go informers", "#ff7f0e", 1)]

    def relists(s, who):
        if who == 0:
            return s["list_requests"]
        inf = s.get("informers") or {}
        return inf.get("lists_after_sync", 0) + inf.get("watch_lists_after_sync", 0)

    def lost(s, who):
        v = s.get("events_vs_etcd") if who == 0 else (s.get("informers") or {}).get("events_vs_etcd")
        return (v or {}).get("lost", 0)

    for ax, value, ylabel in ((axes[0], relists, "LISTs and watch-lists after the first sync"),
                              (axes[1], lost, "events lost against etcd's watch")):
        for label, color, who in groups:
            xs = [k + (who - 0.5) * 0.4 for k in range(len(sides))]
            ys = [value(by_side[v], who) for v in sides]
            ax.bar(xs, ys, 0.4, color=color, label=label)
            for x, y in zip(xs, ys):
                ax.text(x, y, f"{y:,}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(sides)))
        ax.set_xticklabels([titles[v] for v in sides], fontsize=8)
        ax.set_ylabel(f"{ylabel}\n(lower is better)")
        ax.grid(axis="y", alpha=0.3)
    informers = (by_side[sides[0]].get("informers") or {}).get("informers", 0)
    axes[0].set_title(f"N={n:,} watchers and {informers} informers: relists", fontsize=10)
    axes[0].legend(fontsize=8)
    axes[1].set_title("Events lost, checked against etcd", fontsize=10)
    save(fig, "bench-rollout.png")


def fmt(v, digits=1):
    return "–" if v is None else f"{v:,.{digits}f}"


def summary(fanout, kubelet, restart):
    """Headline tables (Markdown) of the results, against the issue's targets."""
    out = []
    if fanout:
        out += ["### Fan-out", "",
                "| N, connections | changes/s (achieved direct / watchmux) | object | CPU per 1,000 events, ms: "
                "direct / watchmux (ratio; target ≤ 0.20) | p99 ack → receipt, ms: direct / watchmux | "
                "lost: direct / watchmux (watches the server closed and the watcher resumed, over the whole side) | watchmux write syscalls "
                "per event | watchmux bytes written per event | encodes = changes × 1 |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(fanout, key=lambda r: (r["shape"] != "h2", r["n"])):
            sides = {s["side"]: s for s in r["sides"]}
            d, w = sides.get("direct"), sides.get("watchmux")
            if not d or not w:
                continue
            for cd, cw in zip(d["cells"], w["cells"]):
                a, b = cd["cpu_ms_per_1000_events"], cw["cpu_ms_per_1000_events"]
                ratio = f"{b / a:.2f}" if a and b and a > 0 and b > 0 else "–"
                enc = "yes" if cw["encodes"] == cw["encodes_expected"] else f"no ({cw['encodes']})"
                out.append(
                    f"| {r['n']:,} {r['shape']} | {cd['rate']} ({cd['achieved_rate']:.0f} / {cw['achieved_rate']:.0f}) "
                    f"| {size_label(cd['size'])} | {fmt(a)} / {fmt(b)} ({ratio}) "
                    f"| {fmt(cd['latency_ack_ms']['p99'])} / {fmt(cw['latency_ack_ms']['p99'])} "
                    f"| {cd['lost']:,} / {cw['lost']:,} ({d['resumed']:,} / {w['resumed']:,}) "
                    f"| {fmt(cw['write_syscalls_per_event'], 2)} | {fmt(cw['bytes_written_per_event'], 0)} | {enc} |")
            for sk in r.get("skipped", []):
                out.append(f"| {r['n']:,} {r['shape']} | {sk['rate']} | {size_label(sk['size'])} "
                           f"| left out: {sk['why']} | | | | | |")
        out += ["", "| N, connections | server RSS per idle watcher, KiB: direct / watchmux (target ≤ 8) |", "|---|---|"]
        for r in sorted(fanout, key=lambda r: (r["shape"] != "h2", r["n"])):
            sides = {s["side"]: s for s in r["sides"]}
            if "direct" in sides and "watchmux" in sides:
                out.append(f"| {r['n']:,} {r['shape']} | {fmt(sides['direct']['rss_per_idle_watcher_kib'])} / "
                           f"{fmt(sides['watchmux']['rss_per_idle_watcher_kib'])} |")
        out.append("")
    if kubelet:
        out += ["### Kubelet-shaped load", "",
                "| M | side | kube-apiserver WATCHes held | its requests while starting | its RSS / heap change, MiB "
                "| its CPU while starting, ms | its CPU over the changes (net), ms | watchmux RSS, MiB | lost |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(kubelet, key=lambda r: r["m"]):
            for s in r["sides"]:
                reqs = ", ".join(f"{v} {n:.0f}" for v, n in s["apiserver_requests_by_verb"])
                rss = (s["apiserver_rss"][1] - s["apiserver_rss"][0]) / 2**20
                heap = (s["apiserver_heap"][1] - s["apiserver_heap"][0]) / 2**20
                wm = f"{s['server_rss'][1] / 2**20:.1f}" if s["side"] == "watchmux" else "–"
                out.append(f"| {r['m']:,} | {LABELS[s['side']]} | {s['apiserver_watches_before']:.0f} → "
                           f"{s['apiserver_watches_open']:.0f} | {reqs} | {rss:+.1f} / {heap:+.1f} "
                           f"| {fmt(s.get('apiserver_cpu_start_ms'), 0)} | {fmt(s['apiserver_cpu_net_ms'], 0)} "
                           f"| {wm} | {s['lost']} |")
        out.append("")
    if restart:
        out += ["### Restart storm", "",
                "| N | side | configmaps requests reaching the new kube-apiserver | all its requests "
                "| every watcher current, s after the restart command | from the post-restart write's ack: "
                "p50 / p99 / max, ms | its CPU until then, ms |",
                "|---|---|---|---|---|---|---|"]
        for r in sorted(restart, key=lambda r: r["n"]):
            for s in r["sides"]:
                reqs = ", ".join(f"{v} {n:.0f}" for v, n in s["apiserver_configmap_requests_by_verb"])
                m = s["from_marker_ms"]
                cur = fmt(s["all_current_from_restart_s"]) if s["current"] == r["n"] else \
                    f"{s['current']} of {r['n']} only"
                out.append(f"| {r['n']:,} | {LABELS[s['side']]} | {reqs} | {s['apiserver_all_requests']:.0f} | {cur} "
                           f"| {fmt(m['p50'])} / {fmt(m['p99'])} / {fmt(m['max'])} | {s['apiserver_cpu_ms']:.0f} |")
        out.append("")
    return "\n".join(out)


def plot_hotpath(runs):
    """bench-hotpath: its summary (hotpath-summary.json): watchmux CPU per
    1,000 deliveries in each round, fairness on and off, with the medians."""
    runs = [r for r in runs if "by_n" in r]
    if not runs:
        return
    summary = runs[-1]
    n, row = max(summary["by_n"].items(), key=lambda kv: int(kv[0]))
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, (mode, label, color) in enumerate((("on", "fairness on (as shipped)", "#1f77b4"),
                                              ("off", "fairness off (--fairness-seats 0)", "#7f7f7f"))):
        vals = row[mode]["runs"]
        xs = [r + (k - 0.5) * 0.4 for r in range(len(vals))]
        ax.bar(xs, [v or 0 for v in vals], 0.4, color=color, label=f"{label}: median {row[mode]['median']:.2f}")
        for x, v in zip(xs, vals):
            if v is not None:
                ax.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(row["on"]["runs"])))
    ax.set_xticklabels([f"round {r + 1}" for r in range(len(row["on"]["runs"]))])
    ax.set_ylabel("watchmux CPU ms per 1,000 deliveries\n(lower is better)")
    ax.set_title(f"Fairness on the hot path: N={int(n):,} HTTP/2 watchers over TLS, ABBA", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    save(fig, "bench-hotpath.png")


def plot_table(runs):
    """bench-table: CPU per LIST of the pods as JSON and as Tables, for
    kube-apiserver, watchmux and (with TB_BASELINE_BIN) an earlier build, each
    round's value a dot over the median's bar."""
    run = runs[-1]
    shapes = [("json", "JSON (for scale)"), ("table-metadata", "Table, metadata rows\n(kubectl's default)"),
              ("table-none", "Table, includeObject=None")]
    if any(x["shape"] == "cr-table-none" for x in run["lists"]):
        shapes.append(("cr-table-none", f"{run.get('crs', 0):,} custom resources,\nTable, includeObject=None"))
    servers = [(s, c) for s, c in (("kube-apiserver", COLORS["direct"]), ("watchmux (baseline)", "#7f7f7f"),
                                   ("watchmux", COLORS["watchmux"]))
               if any(x["server"] == s for x in run["lists"])]
    fig, ax = plt.subplots(figsize=(2.7 * len(shapes), 4.2))
    width = 0.8 / len(servers)
    for k, (server, color) in enumerate(servers):
        for j, (shape, _) in enumerate(shapes):
            vals = sorted(x["cpu_ms"] for x in run["lists"] if x["server"] == server and x["shape"] == shape)
            if not vals:
                continue
            median = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
            x = j + (k - (len(servers) - 1) / 2) * width
            ax.bar(x, median, width, color=color, label=server if j == 0 else None)
            ax.scatter([x] * len(vals), vals, color="black", s=8, zorder=3)
            ax.text(x, median, f"{median:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([label for _, label in shapes], fontsize=9)
    ax.set_ylabel("server CPU ms per LIST\n(lower is better)")
    ax.set_title(f"LISTs at resourceVersion=0 ({run['pods']:,} pods), {run['runs_per_list']} LISTs a round "
                 f"(watchmux {run['commit']})", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    save(fig, "bench-table.png")


def plot_million(runs):
    """bench-million's last run: watchmux's RSS against the objects' JSON
    (the 1.5 goal, and kube-apiserver's 5.2 for custom resources), the
    latency of each request kind at the client against the 50 µs goal (and
    the real cluster's side by side, if bench-million.sh measured it), and
    the start-up times cold and from the persisted store."""
    r = runs[-1]
    cluster = load("bench-million/cluster.json")
    mib = 1024 * 1024
    fig, axes = plt.subplots(1, 3, figsize=(17, 6), gridspec_kw={"width_ratios": [1, 1.7, 1]})
    ax = axes[0]
    json_mib = r["json_bytes"] / mib
    bars = [("objects'\nJSON", json_mib, "#7f7f7f"),
            ("watchmux\nsynced", r["rss_settled_bytes"] / mib, COLORS["watchmux"]),
            ("watchmux,\nfrom its\nstore", r["starts"][-1]["rss_settled_bytes"] / mib, "#aec7e8"),
            ("kube-apiserver\n(CRs: 5.2 ×)", json_mib * 5.2, COLORS["direct"])]
    ax.bar(range(len(bars)), [b[1] for b in bars], color=[b[2] for b in bars])
    for i, (_, v, _) in enumerate(bars):
        ax.text(i, v, f"{v:,.0f}\n({v / json_mib:.2f} ×)", ha="center", va="bottom", fontsize=8)
    ax.axhline(json_mib * 1.5, color="k", lw=0.8, ls=":", label="goal: 1.5 × the JSON")
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([b[0] for b in bars], fontsize=7)
    ax.set_ylabel("MiB")
    ax.set_title(f"memory, {r['pods']:,} pods of {r['object_bytes']:,} B", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_ylim(0, json_mib * 6.5)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))

    ax = axes[1]
    short = {"loopback floor: a trivial hyper server on watchmux's core": "loopback floor, watchmux's core",
             "loopback floor": "loopback floor, the client's core", "an empty namespace": "empty LIST",
             "node-scoped LIST, resourceVersion=0": "node LIST, rv=0",
             "node-scoped LIST, consistent": "node LIST, consistent", "watch start": "watch start"}
    rows = []
    for l in r["latency_us"]:
        if l["name"].startswith("loopback") and l["until"] == "headers":
            continue
        label = next(v for k, v in short.items() if l["name"].startswith(k))
        cpu = l.get("server_cpu_us_per_request")
        label += f", to the {l['until']}" + (f" (watchmux CPU {cpu:,.0f} µs)" if cpu else "")
        rows.append((label, l["p50"], l["p99"], COLORS["watchmux"], "#aec7e8"))
    if cluster:
        c = cluster[-1]
        for row in c["series"]:
            label = next((v for k, v in short.items() if row["name"].startswith(k)), row["name"])
            for cell in row["sides"]:
                color = COLORS[cell["side"]]
                rows.append((f"real cluster: {label}, {cell['side']}", cell["p50"], cell["p99"], color, color))
    ys = range(len(rows))
    ax.barh([y - 0.2 for y in ys], [row[1] for row in rows], 0.4, color=[row[3] for row in rows], label="p50")
    ax.barh([y + 0.2 for y in ys], [row[2] for row in rows], 0.4, color=[row[4] for row in rows], alpha=0.45,
            label="p99")
    for y, row in zip(ys, rows):
        ax.text(row[1], y - 0.2, f" {row[1]:,.0f}", va="center", fontsize=7)
    ax.axvline(50, color="k", lw=0.8, ls=":", label="goal: 50 µs")
    ax.axvline(8, color="grey", lw=0.8, ls="-.", label="kube-apiserver's store alone, node-scoped: 8 µs")
    ax.set_yticks(list(ys))
    ax.set_yticklabels([row[0] for row in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("µs at the client, one HTTP/2 connection (log); p50 solid, p99 light")
    title = f"latency: synthetic, {r['pods_per_node']} pods a node, h2c"
    if cluster:
        title += f"; real cluster, {cluster[-1]['nodes']:,} nodes, TLS"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3, axis="x")

    ax = axes[2]
    starts = r["starts"]
    labels = ["cold", "cold,\npersisting", "from the\nstore"][:len(starts)]
    xs = range(len(starts))
    ax.bar([x - 0.2 for x in xs], [s["readyz_s"] for s in starts], 0.4, color=COLORS["watchmux"], label="/readyz")
    ax.bar([x + 0.2 for x in xs], [s["synced_s"] for s in starts], 0.4, color="#aec7e8", label="every pod cached")
    for x, s in zip(xs, starts):
        ax.text(x + 0.2, s["synced_s"], f"{s['synced_s']:.1f}", ha="center", va="bottom", fontsize=8)
        if s.get("store_committed_s") is not None:
            ax.plot([x], [s["store_committed_s"]], "k^", label="store committed")
            ax.text(x, s["store_committed_s"], f" {s['store_committed_s']:.0f}", fontsize=8, va="bottom")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("seconds from the start")
    ax.set_title("start-up (the upstream on loopback)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle("A million objects in one cache (synthetic upstream; watchmux on one core)")
    save(fig, "bench-million.png")

def main():
    text = summary(load("bench-fanout/fanout-*.json"), load("bench-kubelet/kubelet-*.json"),
                   load("bench-restart/restart-*.json"))
    with open(os.path.join(RUN, "bench-summary.md"), "w") as f:
        f.write(text + "\n")
    print(f"bench-plots: {os.path.join(RUN, 'bench-summary.md')}")
    done = 0
    for name, pattern, plot in [
        ("fanout", "bench-fanout/fanout-*.json", plot_fanout),
        ("kubelet", "bench-kubelet/kubelet-*.json", plot_kubelet),
        ("restart", "bench-restart/restart-*.json", plot_restart),
        ("scale", "bench-scale/scale-*.json", plot_scale),
        ("scale sweep", "bench-scale/sweep-*.json", plot_limit),
        ("ingest", "bench-ingest/ingest-*.json", plot_ingest),
        ("cores", "bench-cores/cores.json", plot_cores),
        ("alloc", "bench-scale/alloc-*.json", plot_alloc),
        ("upgrade", "bench-upgrade/restart-upgrade-*.json", plot_upgrade),
        ("rebalance", "bench-rebalance/rebalance-*.json", plot_rebalance),
        ("rollout", "bench-rollout/restart-rollout-*.json", plot_rollout),
        ("hotpath", "bench-hotpath/hotpath-summary.json", plot_hotpath),
        ("million", "bench-million/million.json", plot_million),
        ("table", "bench-table/table.json", plot_table),
    ]:
        runs = load(pattern)
        if not runs:
            print(f"bench-plots: no {name} results in {RUN}", file=sys.stderr)
            continue
        plot(runs)
        done += 1
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
