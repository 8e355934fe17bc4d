# Sourced by chart-check.sh (one shell: its variables, say/fail/note and the
# cases are in scope); with a cluster: scratch namespaces and a server-side dry run of
# every rendered manifest and example.
# shellcheck shell=bash

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
  local args=() out elsewhere=() other
  # Objects the chart puts in a namespace of their own (upstream.discoverServers'
  # Role in default) go in a call of their own: -n would refuse them.
  for f in "${applied[@]}"; do
    other="$(yq -r '.metadata.namespace // empty' "$f")"
    if [[ -n $other && $other != "$ns" ]]; then elsewhere+=(-f "$f"); else args+=(-f "$f"); fi
  done
  if [[ ${#elsewhere[@]} -gt 0 ]] && ! out="$(k --warnings-as-errors apply --dry-run=server -o name "${elsewhere[@]}" 2>&1)"; then
    echo "$out" >&2
    fail "$label: kubectl apply --dry-run=server (objects in their own namespace)"
    return
  fi
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
  # nodeLocal.mode staticPod: the manifest the kubelet reads, as a Pod
  pod="$(static_pod_json "$tmp/$name.yaml")"
  [[ -z $pod ]] || yq -y . <<<"$pod" >"$tmp/docs-$name/900-static-pod.yaml"
  apply_dry_run "$name" "$(ns_for "$nskind")" "$tmp/docs-$name"/*.yaml
done
# The example manifests, with the chart objects they need rendered into the
# same namespace.
split_docs "$tmp/sidecar-example-values.yaml" "$tmp/docs-chart-sidecar-app"
cp "$examples/sidecar-app.yaml" "$tmp/docs-chart-sidecar-app/999-app.yaml"
apply_dry_run "charts/watchmux/examples/sidecar-app.yaml" "$ns_restricted" "$tmp/docs-chart-sidecar-app"/*.yaml
split_docs "$root/examples/sidecar-pod.yaml" "$tmp/docs-sidecar-pod"
apply_dry_run "examples/sidecar-pod.yaml" "$ns_restricted" "$tmp/docs-sidecar-pod"/*.yaml
