#!/usr/bin/env bash
# The test cluster's etcd saved, restored from that older copy, or wiped:
# the same API server address in front of another cluster, as after an
# etcd restore from a backup or a cluster rebuilt from scratch.
#
#   etcd-swap.sh save DIR     a crash-consistent copy of etcd's data in DIR
#                             (etcd stopped with SIGSTOP while it is copied:
#                             the copy is what a crash at that moment leaves,
#                             which etcd recovers from its WAL)
#   etcd-swap.sh restore DIR  stops the cluster and starts it again on a copy
#                             of DIR: an older revision, the same cluster's
#                             identity (kube-system's uid)
#   etcd-swap.sh wipe         stops the cluster and starts it on an empty etcd:
#                             a new identity, revisions from 1
#
# The ports are the running cluster's (.run/cluster/env; the peer port is
# ETCD_PEER_PORT, or the client port + 1 as every caller here picks them).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
state="$root/.run/cluster"
[[ -f "$state/env" ]] || { echo "etcd-swap: no cluster (.run/cluster/env)" >&2; exit 1; }
etcd_url="$(sed -n 's/^ETCD_ENDPOINT=//p' "$state/env")"
api_url="$(sed -n 's/^APISERVER_URL=//p' "$state/env")"
export ETCD_PORT="${etcd_url##*:}" APISERVER_PORT="${api_url##*:}"
export ETCD_PEER_PORT="${ETCD_PEER_PORT:-$((ETCD_PORT + 1))}"

case "${1:-}" in
  save)
    dest="${2:?usage: etcd-swap.sh save DIR}"
    pid="$(cat "$state/etcd.pid")"
    kill -STOP "$pid"
    trap 'kill -CONT "$pid"' EXIT
    rm -rf "$dest"
    cp -a "$state/etcd" "$dest"
    ;;
  restore)
    src="${2:?usage: etcd-swap.sh restore DIR}"
    [[ -d "$src/member" ]] || { echo "etcd-swap: $src holds no etcd data" >&2; exit 1; }
    "$scripts/cluster-down.sh" >/dev/null
    cp -a "$src" "$state/etcd"
    CLUSTER_KEEP_ETCD_DATA=1 "$scripts/cluster-up.sh"
    ;;
  wipe)
    "$scripts/cluster-down.sh" >/dev/null
    "$scripts/cluster-up.sh"
    ;;
  *) echo "usage: etcd-swap.sh save DIR | restore DIR | wipe" >&2; exit 2 ;;
esac
