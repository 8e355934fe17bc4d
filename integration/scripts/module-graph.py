#!/usr/bin/env python3
"""Checks that the crate's module graph has no cycles (issue 11).

Reads every `crate::a::b` and `super::x` path in src/'s code (not in
comments), maps each file to its module path, and builds two graphs:

- between top-level modules (auth, cache, passthrough, ...), and
- between the children of every module, at any depth (cache::sync and
  cache::state; cache::read::serve and cache::read::params), an edge for
  every reference from one to another (or to something inside it).

A module's own children (`auth::cert` used by `auth`) are not edges: a
parent owns its children. Test-only modules (`#[cfg(test)] mod x;`) and
`tests.rs`/`tests/` files are left out. Prints each cycle found and exits 1
if there is one; `--dot` prints the graphs in Graphviz form instead.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "src")
USE = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3]  # strip .rs
    parts = rel.split(os.sep)
    if parts == ["lib"] or parts == ["main"]:
        return []
    return parts


def test_only(path, text):
    base = os.path.basename(path)
    return base == "tests.rs" or "/tests/" in path or base == "fuzz.rs" or base == "consistency.rs"


def strip_tests(text):
    # Drop `#[cfg(test)] mod tests { ... }` blocks: they may import anything.
    out, depth, skipping = [], 0, False
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not skipping and line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and lines[i + 1].lstrip().startswith("mod ") and lines[i + 1].rstrip().endswith("{"):
            skipping, depth = True, 0
            i += 1
            continue
        if skipping:
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "}" in line:
                skipping = False
            i += 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def resolve(mod, kind, tail):
    names = tail.strip(":").split("::")
    base = [] if kind == "crate" else mod[:-1]
    return base + names


def main():
    edges = set()
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            text = open(path, encoding="utf-8").read()
            if test_only(path, text):
                continue
            mod = module_of(path)
            if not mod:
                continue
            code = "\n".join(l for l in strip_tests(text).splitlines() if not l.lstrip().startswith("//"))
            for m in USE.finditer(code):
                target = resolve(mod, m.group(1), m.group(2))
                edges.add((tuple(mod), tuple(target)))
    top, inner = {}, {}
    for src, dst in edges:
        if not dst:
            continue
        if src[0] != dst[0]:
            top.setdefault(src[0], set()).add(dst[0])
            continue
        # Siblings under their deepest common parent, at any depth:
        # cache::a -> cache::b, and cache::read::serve -> cache::read::params.
        common = 0
        while common < min(len(src), len(dst)) and src[common] == dst[common]:
            common += 1
        if common < len(src) and common < len(dst):
            parent = "::".join(src[:common])
            inner.setdefault(parent, {}).setdefault(src[common], set()).add(dst[common])
    if "--dot" in sys.argv:
        print("digraph modules {")
        for a, bs in sorted(top.items()):
            for b in sorted(bs):
                print(f'  "{a}" -> "{b}";')
        for parent, g in sorted(inner.items()):
            for a, bs in sorted(g.items()):
                for b in sorted(bs):
                    print(f'  "{parent}::{a}" -> "{parent}::{b}";')
        print("}")
        return 0
    cycles = find_cycles(top, "")
    for parent, g in inner.items():
        cycles += find_cycles(g, parent + "::")
    for c in cycles:
        print("modules in a cycle: " + ", ".join(c))
    if cycles:
        return 1
    print(f"module graph: acyclic ({sum(len(v) for v in top.values())} edges between top-level modules, "
          f"{sum(len(v) for g in inner.values() for v in g.values())} inside them)")
    return 0


def find_cycles(graph, prefix):
    """One cycle per strongly connected component with more than one node."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append([prefix + n for n in sorted(comp)])

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
