# Sourced by chart-check.sh (one shell: its variables, say/fail/note and the
# cases are in scope); offline: the binary's flags, lint and template of every
# case, monitoring renders.
# shellcheck shell=bash

# --- the binary's flags --------------------------------------------------------
watchmux_bin="${WATCHMUX_BIN:-}"
if [[ -z $watchmux_bin ]]; then
  # The newer build: a release binary left from an earlier make release may
  # predate the source (and its flags) that make test just built in debug.
  for b in "$root/target/release/watchmux" "$root/target/debug/watchmux"; do
    [[ -x $b ]] || continue
    if [[ -z $watchmux_bin || $b -nt $watchmux_bin ]]; then watchmux_bin="$b"; fi
  done
fi
binary_flags=""
if [[ -n $watchmux_bin ]]; then
  binary_flags="$("$watchmux_bin" --help | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u)"
  # and the static-pod installer's (`watchmux install-static-pod`, whose usage
  # names them; its exact arguments are checked with the static pod below)
  installer_usage="$("$watchmux_bin" install-static-pod --help 2>&1 || true)"
  binary_flags="$( { echo "$binary_flags"; grep 'usage: watchmux install-static-pod' <<<"$installer_usage" |
    grep -oE -- '--[a-z0-9][a-z0-9-]*' || true; } | sort -u)"
else
  note "no watchmux binary (target/{release,debug}/watchmux or WATCHMUX_BIN): flag check skipped"
fi
check_flags() {  # check_flags <case> <file> [flags exempt, comma-separated]
  [[ -n $binary_flags ]] || return 0
  local flag bad=0 exempt=",${3:-},"
  while read -r flag; do
    [[ -z $flag ]] && continue
    [[ $exempt == *",$flag,"* ]] && continue
    if ! grep -qx -- "$flag" <<<"$binary_flags"; then
      fail "$1: passes $flag, which \`watchmux --help\` does not list"
      bad=1
    fi
  done < <(grep -oE -- '^[[:space:]]*- "?--[a-z0-9][a-z0-9-]*' "$2" | grep -oE -- '--[a-z0-9-]+' | sort -u)
  return $bad
}

# --- offline: lint, template, flags --------------------------------------------
say "helm $("$helm" version --template '{{.Version}}'), chart $chart"
for c in "${cases[@]}"; do
  IFS='|' read -r name nskind future args <<<"$c"
  eval "set -- $args"
  if ! "$helm" lint --strict --quiet "$chart" "$@" >"$tmp/lint-$name.log" 2>&1; then
    cat "$tmp/lint-$name.log" >&2; fail "$name: helm lint --strict"
  fi
  if ! "$helm" template watchmux "$chart" -n "$(ns_for "$nskind")" "$@" >"$tmp/$name.yaml" 2>"$tmp/$name.err"; then
    cat "$tmp/$name.err" >&2; fail "$name: helm template"; continue
  fi
  kinds="$(grep -E '^kind:' "$tmp/$name.yaml" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s", sep, ($1 > 1 ? $1 "x" : "") $2; sep=", "}')"
  [[ $future == - ]] || note "$name: passes the not-yet-implemented ${future//,/ } on purpose; not checked against the binary"
  if check_flags "$name" "$tmp/$name.yaml" "$future"; then
    say "ok   template $name: $kinds"
  fi
done

# --- offline: monitoring ------------------------------------------------------------
# nodeLocal with hostNetwork binds the admin port on the node's IP only when
# asked (then its probes go to the pod IP, which is the node's); the
# dashboard and the rules render where asked. monitoring-check.sh checks the
# rules with promtool and the dashboard's queries.
if [[ -f $tmp/nodelocal-metrics-on-host.yaml && -f $tmp/nodelocal.yaml ]]; then
  admin_of() { yq -r 'select(.kind == "DaemonSet") | .spec.template.spec.containers[] | select(.name == "watchmux") | (.args[] | select(startswith("--admin-listen="))), ([.livenessProbe.httpGet.host, .readinessProbe.httpGet.host] | map(. // "pod-ip") | join(","))' "$1" | paste -sd' ' -; }
  on_host="$(admin_of "$tmp/nodelocal-metrics-on-host.yaml")"
  loopback="$(admin_of "$tmp/nodelocal.yaml")"
  if [[ $on_host == '--admin-listen=$(HOST_IP):9444 pod-ip,pod-ip' && $loopback == '--admin-listen=127.0.0.1:9444 127.0.0.1,127.0.0.1' ]]; then
    say "ok   nodeLocal admin port: loopback by default, \$(HOST_IP) with nodeLocal.adminOnHostIP (probes follow)"
  else
    fail "nodeLocal admin port: default '$loopback', with adminOnHostIP '$on_host'"
  fi
  for kind in ServiceMonitor PrometheusRule ConfigMap; do
    grep -q "^kind: $kind" "$tmp/nodelocal-metrics-on-host.yaml" || fail "nodelocal-metrics-on-host: no $kind rendered"
  done
fi
