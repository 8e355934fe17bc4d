#!/usr/bin/env python3
"""A pod watcher that stays through a reboot scenario, as an informer would:
it lists once, watches from the list's resourceVersion, and when the watch
ends or its server goes away it watches again from the last version it saw
(a new list only after a 410). reboot-scenario.sh runs two: one on the
node-local watchmux, one on kube-apiserver, and compares what they saw.

    reboot-watcher.py OUT.jsonl URL CA (--token T | --cert C --key K) QUERY

URL is the pods collection (https://127.0.0.1:PORT/api/v1/namespaces/NS/pods),
QUERY its selector (fieldSelector=spec.nodeName%3Dhollow-node-0). Writes one
JSON line per observation: {"kind":"list","rv":...,"items":[[name,rv],...]},
{"kind":"event","type":...,"name":...,"rv":...}, {"kind":"expired"} (410),
{"kind":"reconnect","rv":...,"error":...}. Runs until SIGTERM.
"""
import http.client
import json
import signal
import ssl
import sys
import time
import urllib.parse


def main():
    out_path, url, ca = sys.argv[1], sys.argv[2], sys.argv[3]
    args = sys.argv[4:]
    token = cert = key = None
    query = ""
    while args:
        a = args.pop(0)
        if a == "--token":
            token = args.pop(0)
        elif a == "--cert":
            cert = args.pop(0)
        elif a == "--key":
            key = args.pop(0)
        else:
            query = a
    parsed = urllib.parse.urlsplit(url)
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    out = open(out_path, "a", buffering=1)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1) or sys.exit(0))

    def record(**kw):
        kw["t"] = round(time.time(), 3)
        out.write(json.dumps(kw) + "\n")

    def request(path_query, timeout):
        conn = http.client.HTTPSConnection(parsed.hostname, parsed.port, context=ctx, timeout=timeout)
        conn.request("GET", path_query, headers=headers)
        return conn, conn.getresponse()

    rv = None
    while True:
        try:
            if rv is None:
                conn, resp = request(f"{parsed.path}?{query}", 10)
                body = resp.read()
                conn.close()
                if resp.status != 200:
                    raise RuntimeError(f"list: {resp.status} {body[:200]!r}")
                lst = json.loads(body)
                rv = lst["metadata"]["resourceVersion"]
                items = [[i["metadata"]["name"], i["metadata"]["resourceVersion"]] for i in lst["items"]]
                record(kind="list", rv=rv, items=items)
            # A read timeout longer than the bookmarks' interval: a black hole
            # beneath the server shows as a silent stream, which the server
            # itself must end or keep alive; 90 s bounds our own wait.
            conn, resp = request(
                f"{parsed.path}?{query}&watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=600", 90)
            if resp.status == 410:
                conn.close()
                record(kind="expired", rv=rv)
                rv = None
                continue
            if resp.status != 200:
                body = resp.read()
                conn.close()
                raise RuntimeError(f"watch: {resp.status} {body[:200]!r}")
            while True:
                line = resp.readline()
                if not line:
                    break
                ev = json.loads(line)
                obj = ev["object"]
                if ev["type"] == "ERROR":
                    if obj.get("code") == 410:
                        record(kind="expired", rv=rv)
                        rv = None
                    else:
                        record(kind="reconnect", rv=rv, error=str(obj.get("message")))
                    break
                new_rv = obj["metadata"]["resourceVersion"]
                if ev["type"] != "BOOKMARK":
                    record(kind="event", type=ev["type"], name=obj["metadata"]["name"], rv=new_rv)
                rv = new_rv
            conn.close()
            if rv is not None:
                record(kind="reconnect", rv=rv, error="stream ended")
        except (OSError, http.client.HTTPException, RuntimeError, ValueError) as e:
            record(kind="reconnect", rv=rv, error=str(e)[:200])
            time.sleep(0.5)


if __name__ == "__main__":
    main()
