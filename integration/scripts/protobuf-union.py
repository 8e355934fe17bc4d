#!/usr/bin/env python3
"""Merges the protobuf schema tables of every supported kube-apiserver minor
(integration/cmd/protoschema run against each minor's own Go modules) into the
one table watchmux compiles in (src/encode/protobuf/schema.txt).

Kubernetes never reuses a protobuf field number, so the union of the minors'
tables is one table in which every field keeps its number, JSON name and
shape (its wire meaning); a field or kind that only some minors have carries
`minors=<m>,<m>...` at the end of its line, and watchmux, told the upstream's
minor, leaves out what that minor lacks (a Go non-pointer field is always
written in protobuf, so a newer minor's field must not appear in an older
server's bytes). A field whose Go flags changed between minors (a json tag
that lost `omitempty`, a pointer) is written once a variant, each marked with
its minors. Anything that does conflict between minors (one number with two
JSON names or shapes, one JSON key under two numbers, one kind with two
messages, a message whose flags changed) stops the merge: the union would be
a guess.

Usage: protobuf-union.py -o OUT MINOR=TABLE...   (oldest minor first)
"""
import argparse
import sys
from collections import OrderedDict


def fail(msg):
    print(f"protobuf-union: {msg}", file=sys.stderr)
    sys.exit(1)


def parse(path):
    """(comments, kinds {(apiVersion, kind): type}, messages {name: (flags, {number: rest})})."""
    comments, kinds, messages = [], {}, OrderedDict()
    current = None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            words = line.split()
            if not words:
                continue
            if words[0].startswith("#"):
                comments.append(line)
            elif words[0] == "kind":
                if len(words) != 4:
                    fail(f"{path}:{n}: bad kind line")
                kinds[(words[1], words[2])] = words[3]
            elif words[0] == "message":
                current = words[1]
                messages[current] = (tuple(words[2:]), {})
            elif words[0] == "field":
                if current is None:
                    fail(f"{path}:{n}: field outside a message")
                messages[current][1][int(words[1])] = tuple(words[2:])
            else:
                fail(f"{path}:{n}: unknown line: {line}")
    return comments, kinds, messages


def annotate(present, minors):
    return "" if present == minors else " minors=" + ",".join(present)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", required=True)
    ap.add_argument("tables", nargs="+", help="MINOR=TABLE, oldest first")
    args = ap.parse_args()
    minors, tables = [], {}
    for spec in args.tables:
        minor, _, path = spec.partition("=")
        minors.append(minor)
        tables[minor] = parse(path)

    kinds = {}  # (apiVersion, kind) -> (type, [minors])
    messages = {}  # name -> (flags, {number: (rest, [minors])})
    notes = []
    message_minors = {}  # name -> [minors]
    for minor in minors:
        comments, table_kinds, table_messages = tables[minor]
        for c in comments:
            if c.startswith("# Wire type") and c not in notes:
                notes.append(c)
        for key, ty in table_kinds.items():
            have = kinds.setdefault(key, (ty, []))
            if have[0] != ty:
                fail(f"kind {key[0]} {key[1]} is {have[0]} in {have[1]} and {ty} in {minor}")
            have[1].append(minor)
        for name, (flags, fields) in table_messages.items():
            message_minors.setdefault(name, []).append(minor)
            have_flags, have_fields = messages.setdefault(name, (flags, {}))
            if have_flags != flags:
                fail(f"message {name} has flags {have_flags} before {minor} and {flags} in {minor}")
            for number, rest in fields.items():
                variants = have_fields.setdefault(number, OrderedDict())
                for other, present in variants.items():
                    if other[:2] != rest[:2]:
                        fail(f"{name} field {number} is {' '.join(other)} in {present} and {' '.join(rest)} in {minor}")
                variants.setdefault(rest, []).append(minor)
    for name, (_, fields) in messages.items():
        by_key = {}
        for number, variants in fields.items():
            json_name = next(iter(variants))[0]
            if json_name != "-" and by_key.setdefault(json_name, number) != number:
                fail(f"{name}: JSON key {json_name} has fields {by_key[json_name]} and {number}")

    first = tables[minors[-1]][0]
    out = []
    out.append("# The protobuf form of the built-in Kubernetes types, for watchmux's JSON-to-protobuf encoder.")
    out.append("# Generated; do not edit. Made by: bash integration/scripts/protobuf-schema.sh --write, which runs")
    out.append("# integration/cmd/protoschema against each supported minor's Go modules and merges the tables")
    out.append("# (integration/scripts/protobuf-union.py); checked for drift by make protobuf-check.")
    out.append("# Minors: " + " ".join(minors))
    for minor in minors:
        src = [c for c in tables[minor][0] if c.startswith("# From: ")]
        out.append(f"# {minor} " + (src[0][2:] if src else "From: ?"))
    out.extend(c for c in first if c.startswith("# Registered types without"))
    out.extend(notes)
    for minor in minors:
        out.extend(f"# {minor} " + c[2:] for c in tables[minor][0] if c.startswith("# Repetition from"))
    out.extend(c for c in first if c.startswith("# Lines: "))
    out.append("# A kind or field line of only some minors ends in minors=<minor>,<minor>")
    for (api_version, kind), (ty, present) in sorted(kinds.items()):
        out.append(f"kind {api_version} {kind} {ty}{annotate(present, minors)}")
    for name in sorted(messages):
        flags, fields = messages[name]
        out.append(" ".join(["message", name, *flags]))
        for number in sorted(fields):
            for rest, present in fields[number].items():
                # Marked only where it differs from its message's minors: a
                # message no view reaches needs no marks of its own.
                out.append(" ".join(["  field", str(number), *rest]) + annotate(present, message_minors[name]))
    with open(args.o, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
