#!/usr/bin/env python3
"""docs/architecture.md's module table against src/lib.rs: every top-level module lib.rs
declares (test-only ones aside) has a row, and every row names one.

Run by `make test-unit`. Exits 1 and names the difference when they part.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parents[2]
lib = (root / "src" / "lib.rs").read_text()
readme = (root / "docs" / "architecture.md").read_text()

declared = set()
test_only = False
for line in lib.splitlines():
    line = line.strip()
    if line == "#[cfg(test)]":
        test_only = True
        continue
    m = re.match(r"(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_0-9]+)\s*;", line)
    if m and not test_only:
        declared.add(m.group(1))
    test_only = False

table = readme[readme.index("| module | holds |"):]
rows = set()
for line in table.splitlines()[2:]:
    if not line.startswith("|"):
        break
    m = re.match(r"\|\s*`([a-z_0-9]+)`\s*\|", line)
    if m:
        rows.add(m.group(1))

missing, stale = sorted(declared - rows), sorted(rows - declared)
if missing or stale:
    if missing:
        print(f"module-table: docs/architecture.md has no row for {', '.join(missing)} (declared in src/lib.rs)")
    if stale:
        print(f"module-table: docs/architecture.md has a row for {', '.join(stale)}, which src/lib.rs does not declare")
    sys.exit(1)
print(f"module-table: docs/architecture.md's {len(rows)} rows match src/lib.rs")
