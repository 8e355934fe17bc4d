#!/usr/bin/env bash
# Checks what the chart gives Prometheus and Grafana, offline (no cluster):
#   - the PrometheusRule renders a rule group that `promtool check rules`
#     accepts (defaults, and with alertLabels and a custom selector), and the
#     alerts behave as integration/monitoring/alerts-test.yaml says
#     (`promtool test rules`: every alert, counted per release and not per
#     pod; the upstream's cause named; watchmux gone);
#   - every alert has a runbook_url whose section is in docs/runbooks.md, and
#     the chart refuses alerts without monitoring.prometheusRule.runbookBaseURL;
#   - the dashboard ConfigMap carries the grafana_dashboard label and the
#     dashboard file, which parses as JSON, and every query in it parses as
#     PromQL (promtool, with Grafana's variables filled in), selects by the
#     cluster, namespace, job and pod variables and aggregates (no line per
#     pod), and the dashboard shows watchmux_upstream_health, the caches
#     serving unproven state and the persist stores' health;
#   - every metric the dashboard and the alerts query is one watchmux exports
#     (named in src/metrics.rs or src/metrics/process.rs);
#   - the recommended fleet drop list (examples/fleet-metric-relabelings.yaml)
#     drops no series the dashboard or the alerts read, and each of its rules
#     drops something watchmux exports;
#   - nodeLocal with hostNetwork: the admin port is loopback (probes to
#     127.0.0.1) by default, on $(HOST_IP) with nodeLocal.adminOnHostIP
#     (probes to the pod's IP), and a ServiceMonitor that could not scrape
#     it is refused.
# promtool is built from its Go module (build-promtool.sh), helm from its own
# (build-helm.sh). Exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
chart="$root/charts/watchmux"
bash "$scripts/build-helm.sh" >&2
bash "$scripts/build-promtool.sh" >&2
helm="$root/.run/helm"
promtool="$root/.run/bin/promtool"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
say() { echo "monitoring-check: $*"; }
fail() { echo "monitoring-check: FAIL: $*" >&2; failures=$((failures + 1)); }

runbooks="https://runbooks.example/docs/runbooks.md"
render() {  # render <helm args...>: the chart as release "watchmux" in "monitoring"
  "$helm" template watchmux "$chart" -n monitoring --set image.repository=registry.example/watchmux \
    --set monitoring.prometheusRule.runbookBaseURL="$runbooks" "$@"
}

# --- alerts ---------------------------------------------------------------------
render --set monitoring.prometheusRule.enabled=true --show-only templates/prometheusrule.yaml \
  | yq '.spec' >"$tmp/rules.yaml"
if "$promtool" check rules "$tmp/rules.yaml" >"$tmp/check.log" 2>&1; then
  say "ok   promtool check rules: $(grep -oE '[0-9]+ rules found' "$tmp/check.log")"
else
  cat "$tmp/check.log" >&2; fail "promtool check rules (defaults)"
fi
render --set monitoring.prometheusRule.enabled=true --set monitoring.prometheusRule.alertLabels.team=platform \
  --set-string 'monitoring.prometheusRule.selector=namespace="kube-system"\,container="watchmux"' \
  --show-only templates/prometheusrule.yaml | yq '.spec' >"$tmp/rules-custom.yaml"
if "$promtool" check rules "$tmp/rules-custom.yaml" >"$tmp/check-custom.log" 2>&1 \
  && [[ $(yq '[.groups[].rules[] | select(.labels.team == "platform")] | length' "$tmp/rules-custom.yaml") == \
        $(yq '[.groups[].rules[]] | length' "$tmp/rules-custom.yaml") ]] \
  && [[ $(yq -r '.groups[].rules[0].expr' "$tmp/rules-custom.yaml") == 'absent(up{namespace="kube-system",container="watchmux"} == 1)' ]]; then
  say "ok   promtool check rules with alertLabels and a selector of one's own"
else
  cat "$tmp/check-custom.log" >&2; fail "rules with alertLabels and a custom selector"
