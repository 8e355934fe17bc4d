#!/usr/bin/env bash
# Sourced by the scripts that work on every supported kube-apiserver minor
# (build-k8s.sh, versions-gomod.sh, matrix.sh, protobuf-schema.sh): one
# reading of integration/versions/minors.txt.

versions_file="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/versions/minors.txt"

# versions_minors: every supported minor, oldest first.
versions_minors() { awk '!/^#/ && NF {print $1}' "$versions_file"; }

# versions_pinned: the minor integration/go.mod builds.
versions_pinned() { awk '!/^#/ && $3 == "pinned" {print $1}' "$versions_file"; }

# versions_release <minor>: its k8s.io/kubernetes release (v1.NN.P).
versions_release() {
  local v
  v="$(awk -v m="$1" '!/^#/ && $1 == m {print $2}' "$versions_file")"
  [[ -n $v ]] || { echo "versions: minor $1 is not in $versions_file" >&2; return 1; }
  echo "$v"
}

# versions_module_dir <minor>: the Go module that builds that minor's binaries.
versions_module_dir() {
  local integ
  integ="$(dirname "$(dirname "$versions_file")")"
  if [[ $1 == "$(versions_pinned)" ]]; then echo "$integ"; else echo "$integ/versions/$1"; fi
}
