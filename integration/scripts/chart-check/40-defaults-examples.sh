# Sourced by chart-check.sh (one shell: its variables, say/fail/note and the
# cases are in scope); offline: duplicate keys, NOTES, rollout pace, resources,
# the goaway chance, scheduling, images, the tree's kubeconfig, certificates,
# the sidecar examples.
# shellcheck shell=bash

# --- offline: duplicate keys, NOTES, rollout, resources, scheduling, images, the tree --
# No object names a key twice (the API server would keep one silently: the
# installer DaemonSet once had two app.kubernetes.io/component labels).
dup_keys="$(python3 - "$tmp" "${cases[@]%%|*}" <<'PY'
import sys, yaml
class Strict(yaml.SafeLoader):
    pass
def mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)
Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
tmp, names = sys.argv[1], sys.argv[2:]
for name in names:
    try:
        text = open(f"{tmp}/{name}.yaml").read()
    except FileNotFoundError:
        continue
    try:
        for doc in yaml.load_all(text, Loader=Strict):
            for key, value in ((doc or {}).get("data") or {}).items():
                if key.endswith((".yaml", ".yml")):  # the static pod manifest inside its ConfigMap
                    list(yaml.load_all(value, Loader=Strict))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        print(f"{name}: {getattr(err, 'problem', None) or str(err).splitlines()[0]}" + (f" (line {mark.line + 1} of a document)" if mark else ""))
PY
)"
if [[ -n $dup_keys ]]; then
  while read -r p; do fail "duplicate key: $p"; done <<<"$dup_keys"
else
  say "ok   no rendered object names a key twice (${#cases[@]} cases, static pod manifests included)"
fi

# NOTES: with the kubelet's credentials, rotation needs no restart. helm
# template does not render NOTES.txt (and install --dry-run needs a cluster):
# a copy of the chart renders it as a named template into a ConfigMap.
rm -rf "$tmp/notes-chart"; mkdir -p "$tmp/notes-chart"; cp -r "$chart" "$tmp/notes-chart/"
{ echo '{{- define "chart-check.notes" }}'; cat "$chart/templates/NOTES.txt"; echo '{{- end }}'; } >"$tmp/notes-chart/watchmux/templates/_chart-check-notes.tpl"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ include "chart-check.notes" . | toJson }}\n' >"$tmp/notes-chart/watchmux/templates/zz-chart-check-notes.yaml"
rm "$tmp/notes-chart/watchmux/templates/NOTES.txt"
for c in "nodelocal-staticpod|--set mode=nodeLocal --set nodeLocal.mode=staticPod --set auth.clientCA.configMap=client-ca" \
         "nodelocal|--set mode=nodeLocal --set auth.clientCA.configMap=client-ca"; do
  IFS='|' read -r name args <<<"$c"
  eval "set -- $args"
  if ! "$helm" template watchmux "$tmp/notes-chart/watchmux" -n "$ns_privileged" "$@" \
      --show-only templates/zz-chart-check-notes.yaml >"$tmp/notes-$name.yaml" 2>&1; then
    cat "$tmp/notes-$name.yaml" >&2; fail "NOTES $name: not rendered"; continue
  fi
  notes="$(yq -r .data.notes "$tmp/notes-$name.yaml")"
  if [[ $notes == *crictl* || $notes == *LIMITATION* || $notes != *"Certificate rotation needs no restart"* ]]; then
    fail "NOTES $name: tells operators to restart watchmux after a kubelet certificate rotation (or does not say it needs none)"
  else
    say "ok   NOTES $name: a kubelet certificate rotation needs no restart (no crictl stop)"
  fi
done
if grep -qi 'crictl\|restart it before the old one expires' "$chart/values.yaml"; then
  fail "values.yaml still tells operators to restart watchmux after a kubelet certificate rotation"
fi

