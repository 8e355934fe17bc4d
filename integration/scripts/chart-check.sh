#!/usr/bin/env bash
# Checks the Helm chart charts/watchmux and the deployment examples.
#
#   integration/scripts/chart-check.sh [KUBECONFIG]
#
# Always (offline):
#   - helm lint --strict, and helm template, for every case below (each mode;
#     ServiceMonitor on; cert-manager on; the example values files);
#   - values the chart must refuse (schema and template checks) are refused;
#   - every --flag the chart passes is one `watchmux --help` lists (cases that
#     turn on the not-yet-implemented flags are exempt, and say so);
#   - the chart-generated serving certificate verifies against its CA and
#     carries the expected names;
#   - charts/watchmux/examples/sidecar-rendered.yaml is what the chart renders
#     now (CHART_CHECK_UPDATE=1 rewrites it), and the sidecar container in
#     sidecar-app.yaml is the chart's;
#   - examples/kubelet-kubeconfig.yaml parses as a kubeconfig.
# With a kubeconfig (the test cluster's .run/kubeconfig, a real kube-apiserver):
#   - every rendered manifest and every example manifest goes through
#     `kubectl apply --dry-run=server --warnings-as-errors` in scratch
#     namespaces this script creates (Pod Security "restricted" enforced and
#     warned for tier/sidecar, "privileged" for the hostNetwork DaemonSet) and
#     deletes again; kinds whose API is not served (ServiceMonitor,
#     cert-manager's Certificate/Issuer without their CRDs) are skipped with a
#     note;
#   - end to end, for nodeLocal, tier and sidecar: the watchmux binary started
#     with the rendered args (addresses and file paths made local) and the
#     rendered certificate answers kubectl using the rendered client kubeconfig;
#   - a real install + upgrade (nodeLocal) shows the generated CA and serving
#     certificate are kept across upgrades, and the CA Secret across uninstall.
#
# Helm comes from integration/tools/helm (build-helm.sh), kubectl from
# .run/kubectl (build-k8s.sh; override with KUBECTL). Exits non-zero on any
# failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
chart="$root/charts/watchmux"
kubeconfig="${1:-}"

bash "$scripts/build-helm.sh" >&2
helm="$root/.run/helm"
kubectl="${KUBECTL:-$root/.run/kubectl}"

tmp="$(mktemp -d)"
failures=0
namespaces=()
say() { echo "chart-check: $*"; }
fail() { echo "chart-check: FAIL: $*" >&2; failures=$((failures + 1)); }
note() { echo "chart-check: note: $*"; }

