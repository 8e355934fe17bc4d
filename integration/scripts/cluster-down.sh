#!/usr/bin/env bash
# Stops the test cluster started by cluster-up.sh (kube-apiserver, then etcd)
# and deletes etcd's data, so the next cluster-up starts from an empty store.
# Uses the pid files in .run/cluster, and only signals a pid whose command line
# is still our binary (pids get reused). TERM, up to 20 s, then KILL.
# Keeps the certificates, tokens and logs. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$root/.run/bin"
state="$root/.run/cluster"
# The binaries the running cluster was started from (another minor's, under
# make test-matrix), as cluster-up.sh wrote them down.
if [[ -f "$state/env" ]] && grep -q '^K8S_BIN=' "$state/env"; then
  bin="$(sed -n 's/^K8S_BIN=//p' "$state/env")"
fi

ours() {  # ours <pid> <binary>: is <pid> alive and running <binary>?
  local argv0
  { IFS= read -r -d '' argv0 < "/proc/$1/cmdline"; } 2>/dev/null || return 1
  [[ "$argv0" == "$2" ]]
}

stop() {  # stop <name> <binary>
  local pidfile="$state/$1.pid" pid
  [[ -f "$pidfile" ]] || return 0
  pid="$(cat "$pidfile")"
  if ours "$pid" "$2"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do ours "$pid" "$2" || break; sleep 0.5; done
    if ours "$pid" "$2"; then
      echo "cluster-down: $1 (pid $pid) ignored TERM, killing" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do ours "$pid" "$2" || break; sleep 0.25; done
    fi
    echo "cluster-down: stopped $1 (pid $pid)"
  fi
  rm -f "$pidfile"
}

for extra in "$state"/apiserver-*.pid; do
  [[ -e "$extra" ]] && stop "$(basename "$extra" .pid)" "$bin/kube-apiserver"
done
stop apiserver "$bin/kube-apiserver"
stop etcd "$bin/etcd"
# CLUSTER_KEEP_ETCD_DATA: an etcd restore (etcd-swap.sh) has put its data there.
[[ -n "${CLUSTER_KEEP_ETCD_DATA:-}" ]] || rm -rf "$state/etcd"