fi
missing_for="$(yq -r '.groups[].rules[] | select(.for == null or .annotations.summary == null or .annotations.description == null) | .alert' "$tmp/rules.yaml")"
[[ -z $missing_for ]] || fail "alerts without for, summary or description: $missing_for"
# Runbooks: every alert links its own section of docs/runbooks.md, which exists.
sections="$(sed -nE 's/^## (Watchmux[A-Za-z]+)$/\1/p' "$root/docs/runbooks.md" | tr 'A-Z' 'a-z')"
bad_runbooks="$(yq -r '.groups[].rules[] | "\(.alert) \(.annotations.runbook_url // "-")"' "$tmp/rules.yaml" | while read -r alert url; do
  want="$runbooks#$(tr 'A-Z' 'a-z' <<<"$alert")"
  if [[ $url != "$want" ]]; then echo "$alert: runbook_url $url, want $want"
  elif ! grep -qx "${want#*#}" <<<"$sections"; then echo "$alert: no section '## $alert' in docs/runbooks.md"; fi
done)"
if [[ -n $bad_runbooks ]]; then
  while read -r b; do fail "runbook: $b"; done <<<"$bad_runbooks"
else
  say "ok   every alert has a runbook_url to its section of docs/runbooks.md ($(yq '[.groups[].rules[]] | length' "$tmp/rules.yaml") alerts)"
fi
if "$helm" template watchmux "$chart" -n monitoring --set image.repository=registry.example/watchmux \
    --set monitoring.prometheusRule.enabled=true >/dev/null 2>"$tmp/no-runbooks.err"; then
  fail "the chart rendered alerts without monitoring.prometheusRule.runbookBaseURL"
elif grep -q "runbookBaseURL is required" "$tmp/no-runbooks.err"; then
  say "ok   alerts without monitoring.prometheusRule.runbookBaseURL are refused"
else
  cat "$tmp/no-runbooks.err" >&2; fail "alerts without runbookBaseURL: unexpected error"
fi
# The alerts that must be there: watchmux gone, and the upstream aggregated by cause.
for alert in WatchmuxDown WatchmuxTargetsDown WatchmuxUpstreamDown WatchmuxUpstreamDegraded; do
  yq -e --arg a "$alert" '[.groups[].rules[] | select(.alert == $a)] | length == 1' "$tmp/rules.yaml" >/dev/null || fail "no alert $alert"
done
per_pod="$(yq -r '.groups[].rules[] | select(.alert != "WatchmuxDown") | select(.expr | test("^(count|sum) by \\([^)]*\\bpod\\b") or (test("^(count|sum|absent)") | not)) | .alert' "$tmp/rules.yaml")"
[[ -z $per_pod ]] || fail "alerts that fire per pod (not counted per release): $(echo $per_pod)"
cp "$root/integration/monitoring/alerts-test.yaml" "$tmp/"
if (cd "$tmp" && "$promtool" test rules alerts-test.yaml) >"$tmp/test.log" 2>&1; then
  say "ok   promtool test rules: integration/monitoring/alerts-test.yaml"
else
  cat "$tmp/test.log" >&2; fail "promtool test rules"
fi

# --- dashboard ------------------------------------------------------------------
render --set monitoring.dashboards.enabled=true --show-only templates/dashboard-configmap.yaml >"$tmp/dashboard-cm.yaml"
if [[ $(yq -r '.metadata.labels.grafana_dashboard' "$tmp/dashboard-cm.yaml") != 1 ]]; then
  fail "the dashboard ConfigMap lacks the grafana_dashboard: \"1\" label"
fi
yq -r '.data["watchmux.json"]' "$tmp/dashboard-cm.yaml" >"$tmp/dashboard.json"
if jq -e '.panels | length > 0' "$tmp/dashboard.json" >/dev/null && diff -q <(jq -S . "$tmp/dashboard.json") <(jq -S . "$chart/dashboards/watchmux.json") >/dev/null; then
  say "ok   dashboard ConfigMap: $(jq '[.panels[] | select(.type != "row")] | length' "$tmp/dashboard.json") panels, JSON parses"
else
  fail "the dashboard in the ConfigMap does not parse or differs from charts/watchmux/dashboards/watchmux.json"
fi

# The dashboard's queries parse as PromQL: promtool checks them as recording
# rules, with Grafana's variables given values.
jq '{groups: [{name: "dashboard", rules: [.. | objects | select(has("expr")) | .expr
      | gsub("\\$__rate_interval"; "5m") | gsub("\\$(job|cluster|namespace|pod)"; ".*")] | to_entries
      | map({record: "dashboard:query_\(.key)", expr: .value})}]}' "$chart/dashboards/watchmux.json" >"$tmp/dashboard-rules.json"
if "$promtool" check rules "$tmp/dashboard-rules.json" >"$tmp/check-dashboard.log" 2>&1; then
  say "ok   every dashboard query parses as PromQL ($(grep -oE '[0-9]+ rules found' "$tmp/check-dashboard.log" | cut -d' ' -f1) queries)"