# Rollout: the DaemonSet form rolls unless the kubelet is its client; both it
# and the installer take nodeLocal.rollout; and the defaults finish a
# 5,000-node rollout within the hour when every node takes its worst case:
# the old static pod's whole termination grace (shutdownGrace + 5 s, a
# request that hangs), 15 s to start the installer pod and the new
# container (the image pulled by the installer pod itself, caches warmed),
# one readiness period of the installer's probe, and minReadySeconds.
rollout_of() {  # <case> <installer|watchmux> -> "type maxUnavailable minReadySeconds" of that DaemonSet
  yq -r --arg s "$2" 'select(.kind == "DaemonSet" and ((.metadata.name | endswith("-installer")) == ($s == "installer"))) | "\(.spec.updateStrategy.type) \(.spec.updateStrategy.rollingUpdate.maxUnavailable // "-") \(.spec.minReadySeconds // 0)"' "$tmp/$1.yaml"
}
want_default="RollingUpdate 2% 10"
got_ds="$(rollout_of nodelocal-servicemonitor watchmux)"; got_installer="$(rollout_of nodelocal-staticpod installer)"
got_kubelet="$(rollout_of nodelocal watchmux)"; got_tuned="$(rollout_of nodelocal-rollout-tuned watchmux)"
if [[ $got_ds == "$want_default" && $got_installer == "$want_default" && $got_kubelet == "OnDelete - 0" && $got_tuned == "RollingUpdate 50 0" ]]; then
  say "ok   rollout: DaemonSet and installer $want_default (type, maxUnavailable, minReadySeconds); OnDelete with the kubelet as the DaemonSet's client; nodeLocal.rollout tunes both"
else
  fail "rollout: DaemonSet [$got_ds], installer [$got_installer] (want [$want_default]); kubelet on the DaemonSet [$got_kubelet] (want OnDelete); tuned [$got_tuned]"
fi
rollout_minutes="$(yq -r 'select(.kind == "DaemonSet" and (.metadata.name | endswith("-installer"))) | .spec' "$tmp/nodelocal-staticpod.yaml" | jq -r \
  --argjson grace "$(static_pod_json "$tmp/nodelocal-staticpod.yaml" | jq .spec.terminationGracePeriodSeconds)" '
  (.updateStrategy.rollingUpdate.maxUnavailable | tostring) as $mu
  | (if ($mu | endswith("%")) then (5000 * ($mu | rtrimstr("%") | tonumber) / 100 | ceil) else ($mu | tonumber) end) as $wave
  | ((5000 / $wave) | ceil) as $waves
  | ($grace + 15 + .template.spec.containers[0].readinessProbe.periodSeconds + .minReadySeconds) as $node
  | "\($waves * $node / 60 | floor) \($waves) \($wave) \($node)"')"
read -r minutes waves wave per_node <<<"$rollout_minutes"
if [[ -n ${minutes:-} ]] && (( minutes < 60 )); then
  say "ok   a 5,000-node static-pod rollout with the defaults: $waves waves of $wave nodes, at worst ${per_node}s each: ${minutes} min"
else
  fail "a 5,000-node static-pod rollout with the defaults takes ${minutes:-?} min at worst ($waves waves of $wave nodes, ${per_node}s each): over the hour"
fi

