#!/usr/bin/env python3
"""The module-graph check's own test: small crates written to a temporary
folder, each with the one thing the check must see (or must not).

Run by `make test-unit` before the check runs on src/.
"""
import importlib.util
import os
import shutil
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("module_graph", os.path.join(HERE, "module-graph.py"))
mg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mg)


def crate(files):
    root = tempfile.mkdtemp(prefix="module-graph-")
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return root


def cycles(files):
    root = crate(files)
    try:
        top, inner = mg.graphs(mg.read_edges(root))
    finally:
        shutil.rmtree(root)
    out = mg.find_cycles(top, "")
    for parent, g in inner.items():
        out += mg.find_cycles(g, parent + "::")
    return out


BASE = {
    "lib.rs": "mod cache;\n",
    "cache.rs": "mod a;\nmod b;\n",
    "cache/a.rs": "mod deep;\n",
    "cache/a/deep.rs": "",
    "cache/b.rs": "pub(crate) struct B;\n",
}


class ModuleGraph(unittest.TestCase):
    def test_super_super_cycle_is_found(self):
        files = dict(BASE)
        files["cache/a/deep.rs"] = "use super::super::b::B;\n"
        files["cache/b.rs"] = "use super::a::deep;\npub(crate) struct B;\n"
        self.assertEqual(cycles(files), [["cache::a", "cache::b"]])

    def test_a_grouped_use_is_read(self):
        files = dict(BASE)
        files["cache/a.rs"] = "mod deep;\nuse crate::{cache::{b::{self, B}}};\n"
        files["cache/b.rs"] = "pub(crate) fn f() { crate::cache::a::g() }\n"
        self.assertEqual(cycles(files), [["cache::a", "cache::b"]])

    def test_one_way_is_acyclic(self):
        files = dict(BASE)
        files["cache/a/deep.rs"] = "use super::super::b::B as Renamed;\n"
        self.assertEqual(cycles(files), [])

    def test_comments_strings_and_tests_are_not_edges(self):
        files = dict(BASE)
        files["cache/a/deep.rs"] = "use super::super::b::B;\n"
        files["cache/b.rs"] = (
            "// crate::cache::a\n/* super::a::deep */\n"
            'const S: &str = "crate::cache::a"; const R: &str = r#"super::a"#;\n'
            "const C: char = '\"';\n"
            "#[cfg(test)]\nmod tests { use super::super::a::deep; }\n"
            "#[cfg(test)]\nmod more;\n"
        )
        files["cache/b/more.rs"] = "use crate::cache::a;\n"
        files["cache/b/tests.rs"] = "use crate::cache::a;\n"
        self.assertEqual(cycles(files), [])

    def test_an_inline_module_moves_super(self):
        # Inside `mod inner { }` of cache::b, super is cache::b, so
        # super::super::a is cache::a.
        files = dict(BASE)
        files["cache/a/deep.rs"] = "use super::super::b::B;\n"
        files["cache/b.rs"] = "pub(crate) struct B;\nmod inner { use super::super::a::deep; }\n"
        self.assertEqual(cycles(files), [["cache::a", "cache::b"]])

    def test_top_level_cycle(self):
        files = {"lib.rs": "mod x;\nmod y;\n", "x.rs": "use crate::y::Y;\npub struct X;\n",
                 "y.rs": "pub struct Y(crate::x::X);\n"}
        self.assertEqual(cycles(files), [["x", "y"]])

    def test_use_tree_expansion(self):
        self.assertEqual(mg.expand_use_tree("super::{a::{b, c as d}, self, e::*}"),
                         ["super::a::b", "super::a::c", "super", "super::e"])


if __name__ == "__main__":
    unittest.main()