else
  cat "$tmp/check-dashboard.log" >&2; fail "dashboard queries that promtool does not accept"
fi
if [[ $(jq '[.. | objects | select(has("gridPos")) | .id] | (length == (unique | length))' "$chart/dashboards/watchmux.json") != true ]]; then
  fail "dashboard panels with the same id"
fi
# Readable at thousands of pods: variables for cluster, namespace, job and
# pod; every query selects by all four and aggregates (by a bounded label, or
# a top-k), so no panel draws a line per pod; the upstream's state is shown.
vars="$(jq -r '[.templating.list[].name] | join(" ")' "$chart/dashboards/watchmux.json")"
[[ $vars == "datasource cluster namespace job pod" ]] || fail "dashboard variables [$vars], want datasource cluster namespace job pod"
unselected="$(jq -r '.. | objects | select(has("expr")) | .expr' "$chart/dashboards/watchmux.json" | grep -oE '(watchmux|process)_[a-z_]+\{[^}]*\}' |
  grep -v 'cluster=~"\$cluster",namespace=~"\$namespace",job=~"\$job",pod=~"\$pod"' || true)"
[[ -z $unselected ]] || fail "dashboard selectors without the cluster/namespace/job/pod variables: $(echo $unselected | head -c 300)"
unaggregated="$(jq -r '.. | objects | select(has("expr")) | .expr' "$chart/dashboards/watchmux.json" |
  grep -vE '^(sum|max|min|count|avg|topk|bottomk|quantile|histogram_quantile)\b' || true)"
[[ -z $unaggregated ]] || fail "dashboard queries that draw a line per pod: $unaggregated"
if ! jq -e '[.. | objects | select(has("expr")) | .expr | select(contains("watchmux_upstream_health"))] | length >= 2' "$chart/dashboards/watchmux.json" >/dev/null; then
  fail "the dashboard does not show watchmux_upstream_health"
fi
# nodeLocal's persistence (issue 27): caches serving unproven state, and the
# stores' health.
for metric in watchmux_cache_serving_unproven watchmux_persist_degraded watchmux_persist_write_errors_total \
    watchmux_persist_stores_moved_aside_total watchmux_persist_commit_duration_seconds_bucket; do
  jq -e --arg m "$metric" '[.. | objects | select(has("expr")) | .expr | select(contains($m))] | length >= 1' \
    "$chart/dashboards/watchmux.json" >/dev/null || fail "the dashboard does not show $metric"
done
[[ -n $unselected$unaggregated ]] || say "ok   dashboard: variables $vars; every query selects by them and aggregates; watchmux_upstream_health, unproven caches and store health shown"

# --- every metric queried exists ---------------------------------------------------
exported="$(cat "$root/src/metrics.rs" "$root/src/metrics/process.rs" | grep -oE '"(watchmux|process)_[a-z_]+"' | tr -d '"' | sort -u)"
queried() {  # the metric names in PromQL expressions on stdin, histogram suffixes removed
  grep -oE '\b(watchmux|process)_[a-z_]+' | sed -E 's/_(bucket|count|sum)$//' | sort -u
}
for source in dashboard alerts; do
  if [[ $source == dashboard ]]; then
    names="$(jq -r '.. | objects | select(has("expr")) | .expr' "$chart/dashboards/watchmux.json" | queried)"
  else
    names="$(yq -r '.groups[].rules[].expr' "$tmp/rules.yaml" | queried)"
  fi
  unknown="$(comm -23 <(echo "$names") <(echo "$exported"))"
  if [[ -n $unknown ]]; then
    fail "the $source query metrics watchmux does not export: $(echo $unknown)"
  else
    say "ok   every metric the $source query is exported ($(echo "$names" | wc -l) names)"
  fi
done

# --- the fleet drop list keeps what the dashboard and the alerts read ---------------
# charts/watchmux/examples/fleet-metric-relabelings.yaml (the chart README's
# recommended serviceMonitor.metricRelabelings): no drop rule matches a series
# name a query reads (Prometheus anchors the regex at both ends, as fullmatch
# does), and each drops some series watchmux exports (a histogram's as
# _bucket/_sum/_count).
relabelings="$chart/examples/fleet-metric-relabelings.yaml"
read_names="$( { jq -r '.. | objects | select(has("expr")) | .expr' "$chart/dashboards/watchmux.json"; yq -r '.groups[].rules[].expr' "$tmp/rules.yaml"; } |
  grep -oE '\b(watchmux|process)_[a-z_]+' | sort -u)"
