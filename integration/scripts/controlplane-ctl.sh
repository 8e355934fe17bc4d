#!/usr/bin/env bash
# Stops, starts or restarts one process of the control plane started by
# controlplane-up.sh (a hollow kubelet, a watchmux, ...), with the command line
# that script recorded in .run/controlplane/cmds/<name>. The scenario runner
# (integration/cmd/cpscenario) uses it to stop a kubelet and to restart
# watchmux in the middle of a rollout.
#
# Usage: integration/scripts/controlplane-ctl.sh stop|start|restart <name>
#   names: ls .run/controlplane/cmds (kubelet-hollow-node-0, watchmux-tier,
#   watchmux-hollow-node-0, kube-scheduler, ...). restart of a watchmux waits
#   until its /readyz answers ok (60 s at most).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cp="$root/.run/controlplane"
action="${1:-}"; name="${2:-}"
[[ -n "$name" && -f "$cp/cmds/$name" ]] || { echo "usage: $0 stop|start|restart <name in $cp/cmds>" >&2; exit 2; }

stop() {
  local pid argv
  [[ -f "$cp/pids/$name.pid" ]] || return 0
  pid="$(cat "$cp/pids/$name.pid")"
  argv="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" || { rm -f "$cp/pids/$name.pid"; return 0; }
  # Only our process: its command line is the recorded one's first word.
  # (the first word that is neither env nor VAR=value).
  local want
  want="$(awk '{for (i = 1; i <= NF; i++) if ($i != "env" && $i !~ /=/) {print $i; exit}}' "$cp/cmds/$name")"
  [[ "$argv" == *"$(basename "$want")"* ]] || { rm -f "$cp/pids/$name.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  # Gone once it exits: started by a subshell that has since ended, it is
  # reaped by whoever adopted it, which may take seconds (here about two),
  # and a restart's gap would grow by them: a zombie counts as gone.
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    [[ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" == Z ]] && break
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$cp/pids/$name.pid"
}
start() {
  ( eval "exec setsid nohup $(cat "$cp/cmds/$name")" >> "$cp/logs/$name.log" 2>&1 < /dev/null ) &
  echo $! > "$cp/pids/$name.pid"
  local admin
  admin="$(grep -o -- '--admin-listen=[^ ]*' "$cp/cmds/$name" | cut -d= -f2 || true)"
  if [[ -n "$admin" ]]; then
    for _ in $(seq 1 240); do
      [[ "$(curl -fsS --max-time 2 "http://$admin/readyz" 2>/dev/null)" == *ok* ]] && return 0
      sleep 0.25
    done
    echo "controlplane-ctl: $name not ready within 60s" >&2; exit 1
  fi
}
case "$action" in
  stop) stop ;;
  start) start ;;
  restart) stop; start ;;
  *) echo "usage: $0 stop|start|restart <name>" >&2; exit 2 ;;
esac
