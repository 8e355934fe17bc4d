#!/usr/bin/env python3
"""Per-thread CPU of every process running one binary, sampled from /proc.

make bench-cores (integration/scripts/bench-cores.sh) runs it beside each
configuration: it answers whether a process that stops scaling has one thread
at 100 % of a core while the others idle (one task, one lock, serializing) or
every thread busy (the cores are simply spent).

Usage: thread-cpu.py --exe PATH --out JSON [--interval S] [--window S] [--ready-url URL]

Samples, every --interval seconds (0.25) until SIGTERM or SIGINT, each
process whose /proc/<pid>/exe is PATH (a bench may start several in turn:
bench-scale.sh starts an empty tier for its baseline before the real one),
each thread's utime + stime (/proc/<pid>/task/<tid>/stat, fields 14 and 15,
in clock ticks) and its time waiting on a run queue for a CPU
(/proc/<pid>/task/<tid>/schedstat, second field, ns). On exit it writes, for
the process seen last (the measured one: bench-scale.sh's baseline tier and
its load phase's process come before the storm's):

- over its life: CPU seconds, per thread and in all;
- over its busiest --window seconds (2; the highest CPU of any run of
  consecutive samples that long, i.e. the ceiling in a bench driven as fast
  as it goes): cores in use in all, each thread's share of a core, its
  run-queue wait as a share of the window, and the busiest thread's share.
  A thread's share and its wait together are the time it was runnable: what
  it would have used with a core to itself on a machine shared with others.

With --ready-url (a watchmux's /readyz), a sample counts only while the URL
answers 200: the storm, not the tier's start-up and its caches' first LISTs.

Reading /proc costs the sampler about a millisecond a sample; run it on the
clients' core(s), not the measured process's.
"""

import argparse
import json
import os
import signal
import sys
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


def thread_times(pid):
    """{tid: (name, cpu ticks, run-queue wait ns)} of one process; {} once it is gone."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                waited = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        # The name is in parentheses and may hold spaces: fields count from after it.
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (name, int(fields[11]) + int(fields[12]), waited)
    return out


def ready(url):
    """Whether url answers 200 within a second (no url: always)."""
    if not url:
        return True
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def processes_of(exe):
    """The pids whose executable is exe."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/exe") == exe:
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def busiest_window(samples, window):
    """(first, last) sample indexes spanning at least `window` seconds with the most CPU."""
    best, best_cpu = None, -1.0
    j = 0
    for i in range(len(samples)):
        while j < len(samples) and samples[j][0] - samples[i][0] < window:
            j += 1
        if j == len(samples):
            break
        cpu = sum(t[1] for t in samples[j][1].values()) - sum(
            samples[i][1].get(tid, (None, 0, 0))[1] for tid in samples[j][1]
        )
        rate = cpu / (samples[j][0] - samples[i][0])
        if rate > best_cpu:
            best, best_cpu = (i, j), rate
    return best


def summarise(pid, samples, window):
    """The life and the busiest window of one process's samples (time, {tid: times})."""
    last = samples[-1][1]
    life = {tid: ticks / CLK_TCK for tid, (_, ticks, _) in last.items()}
    names = {tid: name for tid, (name, _, _) in last.items()}
    result = {
        "pid": pid,
        "seconds": round(samples[-1][0] - samples[0][0], 2),
        "samples": len(samples),
        "cpu_seconds": round(sum(life.values()), 2),
        "threads": len(last),
        "life": sorted(
            ({"tid": tid, "name": names[tid], "cpu_seconds": round(s, 2)} for tid, s in life.items() if s > 0),
            key=lambda t: -t["cpu_seconds"],
        ),
    }
    span = busiest_window(samples, window)
    if span is None:
        return result
    (t0, before), (t1, after) = samples[span[0]], samples[span[1]]
    secs = t1 - t0
    threads = []
    for tid, (name, ticks, waited) in after.items():
        _, ticks0, waited0 = before.get(tid, (name, 0, 0))
        busy = (ticks - ticks0) / CLK_TCK / secs
        if busy > 0 or waited > waited0:
            threads.append(
                {"tid": tid, "name": name, "core_share": round(busy, 3), "waited_share": round((waited - waited0) / 1e9 / secs, 3)}
            )
    threads.sort(key=lambda t: -t["core_share"])
    result["window"] = {
        "seconds": round(secs, 2),
        "from_start_s": round(t0 - samples[0][0], 2),
        "cores": round(sum(t["core_share"] for t in threads), 3),
        "busiest_thread_share": threads[0]["core_share"] if threads else 0.0,
        "threads": threads,
    }
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", required=True, help="the binary whose processes to sample")
    ap.add_argument("--out", required=True, help="JSON summary written on exit")
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--ready-url", help="count samples only while this URL answers 200")
    args = ap.parse_args()
    exe = os.path.realpath(args.exe)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    samples = {}  # pid -> [(monotonic time, {tid: (name, ticks, waited)})]
    while not stopping:
        now = time.monotonic()
        if not ready(args.ready_url):
            time.sleep(args.interval)
            continue
        for pid in processes_of(exe):
            times = thread_times(pid)
            if times:
                samples.setdefault(pid, []).append((now, times))
        time.sleep(args.interval)
    found = [(pid, s) for pid, s in samples.items() if len(s) >= 2]
    if not found:
        print(f"thread-cpu: no process of {exe} sampled twice", file=sys.stderr)
        summary = {"exe": exe, "process": None}
    else:
        pid, s = max(found, key=lambda p: p[1][0][0])
        summary = {"exe": exe, "interval_s": args.interval, "window_s": args.window, "processes_seen": len(found),
                   "process": summarise(pid, s, args.window)}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
