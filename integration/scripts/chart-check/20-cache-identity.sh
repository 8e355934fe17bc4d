# Sourced by chart-check.sh (one shell: its variables, say/fail/note and the
# cases are in scope); offline: the cache arguments and RBAC per case, identity
# and auth per mode, refusals.
# shellcheck shell=bash

# --- offline: the cache ----------------------------------------------------------
# The chart's default list (cache.resources null, in tier) is the binary's
# default, and the API groups the chart treats as built in (no CRD to read)
# are the binary's.
if [[ -n $watchmux_bin ]]; then
  binary_default="$("$watchmux_bin" --help | tr -s ' \n' ' ' | sed -nE 's/.*--cache-resources <LIST> .*\[default: ([^]]*)\] --watch-cache-sizes.*/\1/p' | tr -d ' ')"
  chart_default="$(yq -r 'select(.kind == "Deployment") | .spec.template.spec.containers[0].args[] | select(startswith("--cache-resources=")) | ltrimstr("--cache-resources=")' "$tmp/tier.yaml")"
  if [[ $(yq -r '.cache.resources' "$chart/values.yaml") != null ]]; then
    fail "values.yaml cache.resources is not null (the mode's default)"
  elif [[ -n $binary_default && $binary_default == "$chart_default" ]]; then
    say "ok   cache.resources defaults (tier) to the binary's --cache-resources default ($binary_default)"
  else
    fail "the chart's default cache.resources in tier ($chart_default) is not the binary's --cache-resources default (${binary_default:-not found in --help})"
  fi
