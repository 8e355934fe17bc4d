#!/usr/bin/env python3
"""Merges one generated line table (src/encode/table/columns.txt,
src/encode/zero_objects.txt) made from every supported kube-apiserver minor's
Go modules into the one file watchmux compiles in.

A line is keyed by its first KEY words (group and kind, apiVersion and kind).
A line every minor makes the same stays as it is; a key whose line differs
between minors, or that only some minors have, gets one line a variant,
prefixed by `minors=<m>,<m> `, and watchmux reads the variant of the
upstream's minor (src/encode/minor.rs). Comment lines are the newest minor's.

Usage: lines-union.py -o OUT --key N MINOR=FILE...   (oldest minor first)
"""
import argparse
from collections import OrderedDict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", required=True)
    ap.add_argument("--key", type=int, required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    minors, comments, lines = [], [], {}
    for spec in args.files:
        minor, _, path = spec.partition("=")
        minors.append(minor)
        comments = []
        with open(path) as f:
            for line in f.read().splitlines():
                if line.startswith("#") or not line.strip():
                    comments.append(line)
                    continue
                key = tuple(line.split(" ", args.key)[: args.key])
                variants = lines.setdefault(key, OrderedDict())
                variants.setdefault(line, []).append(minor)
    out = ["# Merged from every supported minor's (" + " ".join(minors) + ") by integration/scripts/generated-tables.sh."]
    out.extend(comments)
    if any(len(v) > 1 or list(v.values())[0] != minors for v in lines.values()):
        out.append("# A line of only some minors starts with minors=<minor>,<minor>")
    for key in sorted(lines):
        for line, present in lines[key].items():
            out.append(line if present == minors else "minors=" + ",".join(present) + " " + line)
    with open(args.o, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
