# Sourced by chart-check.sh (one shell: its variables, say/fail/note and the
# cases are in scope); with a cluster: the real binary started with each mode's
# rendered args, the Node authorizer against the node-listable table, the tree.
# shellcheck shell=bash

# End to end: the real binary, started with the args the chart renders (only
# addresses and file paths swapped for local ones, and $(VAR)s expanded as
# the kubelet would), serving the chart's generated certificate, gets ready
# (with --cache-warm: every cache synced) and answers kubectl using the
# chart's client kubeconfig, pod lists from its cache.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metric() {  # metric <admin port> <name> <resource>: the sample's value, or nothing
  curl -fsS --max-time 2 "http://127.0.0.1:$1/metrics" 2>/dev/null |
    awk -v n="$2" -v r="resource=\"$3\"" '!found && index($1, n "{") == 1 && index($1, r) { print $2; found = 1 }' || true
}
node_a="chart-check-a-$$"; node_b="chart-check-b-$$"  # made-up nodes
# A client certificate for a subject, signed by the test cluster's CA (the
# API server's --client-ca-file), as <out>.crt and <out>.key, and
# <out>.kubeconfig presenting it to the API server directly.
mint_client() {  # mint_client <out prefix> <subject>
  openssl req -new -newkey rsa:2048 -nodes -keyout "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null &&
    openssl x509 -req -in "$1.csr" -CA "$root/.run/cluster/ca.crt" -CAkey "$root/.run/cluster/ca.key" \
      -CAcreateserial -CAserial "$tmp/ca.srl" -days 1 -out "$1.crt" \
      -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') 2>/dev/null &&
    k config view --raw --minify --flatten -o json |
    jq --arg crt "$1.crt" --arg key "$1.key" '.users[0].user = {"client-certificate": $crt, "client-key": $key}' >"$1.kubeconfig"
}
node_subject() { echo "/O=system:nodes/CN=system:node:$1"; }
can_mint=0; [[ -f $root/.run/cluster/ca.key ]] && command -v openssl >/dev/null && can_mint=1
smoke_test() {  # smoke_test <case> [upstream kubeconfig, default the admin's] [what the upstream identity is]
  local name="$1" upstream="${2:-$kubeconfig}" who="${3:-}" d="$tmp/smoke-$1" f args=() arg port admin_port
  local mode cjson pod_ns
  mkdir -p "$d"
  [[ -d $tmp/docs-$name ]] || split_docs "$tmp/$name.yaml" "$tmp/docs-$name"
  IFS=$'\t' read -r mode cjson < <(container_json "$tmp/$name.yaml") || true
  if [[ -z ${cjson:-} ]]; then fail "end to end $name: no watchmux container rendered"; return; fi
  pod_ns="$(yq -r 'select(.kind == "ConfigMap") | .metadata.namespace' "$tmp/$name.yaml" | head -1)"
  local delegated=0 kubelet=0 kckey=kubeconfig kcmap=kubeconfig
  if jq -e '.args | index(["--auth-mode=delegated"]) != null' <<<"$cjson" >/dev/null; then delegated=1; fi
  # nodeLocal+delegated with the kubelet's credentials: watchmux's upstream
  # kubeconfig (the "kubelet's kubeconfig" on the host) and the kubelet's
  # own kubeconfig through watchmux carry two certificates of the same node,
  # $node_a, minted from the test cluster's CA, as after a rotation.
  if jq -e '(.args | index(["--upstream-identity=client"]) != null)
      and ([.args[] | select(startswith("--kubeconfig=") and (startswith("--kubeconfig=/etc/watchmux/upstream/") | not))] | length == 1)' <<<"$cjson" >/dev/null; then
    if [[ $can_mint == 0 ]]; then note "end to end $name: no $root/.run/cluster/ca.key to mint node certificates: skipped"; return; fi
    kubelet=1 kckey=kubelet-kubeconfig
    # the static pod: the kubelet's kubeconfig is a host file, with watchmux's CA beside it
    [[ -z $(static_pod_json "$tmp/$name.yaml") ]] || kcmap=static-pod kckey=kubelet-watchmux.conf
    mint_client "$d/kubelet" "$(node_subject "$node_a")" && mint_client "$d/kubelet-client" "$(node_subject "$node_a")" &&
      mint_client "$d/other-node" "$(node_subject "$node_b")" || { fail "end to end $name: minting node certificates"; return; }
    cat "$d/kubelet-client.crt" "$d/kubelet-client.key" >"$d/kubelet-client-current.pem"
    upstream="$d/kubelet.kubeconfig" who="upstream as system:node:$node_a, the kubelet's credentials"
    if [[ -n ${tree_tier_port:-} ]]; then
      # The tree: the chart's own kubeconfig for the tier, pointed at the
      # tier watchmux running here, with the node's certificate.
      local tree_kc
      tree_kc="$(yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-tier-upstream"))) | .data.kubeconfig' "$tmp/$name.yaml")"
      if [[ -z $tree_kc || $tree_kc == null ]]; then fail "end to end $name: no tree kubeconfig rendered"; return; fi
      cat "$d/kubelet.crt" "$d/kubelet.key" >"$d/kubelet-upstream.pem"
      yq -y --arg server "https://127.0.0.1:$tree_tier_port" --arg ca "$tree_tier_dir/ca.crt" --arg sni "$tree_tier_name" --arg pem "$d/kubelet-upstream.pem" '
        .clusters[0].cluster.server = $server | .clusters[0].cluster["certificate-authority"] = $ca
        | .clusters[0].cluster["tls-server-name"] = $sni
        | .users[0].user["client-certificate"] = $pem | .users[0].user["client-key"] = $pem' <<<"$tree_kc" >"$d/tree.kubeconfig"
      upstream="$d/tree.kubeconfig" who="upstream the tier watchmux as system:node:$node_a, the chart's tree kubeconfig"
    fi
  fi
  port="$(free_port)"; admin_port="$(free_port)"
  for f in "$tmp/docs-$name"/*.yaml; do
    case "$(doc_field kind "$f"):$(doc_name "$f")" in
      ConfigMap:*-"$kcmap")
        # Dial the local process; verify the certificate for the name the
        # kubeconfig dials in a cluster; a stand-in for the pod's token file
        # (delegated: the admin's token, which watchmux reviews with a
        # TokenReview; trusted-local replaces it with its own identity) or
        # for kubelet-client-current.pem.
        if [[ $delegated == 1 ]]; then
          yq -r '.users[0].user.token // empty' "$kubeconfig" >"$d/token"
        else
          echo unused-by-trusted-local >"$d/token"
        fi
        # shellcheck disable=SC2016 # a jq program, not shell
        yq -y --arg port "$port" --arg token "$d/token" --arg pem "$d/kubelet-client-current.pem" --arg ca "$d/ca.crt" '
          (.clusters[0].cluster.server | capture("^(?<scheme>https?)://(?<host>[^:/]+)")) as $u
          | if .clusters[0].cluster["certificate-authority"] then .clusters[0].cluster["certificate-authority"] = $ca else . end
          | .clusters[0].cluster.server = "\($u.scheme)://127.0.0.1:\($port)"
          | if $u.scheme == "https" and (.clusters[0].cluster["tls-server-name"] == null)
            then .clusters[0].cluster["tls-server-name"] = $u.host else . end
          | if .users[0].user.tokenFile then .users[0].user.tokenFile = $token else . end
          | if .users[0].user["client-certificate"] then .users[0].user["client-certificate"] = $pem
              | .users[0].user["client-key"] = $pem else . end
        ' <(yq -r --arg k "$kckey" '.data[$k]' "$f") >"$d/client.kubeconfig" ;;
      Secret:*-tls)
        yq -r '.data["tls.crt"]' "$f" | base64 -d >"$d/tls.crt"
        yq -r '.data["tls.key"]' "$f" | base64 -d >"$d/tls.key"
        yq -r '.data["ca.crt"] // empty' "$f" | base64 -d >"$d/ca.crt" ;;
    esac
  done
  # The kubelet expands $(VAR) in args from the container's env: stand-ins
  # for the downward API (this "pod" runs on node $node_a).
  local -A envv=()
  local n v pat
  while IFS=$'\t' read -r n v; do envv[$n]="$v"; done < <(jq -r --arg node "$node_a" --arg ns "$pod_ns" '
    .env[]? | [.name, (if .value != null then .value
      else (.valueFrom.fieldRef.fieldPath // "") as $f
        | if $f == "spec.nodeName" then $node elif $f == "metadata.namespace" then $ns
          elif $f == "metadata.name" then "watchmux-chart-check" elif ($f | test("IPs?$")) then "127.0.0.1"
          else empty end end)] | @tsv' <<<"$cjson")
  while read -r arg; do
    for n in "${!envv[@]}"; do pat="\$($n)"; arg="${arg//"$pat"/${envv[$n]}}"; done
    case "$arg" in
      --listen=*) args+=("--listen=127.0.0.1:$port") ;;
      --admin-listen=*) args+=("--admin-listen=127.0.0.1:$admin_port") ;;
      --tls-cert-file=*) args+=("--tls-cert-file=$d/tls.crt") ;;
      --tls-private-key-file=*) args+=("--tls-private-key-file=$d/tls.key") ;;
      --kubeconfig=*) ;;  # the host's or a Secret's path: $upstream instead, below
      # The tree's fallback (nodeLocal.tier.fallback): the cluster's API
      # server and its CA instead of the rendered stand-ins.
      --upstream-fallback-servers=*) args+=("--upstream-fallback-servers=$(yq -r '.clusters[0].cluster.server' "$kubeconfig")") ;;
      --upstream-fallback-ca-file=*)
        yq -r '.clusters[0].cluster["certificate-authority-data"]' "$kubeconfig" | base64 -d >"$d/fallback-ca.crt"
        args+=("--upstream-fallback-ca-file=$d/fallback-ca.crt") ;;
      --upstream-fallback-tls-server-name=*) ;;  # the cluster's certificate names 127.0.0.1
      --client-ca-file=*)
        # What the chart's refusal message tells users to copy into
        # auth.clientCA.configMap.
        k -n kube-system get configmap extension-apiserver-authentication -o jsonpath='{.data.client-ca-file}' >"$d/client-ca.crt"
        args+=("--client-ca-file=$d/client-ca.crt") ;;
      *) args+=("$arg") ;;
    esac
  done < <(jq -r '.args[]' <<<"$cjson")
  args+=("--kubeconfig=$upstream")  # in a cluster: the pod's service account, or the kubelet's kubeconfig
  "$watchmux_bin" "${args[@]}" >"$d/watchmux.log" 2>&1 &
  proxy_pid=$!
  local ready=0 started=$SECONDS
  for _ in $(seq 1 300); do  # 60s: with --cache-warm, every initial list
    if [[ "$(curl -fsS --max-time 2 "http://127.0.0.1:$admin_port/readyz" 2>/dev/null)" == ok ]]; then ready=1; break; fi
    kill -0 "$proxy_pid" 2>/dev/null || break
    sleep 0.2
  done
  local took=$((SECONDS - started)) version="" listed="" pods_ok=1 pods_note="" scoped=0 want got lists objects resources
  local node_ok=1 node_note="" direct via other
  if [[ $ready == 1 ]]; then
    version="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get --raw /version 2>"$d/kubectl.err" | jq -r .gitVersion)" || true
    if [[ $kubelet == 1 ]]; then
      # The node may not list secrets cluster-wide: the API server's own 403,
      # the same through watchmux (the node's credentials) as directly.
      direct="$("$kubectl" --kubeconfig "$d/kubelet.kubeconfig" get --raw /api/v1/secrets 2>&1 >/dev/null)" || true
      via="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get --raw /api/v1/secrets 2>&1 >/dev/null)" || true
      if [[ $direct == *"(Forbidden)"* && $via == "$direct" ]]; then
        node_note="; list secrets: 403 through watchmux as directly"
      else
        node_ok=0; node_note="; list secrets directly: [${direct:-allowed}], through watchmux: [${via:-allowed}]"
      fi
      # Another node's certificate: watchmux does not lend it its credentials.
      other="$(yq -y --arg crt "$d/other-node.crt" --arg key "$d/other-node.key" \
        '.users[0].user = {"client-certificate": $crt, "client-key": $key}' "$d/client.kubeconfig" >"$d/other.kubeconfig" &&
        "$kubectl" --kubeconfig "$d/other.kubeconfig" get --raw /version 2>&1 >/dev/null)" || true
      if [[ $other == *"(Forbidden)"*"cannot pass the client certificate"* ]]; then
        node_note+=", system:node:$node_b's certificate refused on pass-through (403)"
      else
        node_ok=0; node_note+=", system:node:$node_b's certificate on pass-through: [${other:-allowed}]"
      fi
      listed="-"
    else
      listed="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get namespace "$ns_restricted" -o name 2>>"$d/kubectl.err")" || true
    fi
    # Pods through watchmux: from its cache when pods are cached; only its
    # own node's when the cache is scoped to the node. At resourceVersion=0,
    # as a reflector lists: a consistent LIST passes through whenever the
    # cache is behind the upstream's revision (docs/design.md).
    resources="$(printf '%s\n' "${args[@]}" | sed -n 's/^--cache-resources=//p')"
    if [[ $scratch_pods == 1 && ,$resources, =~ ,(pods|\*), ]]; then
      if printf '%s\n' "${args[@]}" | grep -qx -- "--cache-scope=pods=fieldSelector=spec.nodeName=$node_a"; then
        scoped=1; want="chart-check-a"
        got="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get --raw \
          "/api/v1/namespaces/$ns_restricted/pods?fieldSelector=spec.nodeName%3D$node_a&resourceVersion=0" 2>>"$d/kubectl.err" | jq -r '[.items[].metadata.name] | sort | join(" ")')" || true
      else
        want="chart-check-a chart-check-b"
        got="$("$kubectl" --kubeconfig "$d/client.kubeconfig" get --raw \
          "/api/v1/namespaces/$ns_restricted/pods?labelSelector=app.kubernetes.io%2Fname%3Dchart-check&resourceVersion=0" 2>>"$d/kubectl.err" | jq -r '[.items[].metadata.name] | sort | join(" ")')" || true
      fi
      lists="$(metric "$admin_port" watchmux_cache_list_total pods)"
      objects="$(metric "$admin_port" watchmux_watch_cache_objects pods)"
      pods_note="; pods $([[ $scoped == 1 ]] && echo "on $node_a" || echo "by label"): [$got] from the cache (lists ${lists:-0}, cached pods ${objects:-?})"
      if [[ $got != "$want" ]]; then pods_ok=0; pods_note+=", want [$want]"; fi
      if [[ ${lists:-0} == 0 ]]; then pods_ok=0; pods_note+=", but not served from the cache"; fi
      if [[ $scoped == 1 && ${objects:-} != 1 ]]; then pods_ok=0; pods_note+=", but the node-scoped cache should hold exactly 1 pod"; fi
    fi
  fi
  if [[ -n ${tree_tier_port:-} && $kubelet == 1 && $ready == 1 ]]; then
    # The node-local's caches are fed by the tier: the tier holds its
    # watches of pods and of its Node (nothing else watches nodes there).
    # Its caches are ready from disk at once; a relist (410 for the stored
    # version) is a watch-list, which the tier registers once it has
    # proved its cache fresh, a second or two later: waited for, bounded.
    local tier_pods tier_nodes
    for _ in $(seq 1 75); do  # 15s
      tier_pods="$(metric "$tree_tier_admin" watchmux_registered_watchers pods)"
      tier_nodes="$(metric "$tree_tier_admin" watchmux_registered_watchers nodes)"
      if [[ ${tier_pods:-0} -ge 1 && ${tier_nodes:-0} -ge 1 ]]; then break; fi
      sleep 0.2
    done
    node_note+="; the tier holds its watches (pods ${tier_pods:-0}, nodes ${tier_nodes:-0})"
    if [[ ${tier_pods:-0} -lt 1 || ${tier_nodes:-0} -lt 1 ]]; then node_ok=0; node_note+=", want at least 1 each"; fi
  fi
  if [[ ${smoke_keep:-} == "$name" ]]; then
    # Left running for the tree (cleanup stops it).
    tier_pid="$proxy_pid" tree_tier_port="$port" tree_tier_admin="$admin_port" tree_tier_dir="$d"
    proxy_pid=""
  else
    kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; proxy_pid=""
  fi
  local listed_ok=0
  [[ $listed == "namespace/$ns_restricted" || ($kubelet == 1 && $listed == -) ]] && listed_ok=1
  if [[ $ready == 1 && -n $version && $listed_ok == 1 && $pods_ok == 1 && $node_ok == 1 ]]; then
    say "ok   end to end $name${who:+ ($who)}: watchmux ${args[*]//$tmp\//} ready after ${took}s, answered kubectl with the chart's kubeconfig ($(yq -r '.clusters[0].cluster | "\(.server) tls-server-name=\(.["tls-server-name"] // "-")"' "$d/client.kubeconfig"); upstream $version)$pods_note$node_note"
  else
    tail -n 20 "$d/watchmux.log" >&2; cat "$d/kubectl.err" >&2 2>/dev/null || true
    curl -fsS --max-time 2 "http://127.0.0.1:$admin_port/readyz" >&2 2>/dev/null || true
    fail "end to end $name${who:+ ($who)}: watchmux with the chart's args and kubeconfig did not answer (ready=$ready after ${took}s, version=${version:--}, namespace=${listed:--}$pods_note$node_note)"
  fi
}
# The chart's node-listable table (watchmux.nodeListable), which decides
# what nodeLocal+delegated may cache, against the real Node authorizer: with
# a node's certificate, each entry can be listed and watched (selecting the
# node itself where the table names a field, and then not without that
# selector, nor for another node), and the binary's other default resources
# cannot be listed or watched.
node_authz_check() {
  local d="$tmp/node-authz" server r f q verb path want got bad=0 allowed=() refused=() checks=() others
  mkdir -p "$d"
  mint_client "$d/node" "$(node_subject "$node_a")" || { fail "Node authorizer: minting a node certificate"; return; }
  server="$(jq -r '.clusters[0].cluster.server' "$d/node.kubeconfig")"
  jq -r '.clusters[0].cluster["certificate-authority-data"]' "$d/node.kubeconfig" | base64 -d >"$d/server-ca.crt"
  collection() {  # resource[.group] -> its cluster-wide collection path; nothing when not served
    local res="${1%%.*}" group="" gv
    [[ $1 == *.* ]] && group="${1#*.}"
    if [[ -z $group ]]; then echo "/api/v1/$res"; return; fi
    gv="$(k get --raw "/apis/$group" 2>/dev/null | jq -r '.preferredVersion.groupVersion // empty')" || true
    [[ -z $gv ]] || echo "/apis/$gv/$res"
  }
  for r in $(jq -r 'keys[]' <<<"$node_listable_json"); do
    f="$(jq -r --arg r "$r" '.[$r]' <<<"$node_listable_json")"
    if [[ -n $f ]]; then
      checks+=("$r|fieldSelector=$f%3D$node_a|200|$r[$f=self]" "$r||403|$r" "$r|fieldSelector=$f%3D$node_b|403|$r[$f=other]")
    else
      checks+=("$r||200|$r")
    fi
  done
  others="$(yq -r 'select(.kind == "Deployment") | .spec.template.spec.containers[0].args[] | select(startswith("--cache-resources=")) | ltrimstr("--cache-resources=")' "$tmp/tier.yaml")"
  for r in ${others//,/ }; do
    jq -e --arg r "$r" 'has($r)' <<<"$node_listable_json" >/dev/null || checks+=("$r||403|$r")
  done
  local c label
  for c in "${checks[@]}"; do
    IFS='|' read -r r q want label <<<"$c"
    if ! path="$(collection "$r")" || [[ -z $path ]]; then note "Node authorizer: $r is not served here: not checked"; continue; fi
    for verb in list watch; do
      if [[ $verb == list ]]; then f="limit=1"; else f="watch=1&timeoutSeconds=1"; fi
      got="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$d/server-ca.crt" --cert "$d/node.crt" --key "$d/node.key" \
        "$server$path?${q:+$q&}$f")" || true
      if [[ $got != "$want" ]]; then
        fail "Node authorizer: $verb $path${q:+?$q} as system:node:$node_a: $got, want $want (the chart's watchmux.nodeListable is wrong)"
        bad=1
      fi
    done
    if [[ $want == 200 ]]; then allowed+=("$label"); else refused+=("$label"); fi
  done
  local a b
  printf -v a '%s, ' "${allowed[@]}"; printf -v b '%s, ' "${refused[@]}"
  [[ $bad == 1 ]] || say "ok   the Node authorizer agrees with the chart: system:node:$node_a may list and watch ${a%, }; not ${b%, }"
}
if [[ $can_mint == 1 ]]; then
  node_authz_check
else
  note "no $root/.run/cluster/ca.key (or openssl) to mint a node certificate: Node authorizer not asked"
fi
if [[ -z $watchmux_bin ]]; then
  note "no watchmux binary: end-to-end runs skipped"
elif ! command -v yq >/dev/null || ! command -v curl >/dev/null; then
  note "yq or curl missing: end-to-end runs skipped"
else
  # Two pods (never started: no kubelet owns these nodes) bound to two
  # made-up nodes, for the caches to hold.
  scratch_pods=1
  {
    echo "{\"apiVersion\": \"v1\", \"kind\": \"ServiceAccount\", \"metadata\": {\"name\": \"chart-check\"}}"
    for p in a b; do
      n="$node_a"; [[ $p == b ]] && n="$node_b"
      jq -nc --arg name "chart-check-$p" --arg node "$n" '{apiVersion: "v1", kind: "Pod",
        metadata: {name: $name, labels: {"app.kubernetes.io/name": "chart-check"}},
        spec: {nodeName: $node, serviceAccountName: "chart-check", automountServiceAccountToken: false,
          securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: "RuntimeDefault"}},
          containers: [{name: "pause", image: "registry.k8s.io/pause:3.10",
            securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: ["ALL"]}}}]}}'
    done
  } | jq -s '{apiVersion: "v1", kind: "List", items: .}' >"$tmp/scratch-pods.json"
  if k -n "$ns_restricted" create -f "$tmp/scratch-pods.json" >/dev/null 2>"$tmp/scratch-pods.err"; then
    say "scratch pods: chart-check-a on node $node_a, chart-check-b on node $node_b (in $ns_restricted)"
  else
    cat "$tmp/scratch-pods.err" >&2; fail "creating the scratch pods"; scratch_pods=0
  fi
  smoke_test nodelocal
  smoke_test nodelocal-staticpod
  smoke_test tier
  smoke_test sidecar
  smoke_test tier-cache-all
  # The tree: the tier (the chart's tier args, delegated, with the API
  # server's client CA to verify nodes' certificates), then a node-local
  # watchmux whose upstream is the chart's tree kubeconfig pointed at it.
  if [[ $can_mint == 1 ]]; then
    smoke_keep=tier-delegated-client-ca smoke_test tier-delegated-client-ca
    if [[ -n $tier_pid ]]; then
      tree_tier_name="watchmux.$ns_restricted.svc"  # in the tier's generated certificate
      smoke_test nodelocal-tree
      kill "$tier_pid" 2>/dev/null || true; wait "$tier_pid" 2>/dev/null || true; tier_pid=""
      tree_tier_port=""
    else
      fail "end to end: the tree's tier did not stay up"
    fi
  fi
fi