fi
builtin_src="$root/src/cache/resource_info.rs"
chart_builtin="$(grep -A1 'define "watchmux.builtinGroups"' "$chart/templates/_helpers.tpl" | tail -1 | grep -oE '"[^"]*"' | tr -d '"' | sort | paste -sd, -)"
if [[ -f $builtin_src ]]; then
  binary_builtin="$(awk '/const BUILTIN: &\[&str\] = &\[/ { on = 1; next } on && /\];/ { exit } on' "$builtin_src" | grep -oE '"[^"]*"' | tr -d '"' | sort | paste -sd, -)"
  if [[ -n $binary_builtin && $binary_builtin == "$chart_builtin" ]]; then
    say "ok   the chart's built-in API groups are the binary's (src/cache/resource_info.rs)"
  else
    fail "watchmux.builtinGroups in _helpers.tpl ($chart_builtin) differs from BUILTIN in src/cache/resource_info.rs ($binary_builtin)"
  fi
else
  note "no $builtin_src: built-in API groups not compared"
fi
builtin_json="$(tr ',' '\n' <<<"$chart_builtin" | jq -R . | jq -sc .)"
# What the chart says a node may list and watch: resource[.group] -> the field
# that must select the node itself ("" for none). The server-side checks ask
# the API server whether it is so.
node_listable_json="$(grep -A1 'define "watchmux.nodeListable"' "$chart/templates/_helpers.tpl" | tail -1 | grep -oE '"[^"]*"' | jq -sc '[range(0; length; 2) as $i | {key: .[$i], value: .[$i + 1]}] | from_entries')"

# The watchmux container of a rendered case, as JSON (the workload's, or in
# sidecar mode the snippet in the client ConfigMap), and the mode it runs in.
# nodeLocal.mode staticPod: the Pod manifest in ConfigMap <fullname>-static-pod.
static_pod_json() {  # <file> -> the static pod as JSON, or nothing
  yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data | to_entries[]
    | select(.key | test("\\.(yaml|yml|json)$")) | .value' "$1" | yq -c 'select(.kind == "Pod")'
}
container_json() {  # <file> -> "mode<TAB>json"
  local c
  c="$(static_pod_json "$1" | jq -c '.spec.containers[] | select(.name == "watchmux")')"
  if [[ -n $c ]]; then printf 'nodeLocal\t%s\n' "$c"; return; fi
  c="$(yq -c 'select(.kind == "DaemonSet" or .kind == "Deployment") | [.kind, (.spec.template.spec.containers[] | select(.name == "watchmux"))]' "$1")"
  if [[ -n $c ]]; then
    jq -r '[(if .[0] == "DaemonSet" then "nodeLocal" else "tier" end), (.[1] | tojson)] | @tsv' <<<"$c"
  else
    c="$(yq -r 'select(.kind == "ConfigMap") | .data["watchmux-container.yaml"] // empty' "$1" | yq -c .)"
    [[ -n $c ]] && printf 'sidecar\t%s\n' "$c"
  fi
}
# jq: the problems with one case's cache flags, ClusterRole and probes, one per line.
# shellcheck disable=SC2016 # a jq program, not shell
cache_jq='
  def inarr($x): any(.[]; . == $x or . == "*");
  def gr: (index(".")) as $i | if $i == null then {g: "", r: .} else {g: .[$i + 1:], r: .[:$i]} end;
  def allows($g; $r; $v; $name):
    any($rules[]; (.apiGroups // [] | inarr($g)) and (.resources // [] | inarr($r)) and (.verbs // [] | inarr($v))
      and (.resourceNames == null or ($name != null and (.resourceNames | index([$name]) != null))));
  def values($f): [$c.args[] | select(startswith($f + "=")) | .[($f | length) + 1:]];
  (values("--cache-resources")) as $cr
  | if ($cr | length) != 1 then "expected one --cache-resources, got \($cr | length)" else
    ($cr[0] | split(",") | map(select(. != ""))) as $res
    | ([values("--watch-cache-sizes")[] | split(",")[] | select(endswith("#0")) | rtrimstr("#0")]) as $off
    | ($res | index(["*"]) != null) as $all
    | ([$res[] | select(. != "*") | select(. as $r | $off | index([$r]) == null)]) as $cached
    | ([$cached[] | select((gr.g) as $g | $builtin | index([$g]) == null)]) as $custom
    | ([values("--cache-scope")[] | capture("^(?<r>[^=]+)=(?<s>.*)$")]) as $scopes
    | def cached($r): ($cached | index([$r]) != null) or ($all and ($off | index([$r]) == null));
      if $clientid then
      # nodeLocal+delegated: no RBAC at all (watchmux uses the node credentials)
      (select(($rules | length) > 0) | "nodeLocal with delegated auth renders ClusterRole rules: \($rules | map("\(.verbs | join("/")) \(.resources | join(","))") | join("; "))"),
      (if $kubelet then
        # kubelet credentials: only what a node may list and watch, its own objects where it must
        (select($all) | "cache.resources * with the kubelet'"'"'s credentials"),
        ($cached[] | select($listable[.] == null) | "\(.) is cached, but a node may not list and watch it (Node authorizer)"),
        ($cached[] | . as $r | ($listable[$r] // "") as $f | select($f != "")
          | select([$scopes[] | select(.r == $r and (.s | test("(^|&)fieldSelector=([^&]*,)?" + ($f | gsub("\\."; "\\.")) + "==?\\$\\(NODE_NAME\\)(,|&|$)")))] | length != 1)
          | "\($r) is cached without --cache-scope=\($r)=fieldSelector=\($f)=$(NODE_NAME): a node may list only its own")
      else empty end)
      else
      # every cached resource can be read
      ($cached[] | . as $n | gr as $x | ("get", "list", "watch") as $v
        | select(allows($x.g; $x.r; $v; null) | not) | "ClusterRole lacks \($v) on \($n)"),
      (if $all then
        (("list", "watch") as $v | select(allows("example.com"; "widgets"; $v; null) | not) | "cache.resources * but no \($v) on *"),
        (select(allows(""; "nodes/proxy"; "get"; null)) | "cache.resources * grants get on subresources (nodes/proxy)")
      else empty end),
      # the CRDs of custom resources, and only then
      (if $all then
        select(allows("apiextensions.k8s.io"; "customresourcedefinitions"; "get"; "widgets.example.com") | not) | "cache.resources * but no get on customresourcedefinitions"
      else
        ($custom[] | select(allows("apiextensions.k8s.io"; "customresourcedefinitions"; "get"; .) | not) | "no get on customresourcedefinitions/\(.)"),
        (select(($custom | length) == 0 and allows("apiextensions.k8s.io"; "customresourcedefinitions"; "get"; "x.example.com")) | "get on customresourcedefinitions without custom resources")
      end),
      # nothing else (the delegated-auth reviews and impersonation aside)
      ($rules[] | . as $rule | .apiGroups[] as $g | .resources[] as $r
        | (if $g == "" then $r else "\($r).\($g)" end) as $n
        | select(
            (($g == "*" or $r == "*") and $all and ($rule.verbs - ["list", "watch"] | length) == 0) or
            ($delegated and $g == "authentication.k8s.io" and $r == "*" and $rule.verbs == ["impersonate"]
              and $rule.resourceNames == null) or
            (($cached | index([$n]) != null) and ($rule.verbs - ["get", "list", "watch"] | length) == 0 and $rule.resourceNames == null) or
            ($n == "customresourcedefinitions.apiextensions.k8s.io" and $rule.verbs == ["get"]
              and (($all and $rule.resourceNames == null) or (($custom | length) > 0 and $rule.resourceNames == $custom))) or
            ($delegated and ($n == "tokenreviews.authentication.k8s.io" or $n == "subjectaccessreviews.authorization.k8s.io")
              and $rule.verbs == ["create"]) or
            ($delegated and ($n == "users" or $n == "groups" or $n == "serviceaccounts"
              or $n == "userextras.authentication.k8s.io" or $n == "uids.authentication.k8s.io")
              and $rule.verbs == ["impersonate"] and $rule.resourceNames == null)
          | not)
        | "ClusterRole grants more than the cache needs: \($rule.verbs) on \($n)\(if $rule.resourceNames then " \($rule.resourceNames)" else "" end)"),
      # delegated: authentication, authorization and impersonation granted
      (if $delegated then
        (["authentication.k8s.io", "tokenreviews", "create"], ["authorization.k8s.io", "subjectaccessreviews", "create"],
         ["", "users", "impersonate"], ["", "groups", "impersonate"], ["", "serviceaccounts", "impersonate"],
         ["authentication.k8s.io", "userextras", "impersonate"], ["authentication.k8s.io", "uids", "impersonate"])
        | select(allows(.[0]; .[1]; .[2]; null) | not) | "delegated auth: ClusterRole lacks \(.[2]) on \(.[1])"
      else empty end)
      end,
      # warm where expected
      (if ($c.args | index(["--cache-warm"]) != null) != $warm then "--cache-warm \(if $warm then "missing" else "unexpected" end)" else empty end),
      # scopes only for cached resources; nodeLocal pods on their own node
      ($scopes[] | select(cached(.r) | not) | "--cache-scope for \(.r), which is not cached"),
      (if $mode == "nodeLocal" and $nodescope and cached("pods") then
        (select([$scopes[] | select(.r == "pods" and .s == "fieldSelector=spec.nodeName=$(NODE_NAME)")] | length != 1)
          | "nodeLocal: no --cache-scope=pods=fieldSelector=spec.nodeName=$(NODE_NAME)"),
        (select([$c.env[] | select(.name == "NODE_NAME" and .valueFrom.fieldRef.fieldPath == "spec.nodeName")] | length != 1)
          | "nodeLocal: NODE_NAME is not the downward API spec.nodeName")
      else empty end)
    end,
  # every $(VAR) in args is a variable of the container (the kubelet expands only those)
  ([$c.args[] | scan("\\$\\(([A-Za-z_][A-Za-z0-9_]*)\\)") | .[0]] | unique[] as $v
    | select([$c.env[]?.name] | index([$v]) == null) | "args use $(\($v)), which is not in the container env"),
  # probes: ready after the caches synced, alive regardless
  (select($c.readinessProbe.httpGet.path != "/readyz") | "readinessProbe is not /readyz"),
  (select($c.livenessProbe.httpGet.path != "/livez") | "livenessProbe is not /livez"),
  (select(($c.startupProbe.httpGet.path // "/livez") != "/livez") | "a startupProbe on \($c.startupProbe.httpGet.path) could kill a pod still listing")
'
check_cache() {  # check_cache <case> <helm args> [ClusterRole rules JSON instead of the rendered ones]
  local name="$1" args="$2" mode cjson rules warm nodescope=true problems
  IFS=$'\t' read -r mode cjson < <(container_json "$tmp/$name.yaml") || true
  if [[ -z ${cjson:-} ]]; then fail "$name: no watchmux container rendered"; return; fi
  rules="${3:-$(yq -c 'select(.kind == "ClusterRole") | .rules // []' "$tmp/$name.yaml")}"
  local delegated=false clientid=false kubelet=false
  if jq -e '.args | index(["--auth-mode=delegated"]) != null' <<<"$cjson" >/dev/null; then delegated=true; fi
  if jq -e '.args | index(["--upstream-identity=client"]) != null' <<<"$cjson" >/dev/null; then clientid=true; fi
  if [[ $clientid == true ]] && jq -e '[.args[] | select(startswith("--kubeconfig=") and (startswith("--kubeconfig=/etc/watchmux/upstream/") | not))] | length == 1' <<<"$cjson" >/dev/null; then kubelet=true; fi
  case "$args" in
    *cache.enabled=false*|*cache.warm=false*) warm=false ;;
    *cache.warm=true*) warm=true ;;
    *) if [[ $mode == sidecar ]]; then warm=false; else warm=true; fi ;;
  esac
  [[ $args == *scopePodsToNode=false* ]] && nodescope=false
  if ! problems="$(jq -nr --argjson c "$cjson" --argjson rules "${rules:-[]}" --argjson builtin "$builtin_json" \
        --arg mode "$mode" --argjson warm "$warm" --argjson nodescope "$nodescope" --argjson delegated "$delegated" \
        --argjson clientid "$clientid" --argjson kubelet "$kubelet" --argjson listable "$node_listable_json" "$cache_jq" 2>&1)"; then
    fail "$name: cache check did not run: $problems"; return
  fi
  if [[ -n $problems ]]; then
    while read -r p; do fail "$name: $p"; done <<<"$problems"
  else
    say "ok   cache $name: $(jq -r '[.args[] | select(test("^--(cache|watch-cache|events-history|slow-watcher|consistency-check)"))] | join(" ")' <<<"$cjson"); ClusterRole: $(jq -r '[.[] | "\(.verbs | join("/")) \(.resources | join(","))\(if .resourceNames then "[" + (.resourceNames | join(",")) + "]" else "" end)"] | join("; ") | if . == "" then "no rules" else . end' <<<"${rules:-[]}")"
  fi
}
for c in "${cases[@]}"; do
  IFS='|' read -r name _ _ args <<<"$c"
  [[ -s $tmp/$name.yaml ]] && check_cache "$name" "$args"
done

# Identity and RBAC per mode. nodeLocal+delegated: --upstream-identity=client,
# no RBAC object at all, no service-account token, and with the kubelet's
# credentials (--kubeconfig outside /etc/watchmux) hostPath mounts that are
# read-only, at the host's own paths, of a kind that must exist (File or
# Directory: a missing path fails the pod instead of becoming an empty
# directory), run as uid 0 with every capability dropped. Elsewhere: no
# hostPath, and trusted-local never impersonates.
# shellcheck disable=SC2016 # a jq program, not shell
identity_jq='
  def arg($f): [$c.args[] | select(startswith($f + "=")) | .[($f | length) + 1:]];
  (arg("--auth-mode")[0]) as $auth
  | (arg("--upstream-identity")[0] // "impersonate") as $upstream
  | (arg("--kubeconfig")[0] // "") as $kc
  | ([$pod.volumes[]? | select(.hostPath)]) as $hp
  | ($mode == "nodeLocal" and $auth == "delegated") as $clientid
  | ($clientid and $kc != "" and ($kc | startswith("/etc/watchmux/upstream/") | not)) as $kubelet
  # the tree: the kubeconfig of the chart for the tier, a ConfigMap (DaemonSet) or a host file (static pod)
  | ($kubelet and ($kc == "/etc/watchmux/tier/kubeconfig" or ($kc | endswith("/upstream.conf")))) as $tree
  | (if $clientid then
      (select($upstream != "client") | "nodeLocal+delegated without --upstream-identity=client"),
      (select($rbac != "") | "nodeLocal+delegated renders RBAC: \($rbac)"),
      (select($static | not) | select($pod.automountServiceAccountToken != false) | "nodeLocal+delegated mounts a service-account token"),
      (select($static and ($pod.serviceAccountName // "") != "") | "the static pod names a ServiceAccount")
    else
      (select($upstream != "impersonate") | "--upstream-identity=\($upstream) outside nodeLocal+delegated"),
      (select($auth == "trusted-local" and $impersonate) | "trusted-local with the impersonate verb: every client could become anyone")
    end),
    (if $kubelet then
      (select(($tree and ($static | not)) | not) | select([$hp[] | select(.hostPath.path == $kc and .hostPath.type == "File")] | length != 1)
        | "--kubeconfig=\($kc) is not a hostPath File volume"),
      (select($tree) | select([$hp[] | select(.hostPath.path | endswith("kubelet.conf"))] | length > 0)
        | "the tree mounts the kubelet'"'"'s own kubeconfig, which it does not use"),
      # the persist directory (nodeLocal.persist): the one writable hostPath,
      # at its own path, made if missing, and what --persist-dir names
      ($hp[] | select(.name == "persist") | . as $v | [$c.volumeMounts[]? | select(.name == "persist")] as $m
        | select(($m | length) != 1 or $m[0].mountPath != $v.hostPath.path or ($m[0].readOnly // false)
          or $v.hostPath.type != "DirectoryOrCreate" or ($c.args | index("--persist-dir=\($v.hostPath.path)")) == null)
        | "the persist hostPath \($v.hostPath.path) is not a writable DirectoryOrCreate at its own path named by --persist-dir"),
      ($hp[] | select(.name != "persist") | . as $v | [$c.volumeMounts[]? | select(.name == $v.name)] as $m
        | if ($m | length) == 0 then "hostPath \($v.hostPath.path) is not mounted"
          # the static pod: its own files from the host directory at /etc/watchmux
          else ($m[] | select(.readOnly != true or (.mountPath != $v.hostPath.path
              and ($static and (.mountPath | startswith("/etc/watchmux/"))) != true))
            | "hostPath \($v.hostPath.path) mounted at \(.mountPath), readOnly \(.readOnly // false)") end),
      ($hp[] | select(.name != "persist") | select(.hostPath.type != "File" and .hostPath.type != "Directory")
        | "hostPath \(.hostPath.path) of type \(.hostPath.type // "\"\"") (a missing path would be created)"),
      (select($pod.securityContext.runAsUser != 0) | "the kubelet'"'"'s credentials (root'"'"'s, mode 0600) need uid 0"),
      (select(($c.securityContext.capabilities.drop // []) != ["ALL"] or $c.securityContext.allowPrivilegeEscalation != false
        or ($c.securityContext.capabilities.add // []) != []) | "uid 0 without every capability dropped")
    else
      ($hp[] | "hostPath \(.hostPath.path) without the kubelet'"'"'s credentials")
    end)
'
check_identity() {  # check_identity <case>
  local name="$1" f="$tmp/$1.yaml" mode cjson pod rbac impersonate=false problems summary
  IFS=$'\t' read -r mode cjson < <(container_json "$f") || true
  [[ -n ${cjson:-} ]] || return 0
  local static=false
  pod="$(static_pod_json "$f" | jq -c .spec)"
  if [[ -n $pod ]]; then
    static=true
  else
    pod="$(yq -c 'select(.kind == "DaemonSet" or .kind == "Deployment") | .spec.template.spec' "$f")"
  fi
  [[ -n $pod ]] || pod='{}'  # sidecar: the application's pod
  rbac="$(yq -r 'select(.kind | test("^(Cluster)?Role(Binding)?$")) | .kind' "$f" | sort | uniq -c | awk '{printf "%s%s", sep, ($1 > 1 ? $1 "x" : "") $2; sep=", "}')"
  [[ -n $(yq -c 'select(.kind == "ClusterRole" or .kind == "Role") | .rules[]? | select(.verbs | index("impersonate"))' "$f") ]] && impersonate=true
  if ! problems="$(jq -nr --argjson c "$cjson" --argjson pod "$pod" --arg mode "$mode" --arg rbac "$rbac" \
        --argjson impersonate "$impersonate" --argjson static "$static" "$identity_jq" 2>&1)"; then
    fail "$name: identity check did not run: $problems"; return
  fi
  if [[ -n $problems ]]; then
    while read -r p; do fail "$name: $p"; done <<<"$problems"
    return
  fi
  summary="$(jq -r '[(.args[] | select(test("^--(auth-mode|upstream-identity|kubeconfig)="))),
    (.volumeMounts[]? | select(.mountPath | startswith("/etc/watchmux") | not) | "\(.mountPath) ro=\(.readOnly // false)")] | join(" ")' <<<"$cjson")"
  say "ok   identity $name: $summary; RBAC: ${rbac:-none}$([[ $impersonate == true ]] && echo ", may impersonate")"
}
for c in "${cases[@]}"; do
  IFS='|' read -r name _ _ _ <<<"$c"
  [[ -s $tmp/$name.yaml ]] && check_identity "$name"
done
# The check itself catches a ClusterRole that lacks a cached resource, and one
# that grants more; and any rule at all with the kubelet's credentials.
if [[ -s $tmp/tier.yaml && -s $tmp/nodelocal.yaml ]]; then
  for tamper in 'tier|map(select(.resources != ["csidrivers"]))' 'tier|. + [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]' \
      'nodelocal|[{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]}]'; do
    case_name="${tamper%%|*}"; tamper="${tamper#*|}"
    rules="$(yq -c "select(.kind == \"ClusterRole\") | .rules" "$tmp/$case_name.yaml" | jq -sc "(.[0] // []) | $tamper")"
    out="$(check_cache "$case_name" "-" "$rules" 2>&1)"  # its failures stay in the subshell
    if [[ $out != *"FAIL: "* ]]; then
      fail "the cache check accepted a tampered ClusterRole ($case_name: $tamper)"
    else
      say "ok   the cache check refuses a tampered ClusterRole: $(grep -m1 FAIL <<<"$out" | sed 's/.*FAIL: //')"
    fi
  done
fi

if [[ -n $binary_flags ]]; then
  "$helm" template watchmux "$chart" --set 'extraArgs[0]=--no-such-flag' >"$tmp/bogus-flag.yaml"
  if (check_flags self-test "$tmp/bogus-flag.yaml") 2>/dev/null; then
    fail "the flag check accepted --no-such-flag"
  else
    say "ok   the flag check refuses a flag the binary lacks (--no-such-flag)"
  fi
fi

for r in "${refusals[@]}"; do
  IFS='|' read -r name args want <<<"$r"
  eval "set -- $args"
  if "$helm" template watchmux "$chart" "$@" >/dev/null 2>"$tmp/refusal.err"; then
    fail "refusal $name: helm template accepted $args"
  elif [[ -n $want ]] && ! grep -qF -- "$want" "$tmp/refusal.err"; then
    cat "$tmp/refusal.err" >&2
    fail "refusal $name: refused, but without the expected message ($want)"
  else
    say "ok   refused $name: $(grep -m1 -E '^- at |execution error' "$tmp/refusal.err" | sed 's/.*execution error at //' | cut -c1-150)"
  fi
done
