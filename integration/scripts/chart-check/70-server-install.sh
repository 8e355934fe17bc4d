# Sourced by chart-check.sh (one shell: its variables, say/fail/note and the
# cases are in scope); with a cluster: a real helm install and upgrade.
# shellcheck shell=bash

# A real install and upgrade: the generated CA and serving certificate stay.
# A release name of its own: ClusterRoles are cluster-wide, and another
# chart-check may be running against the same cluster.
rel="wmcheck-$$"
secret_data() { k -n "$ns_privileged" get secret "$rel-watchmux-$1" -o "jsonpath={.data.$2}" 2>/dev/null; }
# The release's ServiceAccount, with a token from the TokenRequest API, is
# all watchmux needs to warm its caches (the installed args, run locally),
# and may not do more than the cache needs; in nodeLocal+delegated it is
# bound to nothing (no smoke test: watchmux uses the node's credentials
# there, checked end to end above). Expectations: "verb resource yes|no".
installed_check() {  # installed_check <label> <smoke test with the ServiceAccount: yes|no> <expectation>...
  local label="$1" smoke="$2" sa="$rel-watchmux" token e verb res sub want got bad=0 seen=() rbac
  shift 2
  "$helm" get manifest "$rel" --kubeconfig "$kubeconfig" -n "$ns_privileged" >"$tmp/installed-$label.yaml"
  rbac="$(yq -r 'select(.kind | test("^(Cluster)?Role(Binding)?$")) | "\(.kind)/\(.metadata.name)"' "$tmp/installed-$label.yaml" | paste -sd' ' -)"
  if [[ $smoke == yes ]]; then
    if ! token="$(k -n "$ns_privileged" create token "$sa" --duration=10m 2>"$tmp/token.err")"; then
      cat "$tmp/token.err" >&2; fail "installed $label: no token for ServiceAccount $sa"; return
    fi
    k config view --raw --minify --flatten -o json | jq --arg t "$token" '.users[0].user = {token: $t}' >"$tmp/sa-$label.kubeconfig"
    [[ -z $watchmux_bin ]] || smoke_test "installed-$label" "$tmp/sa-$label.kubeconfig" "upstream as ServiceAccount $sa"
  elif [[ -n $rbac ]]; then
    fail "installed $label: renders RBAC ($rbac), want none"; bad=1
  fi
  for e in "$@"; do
    read -r verb res want <<<"$e"
    sub=(); if [[ $res == */* ]]; then sub=(--subresource="${res#*/}"); res="${res%%/*}"; fi
    got="$(k auth can-i "$verb" "$res" "${sub[@]}" --as="system:serviceaccount:$ns_privileged:$sa" 2>/dev/null)" || true
    seen+=("$verb $res${sub[*]:+ ${sub[*]}}: $got")
    [[ $got == "$want" ]] || { fail "installed $label: ServiceAccount $sa can-i $verb $res ${sub[*]}: $got, want $want"; bad=1; }
  done
  local joined; printf -v joined '%s; ' "${seen[@]}"
  [[ $bad == 1 ]] || say "ok   installed $label: RBAC ${rbac:-none}; ServiceAccount $sa ${joined%; }"
}
rel_installed=1  # from here on, cleanup uninstalls it if this run stops half-way
if "$helm" install "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=nodeLocal --set auth.clientCA.configMap=client-ca >"$tmp/install.log" 2>&1; then
  installed_check nodelocal no "list pods no" "watch services no" "create tokenreviews.authentication.k8s.io no" \
    "impersonate users no" "impersonate groups no" "impersonate serviceaccounts no"
  ca1="$(secret_data ca 'tls\.crt')"; crt1="$(secret_data tls 'tls\.crt')"
  if "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=nodeLocal --set auth.clientCA.configMap=client-ca \
        --set logFormat=text >"$tmp/upgrade.log" 2>&1; then
    ca2="$(secret_data ca 'tls\.crt')"; crt2="$(secret_data tls 'tls\.crt')"
    if [[ -n $ca1 && $ca1 == "$ca2" && $crt1 == "$crt2" ]]; then
      say "ok   helm upgrade kept the generated CA and serving certificate"
    else
      fail "helm upgrade replaced the generated CA or serving certificate"
    fi
    "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=nodeLocal --set auth.clientCA.configMap=client-ca \
      --set 'tls.extraDNSNames[0]=watchmux.example' >"$tmp/upgrade2.log" 2>&1 || fail "helm upgrade (new SAN)"
    ca3="$(secret_data ca 'tls\.crt')"; crt3="$(secret_data tls 'tls\.crt')"
    if [[ $ca3 == "$ca1" && $crt3 != "$crt1" ]] && base64 -d <<<"$crt3" | openssl x509 -noout -ext subjectAltName | grep -q watchmux.example; then
      say "ok   a new subject alt name re-issued the serving certificate from the same CA"
    else
      fail "changing tls.extraDNSNames did not re-issue the certificate from the kept CA"
    fi
    # tier (delegated, impersonating): the ServiceAccount's ClusterRole.
    if "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=tier >"$tmp/upgrade-tier.log" 2>&1; then
      installed_check default yes "list pods yes" "watch configmaps yes" "get endpointslices.discovery.k8s.io yes" \
        "list secrets no" "get customresourcedefinitions.apiextensions.k8s.io no" "create pods no" \
        "create tokenreviews.authentication.k8s.io yes" "create subjectaccessreviews.authorization.k8s.io yes" \
        "impersonate users yes" "impersonate groups yes" "impersonate serviceaccounts yes"
    else
      cat "$tmp/upgrade-tier.log" >&2; fail "helm upgrade (tier)"
    fi
    if "$helm" upgrade "$rel" "$chart" --kubeconfig "$kubeconfig" -n "$ns_privileged" --set mode=tier \
          --set 'cache.resources={*}' >"$tmp/upgrade3.log" 2>&1; then
      installed_check all yes "list secrets yes" "watch leases.coordination.k8s.io yes" "get secrets no" \
        "get nodes/proxy no" "get pods/log no" "get customresourcedefinitions.apiextensions.k8s.io yes" "create pods no"
    else
      cat "$tmp/upgrade3.log" >&2; fail "helm upgrade (tier, cache.resources *)"
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