relabel_problems="$(python3 - "$relabelings" <(echo "$read_names") <(echo "$exported") <<'PY'
import re, sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))["serviceMonitor"]["metricRelabelings"]
read = open(sys.argv[2]).read().split()
exported = [n + s for n in open(sys.argv[3]).read().split() for s in ("", "_bucket", "_sum", "_count")]
for i, rule in enumerate(rules):
    if rule.get("action") != "drop" or rule.get("sourceLabels") != ["__name__"]:
        print(f"rule {i}: not a drop by __name__")
        continue
    regex = re.compile(rule["regex"])
    for name in read:
        if regex.fullmatch(name):
            print(f"rule {i} drops {name}, which the dashboard or an alert reads")
    if not any(regex.fullmatch(n) for n in exported):
        print(f"rule {i} drops nothing watchmux exports")
PY
)"
if [[ -n $relabel_problems ]]; then
  while read -r p; do fail "fleet-metric-relabelings.yaml: $p"; done <<<"$relabel_problems"
else
  say "ok   fleet-metric-relabelings.yaml: $(yq '.serviceMonitor.metricRelabelings | length' "$relabelings") drop rules, none drops a series the dashboard or the alerts read ($(echo "$read_names" | wc -l) names)"
fi

# --- nodeLocal: a scrapeable admin port -------------------------------------------
nodelocal=(--set mode=nodeLocal --set auth.clientCA.configMap=client-ca)
container() { yq -c 'select(.kind == "DaemonSet") | .spec.template.spec.containers[] | select(.name == "watchmux")'; }
render "${nodelocal[@]}" | container >"$tmp/loopback.json"
render "${nodelocal[@]}" --set nodeLocal.adminOnHostIP=true --set serviceMonitor.enabled=true >"$tmp/onhost.yaml"
container <"$tmp/onhost.yaml" >"$tmp/onhost.json"
admin_arg() { jq -r '.args[] | select(startswith("--admin-listen="))' "$1"; }
probe_hosts() { jq -r '[.livenessProbe.httpGet.host, .readinessProbe.httpGet.host] | map(. // "pod IP") | join(",")' "$1"; }
if [[ $(admin_arg "$tmp/loopback.json") == "--admin-listen=127.0.0.1:9444" && $(probe_hosts "$tmp/loopback.json") == "127.0.0.1,127.0.0.1" ]]; then
  say "ok   nodeLocal (hostNetwork) default: admin on 127.0.0.1:9444, probes to 127.0.0.1"
else
  fail "nodeLocal default: $(admin_arg "$tmp/loopback.json"), probes $(probe_hosts "$tmp/loopback.json")"
fi
host_env="$(jq -r '.env[] | select(.name == "HOST_IP") | .valueFrom.fieldRef.fieldPath' "$tmp/onhost.json")"
monitor_port="$(yq -r 'select(.kind == "Service" and .metadata.labels["watchmux.io/metrics"] == "true") | .spec.ports[0].port' "$tmp/onhost.yaml")"
if [[ $(admin_arg "$tmp/onhost.json") == '--admin-listen=$(HOST_IP):9444' && $host_env == status.hostIP \
      && $(probe_hosts "$tmp/onhost.json") == "pod IP,pod IP" && $monitor_port == 9444 ]] \
   && grep -q '^kind: ServiceMonitor' "$tmp/onhost.yaml"; then
  say "ok   nodeLocal.adminOnHostIP: admin on \$(HOST_IP):9444 (status.hostIP), probes to the pod IP, ServiceMonitor + metrics Service"
else
  fail "nodeLocal.adminOnHostIP: $(admin_arg "$tmp/onhost.json"), HOST_IP from ${host_env:-nothing}, probes $(probe_hosts "$tmp/onhost.json"), metrics Service port ${monitor_port:-none}"
fi
if render "${nodelocal[@]}" --set serviceMonitor.enabled=true >/dev/null 2>"$tmp/refused.err"; then
  fail "nodeLocal with a ServiceMonitor and a loopback admin port rendered"
elif grep -q "set nodeLocal.adminOnHostIP=true" "$tmp/refused.err"; then
  say "ok   nodeLocal with a ServiceMonitor and a loopback admin port is refused"
else
  cat "$tmp/refused.err" >&2; fail "nodeLocal ServiceMonitor refusal: unexpected error"
fi

if ((failures > 0)); then
  say "$failures failure(s)"
  exit 1
fi
say "all checks passed"
