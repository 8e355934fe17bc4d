#!/usr/bin/env bash
# Regenerates the Table column definitions (src/encode/table/columns.txt) from
# the printers of the k8s.io/kubernetes pinned in integration/go.mod
# (integration/cmd/tablecolumns) and fails when they differ from the committed
# file: a Kubernetes bump must come with the new columns. `--write` updates
# the committed file instead. Part of `make test-unit`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
columns="$root/src/encode/table/columns.txt"
tmp="$(mktemp)"
trap 'rm -f "$tmp" "$tmp.diff"' EXIT

(cd "$root/integration" && go run ./cmd/tablecolumns -o "$tmp")
if [[ "${1:-}" == "--write" ]]; then
  cp "$tmp" "$columns"
  echo "table-columns: wrote $columns ($(grep -vc '^#' "$columns") kinds)"
  exit 0
fi
if ! diff -u "$columns" "$tmp" >"$tmp.diff"; then
  head -50 "$tmp.diff"
  echo "table-columns: $columns differs from what integration/cmd/tablecolumns makes;" \
       "run bash integration/scripts/table-columns.sh --write and review the diff" >&2
  exit 1
fi
echo "table-columns: $columns is up to date ($(grep -vc '^#' "$columns") kinds)"
