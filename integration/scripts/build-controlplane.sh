#!/usr/bin/env bash
# Builds the real Kubernetes control-plane and node components used by the
# control-plane e2e (integration/scripts/controlplane-up.sh): kube-scheduler,
# kube-controller-manager and kubemark (the hollow node: real kubelet and
# kube-proxy code over a fake container runtime), from the k8s.io/kubernetes
# pin in integration/go.mod, and the scenario runner integration/cmd/cpscenario,
# into .run/bin.
#
# Why a separate script: build-k8s.sh is on everyone's default path and these
# three binaries add 10-20 minutes to a cold build on two cores; only the
# control-plane tests and benchmarks need them.
#
# Skipped when the binaries exist and were built from the same inputs
# (go.mod, go.sum, cmd/cpscenario, go version), recorded in .run/bin/.stamp-controlplane,
# or copied from the machine's tool cache (tool-cache.sh) in a clean checkout.
#
# Usage: integration/scripts/build-controlplane.sh
#   GO_NICE=10     niceness of the go build (default 10; the machine is shared)
#   CGO_ENABLED=1  default 1, as build-k8s.sh builds kube-apiserver, so the Go
#                  build cache of the shared k8s.io packages is reused (a cold
#                  CGO_ENABLED=0 build recompiles all of them)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
integ="$root/integration"
out="$root/.run/bin"
mkdir -p "$out"

k8s_version="$(awk '$1=="k8s.io/kubernetes"{print $2}' "$integ/go.mod" | head -1)"
stamp="$(cat "$integ/go.mod" "$integ/go.sum" "$integ"/cmd/cpscenario/*.go <(go version) <(echo "cgo=${CGO_ENABLED:-1}") | sha256sum | cut -d' ' -f1)"
bins=(kube-scheduler kube-controller-manager kubemark cpscenario)
# shellcheck source-path=SCRIPTDIR source=tool-cache.sh
source "$root/integration/scripts/tool-cache.sh"

all_present=1
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || all_present=0; done
if [[ $all_present == 1 && -f "$out/.stamp-controlplane" && "$(cat "$out/.stamp-controlplane")" == "$stamp" ]]; then
  echo "build-controlplane: binaries up to date ($k8s_version)"
  tool_cache_save controlplane "$stamp" "$out" "${bins[@]}"
  exit 0
fi
if tool_cache_restore controlplane "$stamp" "$out" "${bins[@]}"; then
  echo "$stamp" > "$out/.stamp-controlplane"
  exit 0
fi

minor="$(echo "$k8s_version" | cut -d. -f2)"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
  -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
  -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
echo "build-controlplane: building ${bins[*]} $k8s_version (cold: 10-20 min on 2 cores)"
start=$(date +%s)
(cd "$integ" && CGO_ENABLED="${CGO_ENABLED:-1}" nice -n "${GO_NICE:-10}" go build -trimpath -ldflags "$ldflags" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubemark ./cmd/cpscenario)
echo "$stamp" > "$out/.stamp-controlplane"
tool_cache_save controlplane "$stamp" "$out" "${bins[@]}"
echo "build-controlplane: done in $(( $(date +%s) - start ))s"