# Resources: each mode's own defaults, the top-level value overrides them,
# and the chart README's sizing table gives the same defaults.
res_line() {  # <case>: "requests.cpu requests.memory limits.memory" of the watchmux container
  local c; IFS=$'\t' read -r _ c < <(container_json "$tmp/$1.yaml")
  jq -r '"\(.resources.requests.cpu // "-") \(.resources.requests.memory // "-") \(.resources.limits.memory // "-") \(.resources.limits.cpu // "-")"' <<<"$c"
}
res_bad=""
for c in "tier|tier" "sidecar|sidecar" "nodelocal|nodeLocal" "nodelocal-staticpod|nodeLocal"; do
  IFS='|' read -r name mode <<<"$c"
  want="$(yq -r --arg m "$mode" '.[$m].resources | "\(.requests.cpu) \(.requests.memory) \(.limits.memory) \(.limits.cpu // "-")"' "$chart/values.yaml")"
  got="$(res_line "$name")"
  [[ $got == "$want" ]] || res_bad+=" $name: [$got], want $mode.resources [$want];"
  grep -qF "| \`$mode\` | $(awk '{print $2}' <<<"$want") | $(awk '{print $3}' <<<"$want") |" "$chart/README.md" || res_bad+=" the README's sizing table lacks $mode's defaults ($want);"
done
[[ $(res_line nodelocal-rollout-tuned) == "- 1Gi - -" ]] || res_bad+=" resources does not override the mode's defaults: [$(res_line nodelocal-rollout-tuned)];"
if [[ -z $res_bad ]]; then
  say "ok   resources per mode: tier [$(res_line tier)], nodeLocal [$(res_line nodelocal)], sidecar [$(res_line sidecar)] (requests cpu, memory; limits memory, cpu), as in the README's sizing table; resources overrides them"
else
  fail "resources:$res_bad"
fi

# GOAWAY chance: 0.02 by default in the tier (replicas behind a Service,
# rebalanced after a rollout), none in nodeLocal and sidecar (nothing to
# balance); limits.goawayChance overrides it in any mode; the README's values
# table says the same.
flag_line() {  # <case> <flag>: that flag of the watchmux container (with its value), or -
  local c; IFS=$'\t' read -r _ c < <(container_json "$tmp/$1.yaml")
  jq -r --arg flag "$2" '[.args[] | select(startswith($flag + "="))] | if length == 0 then "-" else join(" ") end' <<<"$c"
}
goaway_line() { flag_line "$1" --goaway-chance; }
defaults_mismatches() {  # <line function> <case|want>...: each case whose line is not the one it wants
  local line="$1" c name want got bad=""
  shift
  for c in "$@"; do
    IFS='|' read -r name want <<<"$c"
    got="$("$line" "$name")"
    [[ $got == "$want" ]] || bad+=" $name: [$got], want [$want];"
  done
  printf '%s' "$bad"
}
goaway_bad="$(defaults_mismatches goaway_line "tier|--goaway-chance=0.02" "tier-cache-all|--goaway-chance=0.001" \
  "nodelocal|-" "nodelocal-staticpod|-" "sidecar|-" "nodelocal-delegated-tuned|--goaway-chance=0.005")"
grep -qF '| `limits.goawayChance` | `null`: `0.02` in `tier`, `0` (off) in `nodeLocal` and `sidecar` |' "$chart/README.md" ||
  goaway_bad+=" the README's values table lacks limits.goawayChance's defaults;"
if [[ -z $goaway_bad ]]; then
  say "ok   goaway chance: tier [$(goaway_line tier)], nodeLocal [$(goaway_line nodelocal)], sidecar [$(goaway_line sidecar)]; limits.goawayChance overrides it"
else
  fail "goaway chance:$goaway_bad"
fi

# Maximum connection age: 5m by default in the tier (kubelet-shaped clients,
# whom the chance barely moves, rebalanced within minutes of a rollout), none
# in nodeLocal and sidecar; limits.maxConnectionAge and its grace override.
age_line() { echo "$(flag_line "$1" --max-connection-age) $(flag_line "$1" --max-connection-age-grace)"; }
age_bad="$(defaults_mismatches age_line "tier|--max-connection-age=5m -" \
  "tier-cache-all|--max-connection-age=15m --max-connection-age-grace=2m" "nodelocal|- -" "nodelocal-staticpod|- -" \
  "sidecar|- -")"
grep -qF '| `limits.maxConnectionAge` / `maxConnectionAgeGrace` | `null`: `5m` in `tier`, none in `nodeLocal` and `sidecar`' "$chart/README.md" ||
  age_bad+=" the README's values table lacks limits.maxConnectionAge's defaults;"
if [[ -z $age_bad ]]; then
  say "ok   maximum connection age: tier [$(age_line tier)], nodeLocal [$(age_line nodelocal)], sidecar [$(age_line sidecar)]; limits.maxConnectionAge overrides it"
else
  fail "maximum connection age:$age_bad"
fi

# Scheduling: the tier at system-cluster-critical spread over nodes and zones,
# the node-local at system-node-critical; each overridable.
sched_line() {  # <case>: "priorityClassName topologyKeys..." of the pod
  local pod; pod="$(yq -c 'select(.kind == "DaemonSet" or .kind == "Deployment") | .spec.template.spec' "$tmp/$1.yaml")"
  [[ -n $pod ]] || pod="$(static_pod_json "$tmp/$1.yaml" | jq -c '.spec')"
  jq -r '"\(.priorityClassName // "-") \([.topologySpreadConstraints[]?.topologyKey] | join(","))"' <<<"$pod"
}
sched_bad=""
for c in "tier|system-cluster-critical kubernetes.io/hostname,topology.kubernetes.io/zone" \
         "tier-scheduling-tuned|system-node-critical kubernetes.io/hostname" \
         "nodelocal|system-node-critical " "nodelocal-staticpod|system-node-critical "; do
  IFS='|' read -r name want <<<"$c"
  got="$(sched_line "$name")"
  [[ $got == "$want" ]] || sched_bad+=" $name: [$got], want [$want];"
done
if [[ -z $sched_bad ]]; then
  say "ok   scheduling: tier [$(sched_line tier)], nodeLocal [$(sched_line nodelocal)], overridable [$(sched_line tier-scheduling-tuned)]"
else
  fail "scheduling (priorityClassName, spread keys):$sched_bad"
fi

# Images: the watchmux image only, the installer's included.
other_images="$(for c in "${cases[@]}"; do IFS='|' read -r name _ <<<"$c"; [[ -s $tmp/$name.yaml ]] || continue
  { yq -r '.. | objects | select(has("image")) | .image | strings' "$tmp/$name.yaml"; static_pod_json "$tmp/$name.yaml" | jq -r '.. | objects | .image? // empty | strings'; } |
    grep -v '^registry.example/watchmux[:@]' | sed "s|^|$name: |" || true; done | sort -u)"