proxy_pid=""
rel=""
rel_installed=0
cleanup() {
  if [[ -n $proxy_pid ]]; then kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; fi
  # A release left by a run that stopped half-way (its ClusterRoles are not
  # removed with the namespace).
  if [[ $rel_installed == 1 ]]; then "$helm" uninstall "$rel" --kubeconfig "$kubeconfig" -n "$ns_privileged" >/dev/null 2>&1 || true; fi
  if [[ ${#namespaces[@]} -gt 0 ]]; then delete_namespaces "${namespaces[@]}" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- cases ---------------------------------------------------------------------
# name | namespace kind (restricted|privileged) | future flags? (future|-) | helm args
examples="$chart/examples"
cases=(
  "tier|restricted|-|--set mode=tier"
  "tier-servicemonitor|restricted|-|--set mode=tier --set serviceMonitor.enabled=true --set networkPolicy.enabled=true"
  "tier-certmanager|restricted|-|--set mode=tier --set certManager.enabled=true"
  "tier-plain-existing-issuer|restricted|-|--set mode=tier --set tls.enabled=false --set certManager.enabled=true --set certManager.issuerRef.name=corp-ca --set certManager.issuerRef.kind=ClusterIssuer"
  "tier-example-values|restricted|-|-f $examples/tier-values.yaml"
  "nodelocal|privileged|-|--set mode=nodeLocal"
  "nodelocal-servicemonitor|privileged|-|--set mode=nodeLocal --set serviceMonitor.enabled=true --set admin.listenAddress='\$(HOST_IP)'"
  "nodelocal-certmanager|privileged|-|--set mode=nodeLocal --set certManager.enabled=true"
  "nodelocal-hostport|privileged|-|--set mode=nodeLocal --set nodeLocal.hostNetwork=false --set nodeLocal.hostIP=0.0.0.0 --set upstream.apiserverHost=kubernetes.example --set upstream.apiserverPort=6443"
  "nodelocal-example-values|privileged|-|-f $examples/node-local-values.yaml"
  "sidecar|restricted|-|--set mode=sidecar"
  "sidecar-servicemonitor|restricted|-|--set mode=sidecar --set serviceMonitor.enabled=true"
  "sidecar-example-values|restricted|-|-f $examples/sidecar-values.yaml"
  "nodelocal-future-flags|privileged|future|--set mode=nodeLocal --set cache.enabled=true --set auth.mode=delegated --set auth.clientCA.configMap=client-ca --set 'rbac.extraClusterRoles[0]=system:node'"
)
# Values the chart must refuse: name | helm args
refusals=(
  "unknown-mode|--set mode=daemon"
  "unknown-key|--set replicas=3"
  "certmanager-and-existing-secret|--set certManager.enabled=true --set tls.existingSecret=mine"
  "pdb-both-bounds|--set tier.pdb.minAvailable=1"
  "bad-duration|--set shutdownGrace=3days"
)

ns_restricted="watchmux-chart-check-r-$$"
ns_privileged="watchmux-chart-check-p-$$"
ns_for() { if [[ $1 == privileged ]]; then echo "$ns_privileged"; else echo "$ns_restricted"; fi; }

# Splits a multi-document YAML file into $2/NNN.yaml, one object each (helm
# output separates documents with lines that are exactly "---").
split_docs() {
  mkdir -p "$2"
  awk -v dir="$2" '
    function next_file() { n++; f = sprintf("%s/%03d.yaml", dir, n) }
    BEGIN { n = 0; next_file() }
    /^---[[:space:]]*$/ { close(f); next_file(); next }
    { print > f }
  ' "$1"
  local f
  for f in "$2"/*.yaml; do
    grep -q '^kind:' "$f" 2>/dev/null || rm -f "$f"
  done
}
doc_field() { awk -v k="$1" '$1 == k":" { print $2; exit }' "$2"; }
doc_name() { awk '/^metadata:/ { m = 1; next } m && /^  name:/ { print $2; exit } m && /^[^ ]/ { m = 0 }' "$1"; }

# --- the binary's flags --------------------------------------------------------
watchmux_bin="${WATCHMUX_BIN:-}"
if [[ -z $watchmux_bin ]]; then
  for b in "$root/target/release/watchmux" "$root/target/debug/watchmux"; do
    [[ -x $b ]] && { watchmux_bin="$b"; break; }
  done
fi
binary_flags=""
if [[ -n $watchmux_bin ]]; then
  binary_flags="$("$watchmux_bin" --help | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u)"
else
  note "no watchmux binary (target/{release,debug}/watchmux or WATCHMUX_BIN): flag check skipped"
fi
check_flags() {  # check_flags <case> <file>
  [[ -n $binary_flags ]] || return 0
  local flag bad=0
  while read -r flag; do
    [[ -z $flag ]] && continue
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
  if [[ $future == future ]]; then
    note "$name: passes the not-yet-implemented flags on purpose; flag check skipped"
    say "ok   template $name: $kinds"
  elif check_flags "$name" "$tmp/$name.yaml"; then
    say "ok   template $name: $kinds"
  fi
done

if [[ -n $binary_flags ]]; then
  "$helm" template watchmux "$chart" --set 'extraArgs[0]=--no-such-flag' >"$tmp/bogus-flag.yaml"
  if (check_flags self-test "$tmp/bogus-flag.yaml") 2>/dev/null; then
    fail "the flag check accepted --no-such-flag"
  else
    say "ok   the flag check refuses a flag the binary lacks (--no-such-flag)"
  fi
fi

for r in "${refusals[@]}"; do
  IFS='|' read -r name args <<<"$r"
  eval "set -- $args"
  if "$helm" template watchmux "$chart" "$@" >/dev/null 2>"$tmp/refusal.err"; then
    fail "refusal $name: helm template accepted $args"
  else
    say "ok   refused $name: $(grep -m1 -E '^- at |execution error' "$tmp/refusal.err" | sed 's/.*execution error at //' | cut -c1-150)"
  fi
done

# The chart-generated serving certificate: signed by its CA, with the names
# clients dial.
check_generated_cert() {  # <case> <expected SAN substrings...>
  local name="$1"; shift
  local d="$tmp/cert-$name"
  split_docs "$tmp/$name.yaml" "$d"
  local f crt="" ca=""
  for f in "$d"/*.yaml; do
    if [[ $(doc_field kind "$f") == Secret && $(doc_name "$f") == *-tls ]]; then
      crt="$(awk '$1 == "tls.crt:" { print $2 }' "$f")"
      ca="$(awk '$1 == "ca.crt:" { print $2 }' "$f")"
    fi
  done
  if [[ -z $crt || -z $ca ]]; then fail "$name: no generated TLS Secret rendered"; return; fi
  base64 -d <<<"$crt" >"$d/tls.crt"; base64 -d <<<"$ca" >"$d/ca.crt"
  if ! openssl verify -CAfile "$d/ca.crt" "$d/tls.crt" >/dev/null 2>&1; then
    fail "$name: serving certificate does not verify against its CA"; return
  fi
  local sans; sans="$(openssl x509 -in "$d/tls.crt" -noout -ext subjectAltName 2>/dev/null | tail -n +2 | tr -d ' ')"
  local want
  for want in "$@"; do
    [[ $sans == *"$want"* ]] || { fail "$name: serving certificate lacks $want (has $sans)"; return; }
  done
  say "ok   generated certificate $name: verifies against its CA; $sans"
}
check_generated_cert tier "DNS:watchmux.$ns_restricted.svc" "DNS:watchmux.$ns_restricted.svc.cluster.local"
check_generated_cert nodelocal "IPAddress:127.0.0.1" "DNS:watchmux.node.local" "DNS:localhost"

# The rendered sidecar example is current, and the app example carries the
# chart's container.
sidecar_render() {
  echo "# Generated by: helm template watchmux charts/watchmux -n demo -f charts/watchmux/examples/sidecar-values.yaml"
  echo "# integration/scripts/chart-check.sh checks it is current; CHART_CHECK_UPDATE=1 rewrites it."
  "$helm" template watchmux "$chart" -n demo -f "$examples/sidecar-values.yaml"
}
sidecar_render >"$tmp/sidecar-rendered.yaml"
if [[ ${CHART_CHECK_UPDATE:-0} == 1 ]]; then
  cp "$tmp/sidecar-rendered.yaml" "$examples/sidecar-rendered.yaml"
  say "rewrote $examples/sidecar-rendered.yaml"
elif diff -u "$examples/sidecar-rendered.yaml" "$tmp/sidecar-rendered.yaml" >"$tmp/drift.diff"; then
  say "ok   examples/sidecar-rendered.yaml is current"
else
  cat "$tmp/drift.diff" >&2
  fail "charts/watchmux/examples/sidecar-rendered.yaml is stale (rerun with CHART_CHECK_UPDATE=1)"
fi
if command -v yq >/dev/null && command -v jq >/dev/null; then
  chart_container="$(yq -r 'select(.kind == "ConfigMap") | .data["watchmux-container.yaml"]' "$examples/sidecar-rendered.yaml" | yq -cS .)"
  app_container="$(yq -cS '.spec.template.spec.initContainers[] | select(.name == "watchmux")' "$examples/sidecar-app.yaml")"
  if [[ -n $chart_container && $chart_container == "$app_container" ]]; then
    say "ok   examples/sidecar-app.yaml carries the chart's watchmux container"
  else
    fail "the watchmux container in charts/watchmux/examples/sidecar-app.yaml differs from the chart's (ConfigMap key watchmux-container.yaml)"
  fi
  for f in "$root/examples/sidecar-pod.yaml" "$examples/sidecar-app.yaml"; do
    check_flags "${f#"$root"/}" "$f" && say "ok   flags in ${f#"$root"/}"
  done
else
  note "yq/jq not found: sidecar container comparison skipped"
fi

if [[ -x $kubectl ]]; then
  if server="$("$kubectl" config view --kubeconfig "$root/examples/kubelet-kubeconfig.yaml" \
        -o jsonpath='{.clusters[0].cluster.server} {.clusters[0].cluster.tls-server-name} {.current-context}' 2>"$tmp/kc.err")" \
      && [[ $server == https://127.0.0.1:7443\ watchmux.node.local\ * ]]; then
    say "ok   examples/kubelet-kubeconfig.yaml parses: $server"
  else
    cat "$tmp/kc.err" >&2; fail "examples/kubelet-kubeconfig.yaml: not the expected kubeconfig ($server)"
  fi
else
  note "no kubectl at $kubectl: kubeconfig example not parsed"
fi

# --- server side -----------------------------------------------------------------
delete_namespaces() {
  local ns left
  for ns in "$@"; do
    "$kubectl" --kubeconfig "$kubeconfig" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  done
  for _ in $(seq 1 20); do
    left=()
    for ns in "$@"; do
      "$kubectl" --kubeconfig "$kubeconfig" get namespace "$ns" >/dev/null 2>&1 && left+=("$ns")
    done
    [[ ${#left[@]} -eq 0 ]] && return 0
    sleep 1
  done
  # Nothing but server-side dry runs (and a helm release since uninstalled) went
  # into them; a cluster without a namespace controller (the bare test API
  # server) never finishes the deletion, so finalize them here.
  for ns in "${left[@]}"; do
    note "namespace $ns still terminating after 20s (no namespace controller?): finalizing it"
    printf '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"%s"},"spec":{"finalizers":[]}}' "$ns" |
      "$kubectl" --kubeconfig "$kubeconfig" replace --raw "/api/v1/namespaces/$ns/finalize" -f - >/dev/null
  done
}

if [[ -z $kubeconfig ]]; then
  note "no kubeconfig given: server-side dry runs skipped"
else
  [[ -x $kubectl ]] || { fail "kubectl not found at $kubectl (run integration/scripts/build-k8s.sh)"; exit 1; }
  k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
  if ! k get --raw /readyz >/dev/null 2>"$tmp/ready.err"; then
    cat "$tmp/ready.err" >&2; fail "API server in $kubeconfig is not ready"; exit 1
  fi
  say "server: $(k version -o json 2>/dev/null | jq -r .serverVersion.gitVersion) at $(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
  k api-versions >"$tmp/api-versions"
  for ns in "$ns_restricted" "$ns_privileged"; do
    k create namespace "$ns" >/dev/null
    namespaces+=("$ns")
  done
  for mode in enforce warn audit; do
    k label namespace "$ns_restricted" "pod-security.kubernetes.io/$mode=restricted" >/dev/null
    k label namespace "$ns_privileged" "pod-security.kubernetes.io/$mode=privileged" >/dev/null
  done
  say "scratch namespaces: $ns_restricted (Pod Security restricted), $ns_privileged (privileged)"

  # apply_dry_run <label> <namespace> <files...>: one object per file.
  apply_dry_run() {
    local label="$1" ns="$2"; shift 2
    local f api kind applied=() skipped=()
    for f in "$@"; do
      api="$(doc_field apiVersion "$f")"; kind="$(doc_field kind "$f")"
      if ! grep -qx "$api" "$tmp/api-versions"; then
        skipped+=("$kind/$(doc_name "$f") ($api not served: CRD absent)")
        continue
      fi
      applied+=("$f")
    done
    local s
    for s in "${skipped[@]}"; do note "$label: skipped $s"; done
    [[ ${#applied[@]} -gt 0 ]] || return 0
    local args=() out
    for f in "${applied[@]}"; do args+=(-f "$f"); done
    if out="$(k --warnings-as-errors apply --dry-run=server -n "$ns" -o name "${args[@]}" 2>&1)"; then
      say "ok   server dry-run $label: $(echo "$out" | tr '\n' ' ')"
    else
      echo "$out" >&2
      fail "$label: kubectl apply --dry-run=server"
    fi
  }

  for c in "${cases[@]}"; do
    IFS='|' read -r name nskind _ _ <<<"$c"
    [[ -s $tmp/$name.yaml ]] || continue
    split_docs "$tmp/$name.yaml" "$tmp/docs-$name"
    apply_dry_run "$name" "$(ns_for "$nskind")" "$tmp/docs-$name"/*.yaml
  done
  # The example manifests, with the chart objects they need rendered into the
  # same namespace.
  split_docs "$tmp/sidecar-example-values.yaml" "$tmp/docs-chart-sidecar-app"
  cp "$examples/sidecar-app.yaml" "$tmp/docs-chart-sidecar-app/999-app.yaml"
  apply_dry_run "charts/watchmux/examples/sidecar-app.yaml" "$ns_restricted" "$tmp/docs-chart-sidecar-app"/*.yaml
  split_docs "$root/examples/sidecar-pod.yaml" "$tmp/docs-sidecar-pod"
  apply_dry_run "examples/sidecar-pod.yaml" "$ns_restricted" "$tmp/docs-sidecar-pod"/*.yaml

  # End to end: the real binary, started with the args the chart renders (only
  # addresses and file paths swapped for local ones), serving the chart's
  # generated certificate, answers kubectl using the chart's client kubeconfig.
  free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
  smoke_test() {  # smoke_test <case>
    local name="$1" d="$tmp/smoke-$1" f args=() arg port admin_port
    mkdir -p "$d"
    port="$(free_port)"; admin_port="$(free_port)"
    for f in "$tmp/docs-$name"/*.yaml; do
      case "$(doc_field kind "$f"):$(doc_name "$f")" in
        ConfigMap:*-kubeconfig)
          # Dial the local process; verify the certificate for the name the
          # kubeconfig dials in a cluster; a stand-in for the pod's token file.
          echo unused-by-trusted-local >"$d/token"
          # shellcheck disable=SC2016 # a jq program, not shell
          yq -y --arg port "$port" --arg token "$d/token" '
            (.clusters[0].cluster.server | capture("^(?<scheme>https?)://(?<host>[^:/]+)")) as $u
            | .clusters[0].cluster.server = "\($u.scheme)://127.0.0.1:\($port)"
            | if $u.scheme == "https" and (.clusters[0].cluster["tls-server-name"] == null)
              then .clusters[0].cluster["tls-server-name"] = $u.host else . end
            | if .users[0].user.tokenFile then .users[0].user.tokenFile = $token else . end
          ' <(yq -r '.data.kubeconfig' "$f") >"$d/client.kubeconfig"
          if [[ $name == sidecar* ]]; then
            yq -r '.data["watchmux-container.yaml"]' "$f" | yq -r '.args[]' >"$d/args"
          fi ;;
        Secret:*-tls)
          yq -r '.data["tls.crt"]' "$f" | base64 -d >"$d/tls.crt"
          yq -r '.data["tls.key"]' "$f" | base64 -d >"$d/tls.key" ;;
        DaemonSet:*|Deployment:*)
          yq -r '.spec.template.spec.containers[] | select(.name == "watchmux") | .args[]' "$f" >"$d/args" ;;
      esac
    done
    while read -r arg; do
      case "$arg" in
        --listen=*) args+=("--listen=127.0.0.1:$port") ;;
        --admin-listen=*) args+=("--admin-listen=127.0.0.1:$admin_port") ;;
        --tls-cert-file=*) args+=("--tls-cert-file=$d/tls.crt") ;;
        --tls-private-key-file=*) args+=("--tls-private-key-file=$d/tls.key") ;;
        *) args+=("$arg") ;;
      esac
    done <"$d/args"
    args+=("--kubeconfig=$kubeconfig")  # in a cluster: the pod's service account
    "$watchmux_bin" "${args[@]}" >"$d/watchmux.log" 2>&1 &
    proxy_pid=$!
    local ready=0
    for _ in $(seq 1 100); do
      if [[ "$(curl -fsS --max-time 2 "http://127.0.0.1:$admin_port/readyz" 2>/dev/null)" == ok ]]; then ready=1; break; fi
      kill -0 "$proxy_pid" 2>/dev/null || break
      sleep 0.2
    done
    local version="" listed=""
    if [[ $ready == 1 ]]; then
      version="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get --raw /version 2>"$d/kubectl.err" | jq -r .gitVersion)" || true
      listed="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get namespace "$ns_restricted" -o name 2>>"$d/kubectl.err")" || true
    fi
    kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; proxy_pid=""
    if [[ $ready == 1 && -n $version && $listed == "namespace/$ns_restricted" ]]; then
      say "ok   end to end $name: watchmux ${args[*]//$tmp\//} answered kubectl with the chart's kubeconfig ($(yq -r '.clusters[0].cluster | "\(.server) tls-server-name=\(.["tls-server-name"] // "-")"' "$d/client.kubeconfig"); upstream $version)"
    else
      tail -n 20 "$d/watchmux.log" >&2; cat "$d/kubectl.err" >&2 2>/dev/null || true
      fail "end to end $name: watchmux with the chart's args and kubeconfig did not answer (ready=$ready)"
    fi
  }
  if [[ -z $watchmux_bin ]]; then
    note "no watchmux binary: end-to-end runs skipped"
  elif ! command -v yq >/dev/null || ! command -v curl >/dev/null; then
    note "yq or curl missing: end-to-end runs skipped"
  else
    smoke_test nodelocal
    smoke_test tier
    smoke_test sidecar
  fi

  # A real install and upgrade: the generated CA and serving certificate stay.
  # A release name of its own: ClusterRoles are cluster-wide, and another
  # chart-check may be running against the same cluster.
  rel="wmcheck-$$"
  secret_data() { k -n "$ns_privileged" get secret "$rel-watchmux-$1" -o "jsonpath={.data.$2}" 2>/dev/null; }
  rel_installed=1  # from here on, cleanup uninstalls it if this run stops half-way
  if "$helm" install "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=nodeLocal >"$tmp/install.log" 2>&1; then
    ca1="$(secret_data ca 'tls\.crt')"; crt1="$(secret_data tls 'tls\.crt')"
    if "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=nodeLocal \
          --set logFormat=text >"$tmp/upgrade.log" 2>&1; then
      ca2="$(secret_data ca 'tls\.crt')"; crt2="$(secret_data tls 'tls\.crt')"
      if [[ -n $ca1 && $ca1 == "$ca2" && $crt1 == "$crt2" ]]; then
        say "ok   helm upgrade kept the generated CA and serving certificate"
      else
        fail "helm upgrade replaced the generated CA or serving certificate"
      fi
      "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=nodeLocal \
        --set 'tls.extraDNSNames[0]=watchmux.example' >"$tmp/upgrade2.log" 2>&1 || fail "helm upgrade (new SAN)"
      ca3="$(secret_data ca 'tls\.crt')"; crt3="$(secret_data tls 'tls\.crt')"
      if [[ $ca3 == "$ca1" && $crt3 != "$crt1" ]] && base64 -d <<<"$crt3" | openssl x509 -noout -ext subjectAltName | grep -q watchmux.example; then
        say "ok   a new subject alt name re-issued the serving certificate from the same CA"
      else
        fail "changing tls.extraDNSNames did not re-issue the certificate from the kept CA"
      fi
    else
      cat "$tmp/upgrade.log" >&2; fail "helm upgrade"
    fi
    if "$helm" uninstall "$rel" --kubeconfig "$kubeconfig" -n "$ns_privileged" >/dev/null 2>&1; then
      rel_installed=0
    else
      fail "helm uninstall"
    fi
    if [[ -n $(secret_data ca 'tls\.crt') ]]; then
      say "ok   helm uninstall kept the CA Secret (helm.sh/resource-policy: keep)"
      k -n "$ns_privileged" delete secret "$rel-watchmux-ca" >/dev/null
    else
      fail "helm uninstall deleted the CA Secret"
    fi
  else
    cat "$tmp/install.log" >&2; fail "helm install (nodeLocal)"
  fi
fi

if [[ ${#namespaces[@]} -gt 0 ]]; then
  delete_namespaces "${namespaces[@]}" || true
  namespaces=()
fi

if (( failures > 0 )); then
  say "$failures check(s) failed"
  exit 1
fi
say "all checks passed"
