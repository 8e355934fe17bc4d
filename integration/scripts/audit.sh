#!/usr/bin/env bash
# Checks Cargo.lock against the RustSec advisory database with cargo-audit.
# Only the package registries are reachable here, so the database cannot be
# fetched at run time: point AUDIT_DB at a local checkout (or extracted copy)
# of the advisory database. cargo-audit itself comes from the crate registry
# (`cargo install cargo-audit --locked`); CARGO_AUDIT may name the binary.
# Not part of `make test`: the result depends on the database's date.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
: "${AUDIT_DB:?set AUDIT_DB to a local copy of the RustSec advisory database}"
audit="${CARGO_AUDIT:-$(command -v cargo-audit || true)}"
[[ -x $audit ]] || { echo "audit: cargo-audit not found (cargo install cargo-audit --locked)" >&2; exit 1; }
[[ -d $AUDIT_DB/crates ]] || { echo "audit: $AUDIT_DB has no crates/ directory" >&2; exit 1; }
echo "advisory database: $AUDIT_DB ($(git -C "$AUDIT_DB" log -1 --format=%cs 2>/dev/null || echo 'date unknown'))"
"$audit" audit --db "$AUDIT_DB" --no-fetch --stale --deny warnings
