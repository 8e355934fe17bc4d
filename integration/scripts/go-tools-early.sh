#!/usr/bin/env bash
# `make test`'s first step: starts the builds of the Go-built tools the later
# steps need (helm and promtool for the monitoring and chart checks,
# kube-apiserver, etcd, kubectl and the client-go checkers for the end-to-end
# suite, the control plane for its scenario) in the background, niced, and
# returns at once. On a cold machine those builds are about 15 minutes, much of
# it fetching modules, which used to wait for the Rust build and unit tests to
# end; now they overlap. Each build script holds a lock on its tool
# (tool_lock in tool-cache.sh), so the step that needs a tool waits for the
# background build instead of starting a second one, then finds it up to date.
# A background build that fails is only logged: the step that needs the tool
# builds it again and fails there, with its own output.
#
# Log: .run/logs/go-tools-early.log. WATCHMUX_GO_TOOLS_EARLY=0 turns it off.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
[[ ${WATCHMUX_GO_TOOLS_EARLY:-1} == 0 ]] && exit 0
command -v go >/dev/null || exit 0
command -v flock >/dev/null || exit 0
mkdir -p "$root/.run/logs"
log="$root/.run/logs/go-tools-early.log"
(
  for b in build-helm build-promtool build-k8s build-controlplane; do
    GO_NICE=10 nice -n 10 bash "$scripts/$b.sh" || echo "go-tools-early: $b failed; the step that needs it builds it again"
  done
) > "$log" 2>&1 < /dev/null &
disown
echo "go-tools-early: building the Go tools in the background (pid $!, log .run/logs/go-tools-early.log)"
