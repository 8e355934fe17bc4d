#!/usr/bin/env bash
# Regenerates the protobuf schema table (src/encode/protobuf/schema.txt) from
# the Go types pinned in integration/go.mod (integration/cmd/protoschema) and
# fails when it differs from the committed file: a k8s.io/api bump must come
# with the new table. `--write` updates the committed file instead.
#
# Built with `go run` into Go's build cache (warm for k8s.io packages: a few
# seconds), not into .run/bin.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
table="$root/src/encode/protobuf/schema.txt"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT

(cd "$root/integration" && go run ./cmd/protoschema -o "$tmp")
if [[ "${1:-}" == "--write" ]]; then
  cp "$tmp" "$table"
  echo "protobuf-schema: wrote $table ($(grep -c '^kind ' "$table") kinds, $(grep -c '^message ' "$table") messages)"
  exit 0
fi
if ! diff -u "$table" "$tmp" >"$tmp.diff"; then
  head -50 "$tmp.diff"
  rm -f "$tmp.diff"
  echo "protobuf-schema: $table differs from what integration/cmd/protoschema makes;" \
       "run bash integration/scripts/protobuf-schema.sh --write and review the diff" >&2
  exit 1
fi
rm -f "$tmp.diff"
echo "protobuf-schema: $table is up to date ($(grep -c '^kind ' "$table") kinds, $(grep -c '^message ' "$table") messages)"
