#!/usr/bin/env bash
# Regenerates the protobuf schema table (src/encode/protobuf/schema.txt) and
# fails when it differs from the committed file: a Kubernetes bump, or a
# minor added to integration/versions/minors.txt, must come with the new
# table. `--write` updates the committed file instead.
#
# The table is the union of every supported minor's: integration/cmd/protoschema
# runs against each minor's own Go modules (the pinned one's integration/go.mod,
# the others' integration/versions/<minor>/go.mod through go -modfile), and
# integration/scripts/protobuf-union.py merges them, marking what only some
# minors have and failing on any conflict (docs/versions.md).
#
# Built with `go run` into Go's build cache (warm for k8s.io packages: a few
# seconds a minor), not into .run/bin.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
# shellcheck source-path=SCRIPTDIR source=versions-lib.sh
source "$scripts/versions-lib.sh"
table="$root/src/encode/protobuf/schema.txt"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

inputs=()
for minor in $(versions_minors); do
  modfile=()
  [[ $minor == "$(versions_pinned)" ]] || modfile=(-modfile="versions/$minor/go.mod")
  (cd "$root/integration" && GOTOOLCHAIN=local go run "${modfile[@]}" ./cmd/protoschema -o "$tmp/$minor.txt")
  inputs+=("$minor=$tmp/$minor.txt")
done
python3 "$scripts/protobuf-union.py" -o "$tmp/schema.txt" "${inputs[@]}"
if [[ "${1:-}" == "--write" ]]; then
  cp "$tmp/schema.txt" "$table"
  echo "protobuf-schema: wrote $table ($(grep -c '^kind ' "$table") kinds, $(grep -c '^message ' "$table") messages," \
       "$(grep -c ' minors=' "$table") lines of some minors only)"
  exit 0
fi
if ! diff -u "$table" "$tmp/schema.txt" >"$tmp/diff"; then
  head -50 "$tmp/diff"
  echo "protobuf-schema: $table differs from what integration/cmd/protoschema makes;" \
       "run bash integration/scripts/protobuf-schema.sh --write and review the diff" >&2
  exit 1
fi
echo "protobuf-schema: $table is up to date ($(grep -c '^kind ' "$table") kinds, $(grep -c '^message ' "$table") messages)"
