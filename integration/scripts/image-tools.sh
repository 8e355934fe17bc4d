#!/usr/bin/env bash
# Builds the image tools from the Go module pinned in integration/tools/image
# into .run/bin: ocibuild (that module's main package: the Dockerfile, built
# into an OCI archive without a container daemon) and crane
# (go-containerregistry's CLI: the image test pushes the archive with it).
#
# Skipped when both exist and were built from the same inputs (go.mod, go.sum,
# the module's Go files, go version), recorded in .run/bin/.image-tools.stamp.
# A cold build takes about 70 s on two cores (modules already downloaded).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
mod="$root/integration/tools/image"
out="$root/.run/bin"
stamp_file="$out/.image-tools.stamp"
mkdir -p "$out"

stamp_inputs="$(cat "$mod/go.mod" "$mod/go.sum"; find "$mod" -name '*.go' | sort | xargs cat; go version)"
stamp="$(printf '%s' "$stamp_inputs" | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" && -x "$out/ocibuild" && -x "$out/crane" ]]; then
  echo "image-tools: ocibuild and crane up to date"
  exit 0
fi
ggcr="$(cd "$mod" && go list -m -f '{{.Version}}' github.com/google/go-containerregistry)"
echo "image-tools: building ocibuild and crane (go-containerregistry $ggcr)"
start=$(date +%s)
# go.mod and go.sum are tidy: the default -mod=readonly build changes neither.
# cgo as Go's default, as every Go build here (build-helm.sh says why).
(cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out/ocibuild" . &&
  go build -trimpath -ldflags "-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=$ggcr" \
    -o "$out/crane" github.com/google/go-containerregistry/cmd/crane)
echo "$stamp" > "$stamp_file"
echo "image-tools: done in $(( $(date +%s) - start ))s"
