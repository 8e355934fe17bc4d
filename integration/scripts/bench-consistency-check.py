#!/usr/bin/env python3
"""What one consistency check (src/cache/consistency_check.rs) costs kube-apiserver.

Against the test cluster (cluster-up.sh; its .run/cluster/env), fills a
namespace with N ConfigMaps (CC_OBJECTS, 10,000; CC_BYTES of data each,
1,024), then reads the whole configmaps collection as the check does -
`LIST resourceVersion=X&resourceVersionMatch=Exact`, pages of CC_PAGE (1,000)
- in each form it could ask for, CC_ROUNDS (5) times each, and prints per
pass: wall time, the API server's CPU (utime+stime of its process, from
/proc), and the bytes read. X is the collection's version at the start
(recent: the API server's watch cache holds it), and with CC_OLD=1 also a
version older than that cache's history, which etcd serves.

Usage: python3 integration/scripts/bench-consistency-check.py
"""

import json
import os
import ssl
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
env = dict(
    line.strip().split("=", 1)
    for line in open(os.path.join(root, ".run/cluster/env"))
    if "=" in line
)
url = env["APISERVER_URL"]
token = env["ADMIN_TOKEN"]
pid = int(open(os.path.join(root, ".run/cluster/apiserver.pid")).read().strip())
ctx = ssl.create_default_context(cafile=env["CA_CERT"])
objects = int(os.environ.get("CC_OBJECTS", "10000"))
size = int(os.environ.get("CC_BYTES", "1024"))
page = int(os.environ.get("CC_PAGE", "1000"))
rounds = int(os.environ.get("CC_ROUNDS", "5"))
ns = "cc-bench"
tick = os.sysconf("SC_CLK_TCK")

FORMS = [
    ("json", "application/json"),
    ("json-metadata", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
    ("protobuf", "application/vnd.kubernetes.protobuf"),
    (
        "protobuf-metadata",
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    ),
]


def request(method, path, body=None, accept="application/json"):
    req = urllib.request.Request(url + path, method=method, data=body)
    req.add_header("Authorization", "Bearer " + token)
    req.add_header("Accept", accept)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, context=ctx) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


def fill():
    request("POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": ns}}).encode())
    status, body = request("GET", f"/api/v1/namespaces/{ns}/configmaps?limit=1")
    have = 0
    if status == 200:
        # Count what is there already (a second run reuses them).
        _, body = request("GET", f"/api/v1/namespaces/{ns}/configmaps?resourceVersion=0")
        have = len(json.loads(body)["items"])
    data = "x" * size

    def create(i):
        cm = {"metadata": {"name": f"cm-{i:05d}", "labels": {"bench": "cc"}}, "data": {"v": data}}
        request("POST", f"/api/v1/namespaces/{ns}/configmaps", json.dumps(cm).encode())

    if have < objects:
        t = time.time()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, range(have, objects)))
        print(f"created {objects - have} configmaps in {time.time() - t:.1f}s", file=sys.stderr)


def exact_pass(rv, accept):
    """The check's list: every page; returns (items seen, bytes)."""
    total, cont, n = 0, None, 0
    while True:
        q = f"limit={page}&" + (f"continue={cont}" if cont else f"resourceVersion={rv}&resourceVersionMatch=Exact")
        status, body = request("GET", f"/api/v1/configmaps?{q}", accept=accept)
        if status != 200:
            raise SystemExit(f"LIST at {rv} ({accept}): {status} {body[:200]!r}")
        total += len(body)
        if accept.startswith("application/json"):
            doc = json.loads(body)
            n += len(doc["items"])
            cont = doc["metadata"].get("continue")
        else:
            # Protobuf: the continue token is found with a JSON page of one
            # item at the same position (only its size is of interest here).
            cont = protobuf_continue(body)
            n += 0
        if not cont:
            return n, total


def protobuf_continue(body):
    # ListMeta is field 1 of the list; continue is its field 3 (a string).
    # Enough of a protobuf reader for that: the envelope (k8s\0 + Unknown),
    # Unknown.raw (field 2), the list's field 1, ListMeta's field 3.
    def fields(buf):
        i = 0
        while i < len(buf):
            key, i = varint(buf, i)
            num, wire = key >> 3, key & 7
            if wire == 2:
                ln, i = varint(buf, i)
                yield num, buf[i : i + ln]
                i += ln
            elif wire == 0:
                _, i = varint(buf, i)
            else:
                return

    def varint(buf, i):
        shift = out = 0
        while True:
            b = buf[i]
            i += 1
            out |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return out, i

    unknown = body[4:]
    raw = next(v for n, v in fields(unknown) if n == 2)
    meta = next(v for n, v in fields(raw) if n == 1)
    for n, v in fields(meta):
        if n == 3:
            return v.decode()
    return None


def measure(label, rv):
    print(f"\n{label}: resourceVersion {rv}, pages of {page}, {rounds} passes each")
    print("| form | items | bytes a pass | wall ms a pass (median) | API server CPU ms a pass |")
    print("|---|---|---|---|---|")
    for name, accept in FORMS:
        exact_pass(rv, accept)  # warm
        walls = []
        c0 = cpu()
        for _ in range(rounds):
            t = time.perf_counter()
            n, total = exact_pass(rv, accept)
            walls.append((time.perf_counter() - t) * 1000)
        spent = (cpu() - c0) * 1000 / rounds
        walls.sort()
        print(f"| {name} | {n or '-'} | {total:,} | {walls[len(walls) // 2]:.0f} | {spent:.0f} |")


def current_rv():
    _, body = request("GET", "/api/v1/configmaps?limit=1")
    return int(json.loads(body)["metadata"]["resourceVersion"])


fill()
rv = current_rv()
measure("recent version (the watch cache's snapshot)", rv)
if os.environ.get("CC_OLD") == "1":
    # Push the version out of the watch cache's history (75 s) with a few
    # writes, then wait it out: etcd serves it.
    print("waiting 80 s for the version to leave the watch cache's history...", file=sys.stderr)
    request("POST", f"/api/v1/namespaces/{ns}/configmaps", json.dumps({"metadata": {"generateName": "w-"}}).encode())
    time.sleep(80)
    measure("older version (etcd)", rv)
print(f"\nkube-apiserver pid {pid}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
