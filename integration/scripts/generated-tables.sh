#!/usr/bin/env bash
# Regenerates the tables watchmux takes from the k8s.io/kubernetes pinned in
# integration/go.mod and fails when one differs from the committed file: a
# Kubernetes bump must come with the new tables. `--write` updates the
# committed files instead. Part of `make test-unit`.
#   src/encode/table/columns.txt  Table column definitions (cmd/tablecolumns)
#   src/encode/zero_objects.txt   BOOKMARK objects of every kind (cmd/zerojson)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp)"
trap 'rm -f "$tmp" "$tmp.diff"' EXIT
status=0

check() {
  local command="$1" committed="$root/$2"
  (cd "$root/integration" && go run "./cmd/$command" -o "$tmp")
  if [[ "${WRITE:-}" == 1 ]]; then
    cp "$tmp" "$committed"
    echo "generated-tables: wrote $2 ($(grep -vc '^#' "$committed") kinds)"
  elif ! diff -u "$committed" "$tmp" >"$tmp.diff"; then
    head -50 "$tmp.diff"
    echo "generated-tables: $2 differs from what integration/cmd/$command makes;" \
         "run bash integration/scripts/generated-tables.sh --write and review the diff" >&2
    status=1
  else
    echo "generated-tables: $2 is up to date ($(grep -vc '^#' "$committed") kinds)"
  fi
}

[[ "${1:-}" == "--write" ]] && WRITE=1
check tablecolumns src/encode/table/columns.txt
check zerojson src/encode/zero_objects.txt
exit "$status"
