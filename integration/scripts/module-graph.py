#!/usr/bin/env python3
"""Checks that the crate's module graph has no cycles, at any depth.

Reads every path that names a module of the crate from src/'s code
(comments and string literals left out):

- `use` trees, braces expanded (`use crate::cache::{delivery::X, resource::Y}`
  is two paths, `use super::{a, b}` two more), and
- paths written in expressions and types (`crate::a::b::f()`,
  `super::super::x::Y`),

resolved the way rustc resolves them: `crate` is the root, `self` the module
the path is written in, and each `super` one module up, however many there
are; the module a path is written in is its file's (`src/cache/resource.rs`
is `cache::resource`, `src/cache/resource/fanout.rs` is
`cache::resource::fanout`) plus any inline `mod x { ... }` around it.

It then builds two graphs:

- between top-level modules (auth, cache, passthrough, ...), and
- between the children of every module, at any depth (cache::sync and
  cache::state; cache::read::serve and cache::read::params), an edge for
  every reference from one to another (or to something inside it).

A module's own children (`auth::cert` used by `auth`) are not edges: a
parent owns its children. Test-only code is left out: `#[cfg(test)] mod x;`
files (and everything under their folder), `#[cfg(test)] mod x { ... }`
blocks, and `tests.rs` files. Prints each cycle found and exits 1 if there is
one; `--dot` prints the graphs in Graphviz form instead. `--root DIR` reads
another tree (the script's own test, module_graph_test.py, uses a fixture).
"""
import os
import re
import sys

DEFAULT_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH_EXPR = re.compile(r"\b(?:crate|super|self)(?:\s*::\s*(?:" + IDENT + r"))+")
USE_STMT = re.compile(r"\buse\s+([^;]*);")
CFG_TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*([;{])")
INLINE_MOD = re.compile(r"\bmod\s+(" + IDENT + r")\s*\{")
PATH_ATTR = re.compile(r"#\[path\s*=")


def strip_comments_and_strings(text):
    """The code with comments, string and char literals blanked out (newlines
    and lengths kept, so positions and brace depths stay true)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(root, path):
    rel = os.path.relpath(path, root)[:-3]  # strip .rs
    parts = rel.split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts in (["lib"], ["main"]):
        return []
    return parts


def matching_brace(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code)


def test_module_files(root, files):
    """Module paths declared `#[cfg(test)] mod x;`: x's file and folder are
    test-only."""
    out = set()
    for path, code in files.items():
        mod = module_of(root, path)
        for m in CFG_TEST_MOD.finditer(code):
            if m.group(2) == ";":
                out.add(tuple(mod + [m.group(1)]))
    return out


def blank_test_blocks(code):
    """`#[cfg(test)] mod x { ... }` blocks blanked out: they may use anything."""
    code = list(code)
    text = "".join(code)
    for m in CFG_TEST_MOD.finditer(text):
        if m.group(2) == "{":
            end = matching_brace(text, m.end() - 1)
            for j in range(m.start(), end + 1):
                if code[j] != "\n":
                    code[j] = " "
    return "".join(code)


def inline_scopes(code):
    """(start, end, name) of each inline `mod name { ... }`."""
    out = []
    for m in INLINE_MOD.finditer(code):
        out.append((m.start(), matching_brace(code, m.end() - 1), m.group(1)))
    return out


def scope_at(mod, scopes, pos):
    inner = [s for s in scopes if s[0] <= pos <= s[1]]
    inner.sort()
    return mod + [name for _, _, name in inner]


def expand_use_tree(tree):
    """`a::{b, c::{d, self}}` -> ['a::b', 'a::c::d', 'a::c']; `as` renames
    and globs dropped."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        if cur:
            parts.append(cur)
        for p in parts:
            if "{" in p:
                head, rest = p.split("{", 1)
                head = head.rstrip(":")
                walk(join(prefix, head), rest[: rest.rfind("}")])
                continue
            p = p.rstrip(":*").rstrip(":")
            if p == "self":
                out.append(prefix)
            elif p:
                out.append(join(prefix, p))

    def join(a, b):
        return b if not a else (a if not b else a + "::" + b)

    walk("", tree)
    return out


def resolve(scope, path):
    """The absolute module path `path` names from module `scope`, or None if
    it does not start at crate/self/super (an extern crate, a local name)."""
    names = [p for p in re.split(r"\s*::\s*", path.strip()) if p]
    if not names or names[0] not in ("crate", "self", "super"):
        return None
    if names[0] == "crate":
        base, names = [], names[1:]
    else:
        base = list(scope)
        if names[0] == "self":
            names = names[1:]
        while names and names[0] == "super":
            if not base:
                return None  # above the crate root: not a path rustc takes
            base.pop()
            names = names[1:]
    return base + names


def read_edges(root):
    files = {}
    for dirpath, _, names in os.walk(root):
        for f in names:
            if f.endswith(".rs"):
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as f:
                    files[path] = strip_comments_and_strings(f.read())
    test_mods = test_module_files(root, files)
    edges = set()
    for path, code in files.items():
        mod = module_of(root, path)
        if not mod or os.path.basename(path) == "tests.rs":
            continue
        if any(tuple(mod[: len(t)]) == t for t in test_mods):
            continue
        if PATH_ATTR.search(code):
            raise SystemExit(f"{path}: #[path] attributes are not understood by this check")
        code = blank_test_blocks(code)
        scopes = inline_scopes(code)
        found = []
        for m in USE_STMT.finditer(code):
            for p in expand_use_tree(m.group(1)):
                found.append((m.start(), p))
        for m in PATH_EXPR.finditer(code):
            found.append((m.start(), m.group(0)))
        for pos, p in found:
            scope = scope_at(mod, scopes, pos)
            target = resolve(scope, p)
            if target:
                edges.add((tuple(scope), tuple(target)))
    return edges


def graphs(edges):
    top, inner = {}, {}
    for src, dst in edges:
        if not dst or not src:
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
    return top, inner


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


def witnesses(edges, parent, comp):
    """For a cycle among parent's children: one file-level edge per arrow."""
    plen = len(parent.split("::")) if parent else 0
    names = {c.split("::")[-1] for c in comp}
    out = []
    for src, dst in sorted(edges):
        if len(src) > plen and len(dst) > plen and "::".join(src[:plen]) == parent and "::".join(dst[:plen]) == parent \
                and src[plen] in names and dst[plen] in names and src[plen] != dst[plen]:
            out.append(f"    {'::'.join(src)} -> {'::'.join(dst)}")
    return out


def main(argv):
    root = DEFAULT_ROOT
    if "--root" in argv:
        root = argv[argv.index("--root") + 1]
    edges = read_edges(root)
    top, inner = graphs(edges)
    if "--dot" in argv:
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
    cycles = [("", c) for c in find_cycles(top, "")]
    for parent, g in sorted(inner.items()):
        cycles += [(parent, c) for c in find_cycles(g, parent + "::")]
    for parent, c in cycles:
        print("modules in a cycle: " + ", ".join(c))
        for line in witnesses(edges, parent, c)[:12]:
            print(line)
    if cycles:
        return 1
    print(f"module graph: acyclic ({sum(len(v) for v in top.values())} edges between top-level modules, "
          f"{sum(len(v) for g in inner.values() for v in g.values())} inside them)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
