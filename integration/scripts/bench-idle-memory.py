#!/usr/bin/env python3
"""Memory per idle watcher: opens N watches on a running watchmux, each on a
connection of its own (HTTP/1.1, plain or TLS), and reports the server's
resident memory delta divided by N (issue 14, item 3).

Each watch asks for the ConfigMaps of an empty namespace from
resourceVersion 0, so it is answered from the cache and no event is ever
sent: what the server holds is the connection, hyper's buffers, the TLS
session and the watch stream alone. The resident set is read from
/proc/<pid>/status (VmRSS) before the first connection and once every
response head is in and the process has been left alone for a few seconds.
Repeated --rounds times on fresh connections; each round is printed, then the
median.

Usage: bench-idle-memory.py --pid PID --addr 127.0.0.1:17592 [--tls] [-n 2000]
       [--rounds 3] [--settle 3]
Prints one Markdown table row per round and a JSON line with the median.
"""

import argparse
import json
import socket
import ssl
import statistics
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def open_watch(host, port, ctx, path):
    s = socket.create_connection((host, port), timeout=30)
    if ctx is not None:
        s = ctx.wrap_socket(s, server_hostname=host)
    req = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\n\r\n"
    s.sendall(req.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError(f"connection closed before the response head: {head!r}")
        head += chunk
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status:
        raise RuntimeError(f"watch refused: {status!r}")
    return s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--addr", required=True)
    p.add_argument("--tls", action="store_true")
    p.add_argument("-n", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--settle", type=float, default=3.0)
    p.add_argument("--label", default="")
    p.add_argument("--namespace", default="watchmux-bench-idle")
    a = p.parse_args()
    host, port = a.addr.rsplit(":", 1)
    port = int(port)
    ctx = None
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["http/1.1"])
    path = f"/api/v1/namespaces/{a.namespace}/configmaps?watch=1&resourceVersion=0&timeoutSeconds=3600"
    per = []
    for r in range(a.rounds):
        time.sleep(a.settle)
        before = rss_kib(a.pid)
        t0 = time.monotonic()
        socks = [open_watch(host, port, ctx, path) for _ in range(a.n)]
        opened = time.monotonic() - t0
        time.sleep(a.settle)
        after = rss_kib(a.pid)
        kib = (after - before) / a.n
        per.append(kib)
        print(f"| {a.label or r + 1} | {a.n} | {'TLS' if a.tls else 'plain'} | {before} | {after} | {kib:.1f} | {opened:.1f} |")
        sys.stdout.flush()
        for s in socks:
            s.close()
    print(json.dumps({"n": a.n, "tls": a.tls, "kib_per_watcher": per, "median": statistics.median(per)}))


if __name__ == "__main__":
    main()
