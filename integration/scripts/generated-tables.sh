#!/usr/bin/env bash
# Regenerates the tables watchmux takes from k8s.io/kubernetes and fails when
# one differs from the committed file: a Kubernetes bump, or a minor added to
# integration/versions/minors.txt, must come with the new tables. `--write`
# updates the committed files instead. Part of `make test-unit`.
#   src/encode/table/columns.txt  Table column definitions (cmd/tablecolumns)
#   src/encode/zero_objects.txt   BOOKMARK objects of every kind (cmd/zerojson)
# Each is made from every supported minor's own Go modules (the pinned one's
# integration/go.mod, the others' integration/versions/<minor>/go.mod through
# go -modfile) and merged by lines-union.py: a line that differs between
# minors is kept once a minor, marked with the minors it is for.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
# shellcheck source-path=SCRIPTDIR source=versions-lib.sh
source "$scripts/versions-lib.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
status=0

check() {
  local command="$1" committed="$root/$2" inputs=() minor modfile
  for minor in $(versions_minors); do
    modfile=()
    [[ $minor == "$(versions_pinned)" ]] || modfile=(-modfile="versions/$minor/go.mod")
    (cd "$root/integration" && GOTOOLCHAIN=local go run "${modfile[@]}" "./cmd/$command" -o "$tmp/$command-$minor")
    inputs+=("$minor=$tmp/$command-$minor")
  done
  python3 "$scripts/lines-union.py" --key 2 -o "$tmp/$command" "${inputs[@]}"
  if [[ "${WRITE:-}" == 1 ]]; then
    cp "$tmp/$command" "$committed"
    echo "generated-tables: wrote $2 ($(grep -vc '^#' "$committed") lines, $(grep -c '^minors=' "$committed") of some minors only)"
  elif ! diff -u "$committed" "$tmp/$command" >"$tmp/diff"; then
    head -50 "$tmp/diff"
    echo "generated-tables: $2 differs from what integration/cmd/$command makes;" \
         "run bash integration/scripts/generated-tables.sh --write and review the diff" >&2
    status=1
  else
    echo "generated-tables: $2 is up to date ($(grep -vc '^#' "$committed") lines)"
  fi
}

[[ "${1:-}" == "--write" ]] && WRITE=1
check tablecolumns src/encode/table/columns.txt
check zerojson src/encode/zero_objects.txt
exit "$status"
