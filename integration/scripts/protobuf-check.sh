#!/usr/bin/env bash
# The protobuf encoder's proof (make protobuf-check, part of make test-unit):
#   1. the schema table is what the pinned Go types make (no drift);
#   2. a fuzz corpus of every built-in kind (integration/cmd/protocorpus,
#      fixed seed, a few objects per kind) encoded by Go, and every JSON of it
#      turned into protobuf by watchmux, byte for byte (the protobuf_corpus
#      test target);
#   3. the table against the OpenAPI v3 documents of the pinned Kubernetes
#      (what its kube-apiserver serves), as the start-up drift check sees them.
# Steps 2 and 3 run for every supported minor (integration/versions/minors.txt):
# the corpus from that minor's Go modules, its OpenAPI documents, the table's
# view for that minor.
# PROTOBUF_SEED and PROTOBUF_N choose the corpus (defaults 1 and 3); a longer
# run by hand: PROTOBUF_SEED=7 PROTOBUF_N=50 bash integration/scripts/protobuf-check.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
seed="${PROTOBUF_SEED:-1}"
n="${PROTOBUF_N:-3}"
out="$root/.run/protobuf-corpus"

bash "$root/integration/scripts/protobuf-schema.sh"
# shellcheck source-path=SCRIPTDIR source=versions-lib.sh
source "$root/integration/scripts/versions-lib.sh"
mkdir -p "$root/.run/bin"
# Steps 2 and 3 once a supported minor (PROTOBUF_MINORS chooses; default all):
# its corpus made by Go from that minor's own modules, its kube-apiserver's
# OpenAPI documents, and the table as watchmux reads it for that minor.
for minor in ${PROTOBUF_MINORS:-$(versions_minors)}; do
  release="$(versions_release "$minor")"
  modfile=()
  [[ $minor == "$(versions_pinned)" ]] || modfile=(-modfile="versions/$minor/go.mod")
  # Its own binary, outside build-k8s.sh's set; Go's build cache keeps it cheap.
  (cd "$root/integration" && GOTOOLCHAIN=local go build "${modfile[@]}" -o "$root/.run/bin/protocorpus-$minor" ./cmd/protocorpus)
  rm -rf "${out:?}/$minor"
  "$root/.run/bin/protocorpus-$minor" -out "$out/$minor" -seed "$seed" -n "$n"
  openapi="$(cd "$root/integration" && go env GOMODCACHE)/k8s.io/kubernetes@$release/api/openapi-spec/v3"
  if [[ ! -d "$openapi" ]]; then
    # The module is in the cache once anything of that minor has been built.
    (cd "$root/integration" && go mod download "k8s.io/kubernetes@$release")
  fi
  echo "protobuf-check: $minor ($release)"
  # The features every test step builds with (see the Makefile's test-unit): one dev build.
  (cd "$root" && WATCHMUX_PROTOBUF_MINOR="${minor#1.}" WATCHMUX_OPENAPI_DIR="$openapi" \
    WATCHMUX_PROTOBUF_CORPUS="$out/$minor/corpus.jsonl" \
    ${CARGO:-cargo} test --locked --features fault-injection --test protobuf_corpus -- --nocapture)
done