if [[ -n $other_images ]]; then
  fail "images other than the watchmux image: $(echo $other_images)"
else
  say "ok   every rendered container runs the watchmux image (the static-pod installer included)"
fi

# The tree: watchmux's --kubeconfig is the chart's tree kubeconfig (the tier,
# its CA, the kubelet's rotating certificate), from a ConfigMap for the
# DaemonSet and a host file for the static pod.
tree_check() {  # <case> <kubeconfig path> <expected server> <CA path> <tls-server-name or ->
  local name="$1" path="$2" server="$3" ca="$4" sni="$5" c kc
  if [[ ! -s $tmp/$name.yaml ]]; then fail "tree $name: not rendered"; return; fi
  IFS=$'\t' read -r _ c < <(container_json "$tmp/$name.yaml")
  if [[ -n $(static_pod_json "$tmp/$name.yaml") ]]; then
    kc="$(yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data["upstream.conf"]' "$tmp/$name.yaml")"
  else
    kc="$(yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-tier-upstream"))) | .data.kubeconfig' "$tmp/$name.yaml")"
  fi
  local got want
  got="$(jq -r '[.args[] | select(startswith("--kubeconfig=") or startswith("--upstream-watch-list"))] | join(" ")' <<<"$c") $(yq -r '"\(.clusters[0].cluster.server) \(.clusters[0].cluster["certificate-authority"]) \(.clusters[0].cluster["tls-server-name"] // "-") \(.users[0].user["client-certificate"])"' <<<"$kc")"
  want="--kubeconfig=$path --upstream-watch-list=true $server $ca $sni /var/lib/kubelet/pki/kubelet-client-current.pem"
  if [[ $got == "$want" ]] && jq -e '.volumeMounts | map(select(.mountPath == "/etc/kubernetes/kubelet.conf")) | length == 0' <<<"$c" >/dev/null; then
    say "ok   tree $name: $got; the kubelet's own kubeconfig not mounted"
  else
    fail "tree $name: [$got], want [$want] and no /etc/kubernetes/kubelet.conf mount"
  fi
}
tree_check nodelocal-tree /etc/watchmux/tier/kubeconfig https://watchmux-tier.watchmux.svc:443 /etc/watchmux/tier-ca/ca.crt -
tree_check nodelocal-staticpod-tree /etc/kubernetes/watchmux/upstream.conf https://10.0.0.10:443 /etc/kubernetes/watchmux/tier-ca/ca.crt watchmux-tier.watchmux.svc
# Watch-lists by default only in the tree: a tier serves them from its cache;
# kube-apiserver serves a consistent LIST from its own.
watch_listers="" tree_cases=""
for f in "$tmp"/*.yaml; do
  name="$(basename "$f" .yaml)"
  IFS=$'\t' read -r _ c < <(container_json "$f") || continue
  if [[ $name == *-tree || $name == *-tree-* ]]; then tree_cases+=" $name"; fi
  if jq -e '.args | index("--upstream-watch-list=true")' <<<"$c" >/dev/null 2>&1; then watch_listers+=" $name"; fi
done
if [[ -n $tree_cases && $watch_listers == "$tree_cases" ]]; then
  say "ok   --upstream-watch-list only in the tree:$watch_listers"
else
  fail "--upstream-watch-list rendered in [$watch_listers ], want the tree cases [$tree_cases ] alone"
fi
if [[ -s $tmp/nodelocal-tree.yaml && $(yq -r 'select(.kind == "DaemonSet") | .spec.template.spec.dnsPolicy' "$tmp/nodelocal-tree.yaml") != ClusterFirstWithHostNet ]]; then
  fail "tree nodelocal-tree: a Service name as the tier needs cluster DNS (dnsPolicy ClusterFirstWithHostNet)"
fi

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
  # ECDSA P-256: a third of RSA 2048's handshake CPU in a reconnect storm.
  local key; key="$(openssl x509 -in "$d/tls.crt" -noout -text 2>/dev/null | grep -E 'Public Key Algorithm|NIST CURVE' | tr -s ' ' | tr '\n' ' ')"
  [[ $key == *id-ecPublicKey*P-256* ]] || { fail "$name: serving key is not ECDSA P-256 ($key)"; return; }
  say "ok   generated certificate $name: verifies against its CA; ECDSA P-256; $sans"
}
check_generated_cert tier "DNS:watchmux.$ns_restricted.svc" "DNS:watchmux.$ns_restricted.svc.cluster.local"
check_generated_cert nodelocal "IPAddress:127.0.0.1" "DNS:watchmux.node.local" "DNS:localhost"

# GitOps (Argo CD renders with helm template, where lookup finds nothing): two
# renders of the defaults are byte-identical, so a sync changes nothing and
# restarts no pod; no key material and no checksum/tls in them (cert-manager
# issues the certificate: tls.generated.withoutCluster). Generating in every
# render instead gives two different renders, which is why it is not the
# default.
check_gitops_stable() {  # <case>
  local name="$1" c args nskind
  for c in "${cases[@]}"; do [[ ${c%%|*} == "$name" ]] && break; done
  IFS='|' read -r _ nskind _ args <<<"$c"
  eval "set -- $args"
  local ns; ns="$(ns_for "$nskind")"
  local a="$tmp/gitops-$name-1.yaml" b="$tmp/gitops-$name-2.yaml" g1="$tmp/gitops-$name-gen-1.yaml" g2="$tmp/gitops-$name-gen-2.yaml"
  RENDER_LIKE_GITOPS=1 "$helm" template watchmux "$chart" -n "$ns" "$@" >"$a" 2>"$tmp/gitops-$name.err" &&
    RENDER_LIKE_GITOPS=1 "$helm" template watchmux "$chart" -n "$ns" "$@" >"$b" 2>>"$tmp/gitops-$name.err" &&
    RENDER_LIKE_GITOPS=1 "$helm" template watchmux "$chart" -n "$ns" "$@" --set tls.generated.withoutCluster=generate >"$g1" 2>>"$tmp/gitops-$name.err" &&
    RENDER_LIKE_GITOPS=1 "$helm" template watchmux "$chart" -n "$ns" "$@" --set tls.generated.withoutCluster=generate >"$g2" 2>>"$tmp/gitops-$name.err" ||
    { cat "$tmp/gitops-$name.err" >&2; fail "GitOps $name: helm template"; return; }
  if ! diff -u "$a" "$b" >"$tmp/gitops-$name.diff"; then
    head -20 "$tmp/gitops-$name.diff" >&2; fail "GitOps $name: two helm template renders of the defaults differ"; return
  fi
  if grep -qE '^  tls\.key:|checksum/tls' "$a"; then
    fail "GitOps $name: the default render carries key material or checksum/tls"; return
  fi
  local certs; certs="$(yq -r 'select(.kind == "Certificate") | .spec.secretName' "$a" | paste -sd, -)"
  [[ $certs == *"watchmux-tls"* ]] || { fail "GitOps $name: no cert-manager Certificate for Secret watchmux-tls (got '$certs')"; return; }
  if cmp -s "$g1" "$g2"; then
    fail "GitOps $name: two renders with tls.generated.withoutCluster=generate are identical (is the CA generated at all?)"; return
  fi
  say "ok   GitOps $name: two helm template renders are byte-identical (cert-manager issues $certs; no key, no checksum/tls); generate would differ"
}
check_gitops_stable tier
check_gitops_stable nodelocal

# serviceMonitor.metricRelabelings is the ServiceMonitor endpoint's, as given.
relabel_args=(--set mode=tier --set serviceMonitor.enabled=true
  --set 'serviceMonitor.metricRelabelings[0].action=drop'
  --set 'serviceMonitor.metricRelabelings[0].sourceLabels[0]=__name__'
  --set 'serviceMonitor.metricRelabelings[0].regex=watchmux_fanout_duration_seconds_bucket')
if "$helm" template watchmux "$chart" -n "$ns_restricted" "${relabel_args[@]}" >"$tmp/relabel.yaml" 2>"$tmp/relabel.err"; then
  got="$(yq -c -S 'select(.kind == "ServiceMonitor") | .spec.endpoints[0].metricRelabelings' "$tmp/relabel.yaml")"
  want='[{"action":"drop","regex":"watchmux_fanout_duration_seconds_bucket","sourceLabels":["__name__"]}]'
  if [[ $got == "$want" ]]; then
    say "ok   serviceMonitor.metricRelabelings: in the ServiceMonitor's endpoint ($got)"
  else
    fail "serviceMonitor.metricRelabelings: the ServiceMonitor's endpoint has '$got', not '$want'"
  fi
  if yq -e 'select(.kind == "ServiceMonitor") | .spec.endpoints[0] | has("metricRelabelings")' "$tmp/tier-servicemonitor.yaml" >/dev/null 2>&1; then
    fail "serviceMonitor.metricRelabelings: rendered without being set"
  fi
else
  cat "$tmp/relabel.err" >&2; fail "serviceMonitor.metricRelabelings: helm template"
fi

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
  chart_container="$(yq -r 'select(.kind == "ConfigMap") | .data["watchmux-container.yaml"]' "$tmp/sidecar-rendered.yaml" | yq -cS .)"
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
  # The example is the file the static-pod installer writes for the kubelet:
  # the same kubeconfig as the chart's default nodeLocal staticPod rendering.
  if command -v yq >/dev/null && command -v jq >/dev/null; then
    "$helm" template watchmux "$chart" -n "$ns_privileged" --set mode=nodeLocal --set nodeLocal.mode=staticPod \
        --set auth.clientCA.configMap=client-ca 2>"$tmp/kc-chart.err" \
      | yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data["kubelet-watchmux.conf"]' \
      >"$tmp/kc-chart.yaml"
    if "$kubectl" config view --kubeconfig "$tmp/kc-chart.yaml" -o json 2>>"$tmp/kc-chart.err" | jq -S . >"$tmp/kc-chart.json" \
        && "$kubectl" config view --kubeconfig "$root/examples/kubelet-kubeconfig.yaml" -o json | jq -S . >"$tmp/kc-example.json" \
        && [[ -s $tmp/kc-chart.json ]] && cmp -s "$tmp/kc-chart.json" "$tmp/kc-example.json"; then
      say "ok   examples/kubelet-kubeconfig.yaml is the kubeconfig the static-pod installer writes"
    else
      cat "$tmp/kc-chart.err" >&2; diff "$tmp/kc-chart.json" "$tmp/kc-example.json" >&2 || true
      fail "examples/kubelet-kubeconfig.yaml differs from the chart's static-pod kubelet-watchmux.conf"
    fi
  fi
else
  note "no kubectl at $kubectl: kubeconfig example not parsed"
fi
