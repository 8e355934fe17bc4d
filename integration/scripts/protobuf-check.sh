#!/usr/bin/env bash
# The protobuf encoder's proof (make protobuf-check, part of make test-unit):
#   1. the schema table is what the pinned Go types make (no drift);
#   2. a fuzz corpus of every built-in kind (integration/cmd/protocorpus,
#      fixed seed, a few objects per kind) encoded by Go, and every JSON of it
#      turned into protobuf by watchmux, byte for byte (the protobuf_corpus
#      test target);
#   3. the table against the OpenAPI v3 documents of the pinned Kubernetes
#      (what its kube-apiserver serves), as the start-up drift check sees them.
# PROTOBUF_SEED and PROTOBUF_N choose the corpus (defaults 1 and 3); a longer
# run by hand: PROTOBUF_SEED=7 PROTOBUF_N=50 bash integration/scripts/protobuf-check.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
seed="${PROTOBUF_SEED:-1}"
n="${PROTOBUF_N:-3}"
out="$root/.run/protobuf-corpus"

bash "$root/integration/scripts/protobuf-schema.sh"
mkdir -p "$root/.run/bin"
# Its own binary, outside build-k8s.sh's set; Go's build cache keeps it cheap.
(cd "$root/integration" && go build -o "$root/.run/bin/protocorpus" ./cmd/protocorpus)
rm -rf "$out"
"$root/.run/bin/protocorpus" -out "$out" -seed "$seed" -n "$n"
k8s_version="$(awk '$1=="k8s.io/kubernetes"{print $2}' "$root/integration/go.mod" | head -1)"
openapi="$(cd "$root/integration" && go env GOMODCACHE)/k8s.io/kubernetes@$k8s_version/api/openapi-spec/v3"
if [[ ! -d "$openapi" ]]; then
  # The module is in the cache once anything in integration/ has been built.
  (cd "$root/integration" && go mod download k8s.io/kubernetes)
fi
cd "$root"
# The features every test step builds with (see the Makefile's test-unit): one dev build.
WATCHMUX_OPENAPI_DIR="$openapi" WATCHMUX_PROTOBUF_CORPUS="$out/corpus.jsonl" ${CARGO:-cargo} test --locked --features fault-injection --test protobuf_corpus -- --nocapture
