#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd of one supported kube-apiserver minor
# from that minor's own Go modules (integration/versions/minors.txt).
#
#   build-k8s.sh            the pinned minor, from integration/go.mod, into
#                           .run/bin (kubectl also at .run/kubectl), with the
#                           client-go test programs (integration/cmd/watchcheck,
#                           difftest, pbcheck, pbbench), the upgrade bench's
#                           etcd oracle (etcdwatch) and the rollout bench's
#                           client-go informer fleet (informers) built in the
#                           same graph
#   build-k8s.sh <minor>    any other minor (1.34, ...), from
#                           integration/versions/<minor>/go.mod, into
#                           .run/versions/<minor>/bin (kube-apiserver, kubectl,
#                           etcd; the etcd that release's graph requires)
#
# The build is skipped when the binaries exist and were built from the same
# inputs (go.mod, go.sum, integration/cmd for the pinned minor, go version): a
# cold build of the pinned minor took 262 to 304 s on two cores (2026-12-02,
# module downloads included), a warm one a few seconds, and Go's own caches
# (GOCACHE, GOMODCACHE) keep even a rebuild cheap. A clean checkout takes them
# from the machine's tool cache (tool-cache.sh) when it holds a build of the
# same inputs (tool "k8s" for the pinned minor, "k8s-<minor>" for the others).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
integ="$root/integration"
# shellcheck source-path=SCRIPTDIR source=tool-cache.sh
source "$root/integration/scripts/tool-cache.sh"
# shellcheck source-path=SCRIPTDIR source=versions-lib.sh
source "$root/integration/scripts/versions-lib.sh"

pinned="$(versions_pinned)"
minor="${1:-$pinned}"
mod="$(versions_module_dir "$minor")"
k8s_version="$(versions_release "$minor")"
[[ -f $mod/go.mod ]] || { echo "build-k8s: $mod/go.mod missing (integration/scripts/versions-gomod.sh $minor writes it)" >&2; exit 1; }
have="$(awk '$1=="k8s.io/kubernetes"{print $2}' "$mod/go.mod" | head -1)"
[[ $have == "$k8s_version" ]] || { echo "build-k8s: $mod/go.mod pins $have, minors.txt says $k8s_version" >&2; exit 1; }

if [[ $minor == "$pinned" ]]; then
  out="$root/.run/bin" tool=k8s
  bins=(kube-apiserver kubectl etcd watchcheck difftest pbcheck pbbench etcdwatch informers)
  packages=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl ./cmd/etcd
            ./cmd/watchcheck ./cmd/difftest ./cmd/pbcheck ./cmd/pbbench ./cmd/etcdwatch ./cmd/informers)
  stamp_inputs="$(cat "$mod/go.mod" "$mod/go.sum"; find "$integ/cmd" -type f -name '*.go' | sort | xargs cat; go version)"
else
  out="$root/.run/versions/$minor/bin" tool="k8s-$minor"
  bins=(kube-apiserver kubectl etcd)
  # etcd's own main package (go build names it "server", after the module).
  packages=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3)
  stamp_inputs="$(cat "$mod/go.mod" "$mod/go.sum"; go version)"
fi
mkdir -p "$out"
stamp="$(printf '%s' "$stamp_inputs" | sha256sum | cut -d' ' -f1)"

all_present=1
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || all_present=0; done
if [[ $all_present == 1 && -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$stamp" ]]; then
  echo "build-k8s: binaries up to date ($k8s_version)"
  tool_cache_save "$tool" "$stamp" "$out" "${bins[@]}"
elif tool_cache_restore "$tool" "$stamp" "$out" "${bins[@]}"; then
  echo "$stamp" > "$out/.stamp"
else
  minor_number="${minor#*.}"
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
    -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor_number \
    -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
    -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor_number"
  echo "build-k8s: building ${bins[*]} $k8s_version (cold: about 5 min on 2 cores)"
  start=$(date +%s)
  (cd "$mod" && GOTOOLCHAIN=local go build -trimpath -ldflags "$ldflags" -o "$out/" "${packages[@]}")
  [[ $minor == "$pinned" ]] || mv -f "$out/server" "$out/etcd"
  echo "$stamp" > "$out/.stamp"
  tool_cache_save "$tool" "$stamp" "$out" "${bins[@]}"
  echo "build-k8s: $k8s_version done in $(( $(date +%s) - start ))s"
fi
[[ $minor != "$pinned" ]] || ln -sf bin/kubectl "$root/.run/kubectl"
