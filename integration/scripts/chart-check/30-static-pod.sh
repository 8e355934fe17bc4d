# Sourced by chart-check.sh (one shell: its variables, say/fail/note and the
# cases are in scope); offline: nodeLocal's static pod, its persist key, the
# installer and its upgrade.
# shellcheck shell=bash

# --- offline: nodeLocal's static pod -------------------------------------------
# nodeLocal.mode staticPod renders the Pod manifest, the kubelet's kubeconfig
# (and in the tree upstream.conf) into ConfigMap <fullname>-static-pod, and (unless
# installer.enabled=false) the installer DaemonSet, never a watchmux DaemonSet.
# The manifest references no API object (no ServiceAccount, Secret, ConfigMap:
# the kubelet starts it before it reaches the API, and refuses such static
# pods), mounts host paths only, runs the chart's image with delegated auth,
# --upstream-identity=client and the kubelet's credentials on the node's
# loopback, and passes what the kubelet checks of every manifest
# (integration/cmd/staticpodcheck: the kubelet's decode, defaults, validation
# and API-object check).
staticpodcheck=""
if command -v go >/dev/null; then
  if (cd "$root/integration" && go build -o "$root/.run/bin/staticpodcheck" ./cmd/staticpodcheck) 2>"$tmp/staticpodcheck-build.err"; then
    staticpodcheck="$root/.run/bin/staticpodcheck"
  else
    cat "$tmp/staticpodcheck-build.err" >&2; fail "building integration/cmd/staticpodcheck"
  fi
else
  note "no go: the static pod manifests are not checked with the kubelet's validation"
fi
# check_static_pod <case> <manifest dir> <host dir> <file name> <image> <installer: yes|no>
check_static_pod() {
  local name="$1" mdir="$2" hdir="$3" file="$4" image="$5" installer="$6" f="$tmp/$1.yaml" d="$tmp/static-$1" pod problems
  mkdir -p "$d"
  pod="$(static_pod_json "$f")"
  if [[ -z $pod ]]; then fail "$name: no static pod manifest (ConfigMap *-static-pod, key $file)"; return; fi
  yq -r --arg k "$file" 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data[$k]' "$f" >"$d/$file"
  yq -r 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data["kubelet-watchmux.conf"]' "$f" >"$d/kubelet-watchmux.conf"
  local ds; ds="$(yq -c 'select(.kind == "DaemonSet") | {name: .metadata.name, spec: .spec.template.spec}' "$f" | jq -sc .)"
  # shellcheck disable=SC2016 # a jq program, not shell
  problems="$(jq -nr --argjson p "$pod" --argjson ds "$ds" --arg mdir "$mdir" --arg hdir "$hdir" --arg file "$file" \
      --arg image "$image" --arg installer "$installer" '
    ($p.spec) as $s | ($s.containers[] | select(.name == "watchmux")) as $c
    | def has_arg($a): $c.args | index([$a]) != null;
    (select($p.kind != "Pod") | "not a Pod: \($p.kind)"),
    # nothing the kubelet would need the API for
    (select($s.serviceAccountName // $s.serviceAccount) | "names a ServiceAccount"),
    (select($s.imagePullSecrets) | "imagePullSecrets (a Secret)"),
    ($s.volumes[] | select(.hostPath == null) | "volume \(.name) is not a hostPath: \(del(.name) | keys | join(","))"),
    ([$s.containers[], ($s.initContainers // [])[]] | .[] | .env[]?
      | select(.valueFrom.secretKeyRef or .valueFrom.configMapKeyRef) | "env \(.name) reads a Secret or ConfigMap"),
    ([$s.containers[], ($s.initContainers // [])[]] | .[] | select(.envFrom) | "envFrom in \(.name)"),
    # where and how it runs
    (select($s.hostNetwork != true) | "not hostNetwork"),
    (select($s.priorityClassName != "system-node-critical" or $s.priority != 2000001000) | "priority: \($s.priorityClassName) \($s.priority)"),
    (select($c.image != $image) | "image \($c.image), want \($image)"),
    (("--auth-mode=delegated", "--upstream-identity=client", "--listen=127.0.0.1:7443", "--admin-listen=127.0.0.1:9444",
      "--kubeconfig=/etc/kubernetes/kubelet.conf", "--tls-cert-file=/etc/watchmux/tls/tls.crt",
      "--client-ca-file=/etc/watchmux/client-ca/ca.crt", "--persist-dir=/var/lib/watchmux-cache",
      "--serve-stale-when-upstream-unreachable") | select(has_arg(.) | not) | "args lack \(.)"),
    ([$s.volumes[] | .hostPath.path] | sort) as $paths
    | ([$hdir + "/tls", $hdir + "/client-ca", "/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/pki",
        "/var/lib/watchmux-cache"] | sort) as $want
    | (select($paths != $want) | "hostPaths \($paths), want \($want)"),
    # no watchmux DaemonSet; the installer writes this file where the kubelet reads it
    ($ds[] | select([.spec.containers[].name] | index("watchmux")) | "a watchmux DaemonSet \(.name) beside the static pod"),
    (if $installer == "yes" then
      ([$ds[] | select(.name | endswith("-installer"))] | if length != 1 then "no installer DaemonSet" else .[0].spec as $i
        | ([$i.volumes[] | .hostPath.path // empty] | sort) as $ip
        | (select($ip != ([$mdir, $hdir] | sort)) | "installer hostPaths \($ip), want \($mdir) \($hdir)"),
          (select($i.containers[0].args != ["install-static-pod", "--files=/watchmux/files", "--host-dir=/host/watchmux",
              "--manifest=/watchmux/static/\($file)", "--manifest-dir=/host/manifests"]) | "installer args \($i.containers[0].args)"),
          (select($i.containers[0].image != $image) | "installer image \($i.containers[0].image), want the chart'"'"'s \($image)"),
          (select($i.automountServiceAccountToken != false) | "installer mounts a service-account token")
        end)
    else
      (select([$ds[] | select(.name | endswith("-installer"))] | length > 0) | "an installer DaemonSet with installer.enabled=false")
    end)
  ' 2>&1)"
  if [[ -n $problems ]]; then
    while read -r p; do fail "static pod $name: $p"; done <<<"$problems"
    return
  fi
  local kc=""
  if [[ -x $kubectl ]]; then
    kc="$("$kubectl" config view --kubeconfig "$d/kubelet-watchmux.conf" \
      -o jsonpath='{.clusters[0].cluster.server} {.clusters[0].cluster.certificate-authority} {.users[0].user.client-certificate}' 2>&1)" || true
    if [[ $kc != "https://127.0.0.1:7443 $hdir/ca.crt /var/lib/kubelet/pki/kubelet-client-current.pem" ]]; then
      fail "static pod $name: kubelet-watchmux.conf: $kc"; return
    fi
    kc="; kubelet-watchmux.conf: $kc"
  fi
  local kubelet_note=""
  if [[ -n $staticpodcheck ]]; then
    if ! kubelet_note="$("$staticpodcheck" --node node-a "$d/$file" 2>&1)"; then
      fail "static pod $name: the kubelet's checks refuse it: $kubelet_note"; return
    fi
    kubelet_note="; the kubelet's checks accept it as $(jq -r '"\(.namespace)/\(.name)"' <<<"$kubelet_note")"
  fi
  say "ok   static pod $name: $file for $mdir, image $image, host paths only ($(jq -r '[.spec.volumes[].hostPath.path] | join(" ")' <<<"$pod")), no ServiceAccount/Secret/ConfigMap$kc$kubelet_note$([[ $installer == yes ]] && echo "; installer DaemonSet writes it")"
}
check_static_pod nodelocal-staticpod /etc/kubernetes/manifests /etc/kubernetes/watchmux watchmux.yaml \
  "registry.example/watchmux:$(yq -r .appVersion "$chart/Chart.yaml")" yes
check_static_pod nodelocal-staticpod-own-tooling /var/lib/kubelet/manifests /var/lib/watchmux wm.yaml \
  "registry.example/watchmux@sha256:$(printf '%064d' 0)" no
# The kubelet check bites: the same manifest with a ServiceAccount is refused.
if [[ -n $staticpodcheck && -s $tmp/static-nodelocal-staticpod/watchmux.yaml ]]; then
  yq -y '.spec.serviceAccountName = "watchmux"' "$tmp/static-nodelocal-staticpod/watchmux.yaml" >"$tmp/static-with-sa.yaml"
  if out="$("$staticpodcheck" "$tmp/static-with-sa.yaml" 2>&1)"; then
    fail "staticpodcheck accepted a static pod that names a ServiceAccount"
  else
    say "ok   staticpodcheck refuses a static pod with a ServiceAccount: ${out##*: }"
  fi
fi

# The persist encryption key (nodeLocal.persist.encryptionKey): a Secret the
# DaemonSet mounts read-only; the static pod reads it from the host directory,
# where the installer's projected volume puts it; --persist-encryption-key-file
# names the file in both. Without the value, no key flag.
# check_persist_key <case> <key name> <static: yes|no>
check_persist_key() {
  local name="$1" key="$2" static="$3" f="$tmp/$1.yaml" cjson pod problems
  IFS=$'\t' read -r _ cjson < <(container_json "$f") || true
  if [[ $static == yes ]]; then pod="$(static_pod_json "$f" | jq -c .spec)"
  else pod="$(yq -c 'select(.kind == "DaemonSet") | .spec.template.spec' "$f")"; fi
  local projected; projected="$(yq -c 'select(.kind == "DaemonSet" and (.metadata.name | endswith("-installer")))
    | .spec.template.spec.volumes[] | select(.name == "files") | .projected.sources' "$f" | jq -sc 'add // []')"
  # shellcheck disable=SC2016 # a jq program, not shell
  problems="$(jq -nr --argjson c "${cjson:-null}" --argjson pod "${pod:-null}" --argjson projected "$projected" \
      --arg key "$key" --arg static "$static" '
    (select(($c.args // []) | index(["--persist-encryption-key-file=/etc/watchmux/persist-key/\($key)"]) == null)
      | "args lack --persist-encryption-key-file=/etc/watchmux/persist-key/\($key)"),
    ([$c.volumeMounts[]? | select(.name == "persist-key")] | select(length != 1 or .[0].mountPath != "/etc/watchmux/persist-key" or .[0].readOnly != true)
      | "the key is not mounted read-only at /etc/watchmux/persist-key: \(.)"),
    ([$pod.volumes[]? | select(.name == "persist-key")][0]) as $v
    | if $static == "yes" then
        (select($v.hostPath.path != "/etc/kubernetes/watchmux/persist-key" or $v.hostPath.type != "Directory")
          | "the static pod'"'"'s key volume is not the host directory'"'"'s persist-key/: \($v)"),
        (select([$projected[] | select(.secret.name == "watchmux-persist-key") | .secret.items[]
            | select(.key == $key and .path == "persist-key/\($key)")] | length != 1)
          | "the installer does not project Secret watchmux-persist-key key \($key) to persist-key/\($key)")
      else
        (select($v.secret.secretName != "watchmux-persist-key" or $v.secret.items != [{key: $key, path: $key}])
          | "the key volume is not Secret watchmux-persist-key with item \($key): \($v)")
      end
  ' 2>&1)"
  if [[ -n $problems ]]; then while read -r p; do fail "$name: $p"; done <<<"$problems"
  else say "ok   $name: the persist key from Secret watchmux-persist-key, read-only, named by --persist-encryption-key-file"; fi
}
check_persist_key nodelocal-persist-key key no
check_persist_key nodelocal-staticpod-persist-key aes.key yes
if grep -q -- '--persist-encryption-key-file' "$tmp/nodelocal-staticpod.yaml" "$tmp/nodelocal.yaml"; then
  fail "--persist-encryption-key-file rendered without nodeLocal.persist.encryptionKey.secret"
fi

# The installer (`watchmux install-static-pod`, the real binary), run as on a
# node (--once) against a scratch host, with its input laid out as the
# installer DaemonSet's projected volume says (from the rendered ConfigMap
# and Secret; stand-ins for the client CA and the tier's CA ConfigMaps):
# install (reboot: the files the kubelet starts the pod from; every host path
# the static pod mounts exists), re-run unchanged (writes nothing), upgrade
# (a new image: the manifest is replaced, the previous one kept outside the
# manifest directory, which holds one file the kubelet reads and no temporary
# left behind), rollback (the documented copy of the previous manifest back).
installer_check() {  # installer_check <case> <helm args of the case, for the upgrade>
  local name="$1" d="$tmp/installer-$1" src h out file=watchmux.yaml
  src="$d/src"; h="$d/host"
  mkdir -p "$src/static" "$h/etc/kubernetes/manifests"
  # The pod's two volumes from a rendered case: static/ (the manifest) and
  # files/ (the projected sources, item by item, at their paths).
  mount_src() {  # <rendered file>
    local ds sources n kind obj key path
    rm -rf "$src/files"; mkdir -p "$src/files/..2026_01_01_00_00_00.0"  # a projected volume's own bookkeeping
    yq -r --arg k "$file" 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data[$k]' "$1" >"$src/static/$file"
    ds="$(yq -c 'select(.kind == "DaemonSet" and (.metadata.name | endswith("-installer")))' "$1")"
    while IFS=$'\t' read -r kind obj key path; do
      mkdir -p "$(dirname "$src/files/$path")"
      case "$kind:$obj" in
        configMap:*-static-pod) yq -r --arg k "$key" 'select(.kind == "ConfigMap" and (.metadata.name | endswith("-static-pod"))) | .data[$k]' "$1" >"$src/files/$path" ;;
        secret:*) yq -r --arg k "$key" 'select(.kind == "Secret" and (.metadata.name | endswith("-tls"))) | .data[$k]' "$1" | base64 -d >"$src/files/$path" ;;
        configMap:*) echo "stand-in for ConfigMap $obj key $key" >"$src/files/$path" ;;
      esac
    done < <(jq -r '.spec.template.spec.volumes[] | select(.name == "files") | .projected.sources[]
      | (if .configMap then ["configMap", .configMap] else ["secret", .secret] end) as [$k, $o]
      | $o.items[] | [$k, $o.name, .key, .path] | @tsv' <<<"$ds")
  }
  if ! yq -e 'select(.kind == "DaemonSet" and (.metadata.name | endswith("-installer"))) | .spec.template.spec.volumes[] | select(.name == "files") | .projected' \
      "$tmp/$name.yaml" >/dev/null 2>&1; then
    fail "installer $name: no projected volume \"files\" with the host files for \`watchmux install-static-pod\`"; return
  fi
  mount_src "$tmp/$name.yaml"
  run_installer() {
    "$watchmux_bin" install-static-pod --files "$src/files" --host-dir "$h/etc/kubernetes/watchmux" \
      --manifest "$src/static/$file" --manifest-dir "$h/etc/kubernetes/manifests" --once
  }
  local m="$h/etc/kubernetes/manifests" w="$h/etc/kubernetes/watchmux" bad="" f
  if ! out="$(run_installer 2>&1)"; then fail "installer $name: first install: $out"; return; fi
  cmp -s "$m/$file" "$src/static/$file" || bad+=" manifest not written;"
  # Every host file the static pod mounts from watchmux's directory is there.
  for f in $(jq -r --arg w /etc/kubernetes/watchmux '.spec.volumes[].hostPath.path | select(startswith($w))' <<<"$(static_pod_json "$tmp/$name.yaml")"); do
    [[ -e $h$f ]] || bad+=" no $f for the static pod;"
  done
  for f in tls/tls.crt tls/tls.key client-ca/ca.crt ca.crt kubelet-watchmux.conf; do [[ -f $w/$f ]] || bad+=" no $f;"; done
  [[ ! -e $w/..2026_01_01_00_00_00.0 ]] || bad+=" copied the projected volume's own directory;"
  [[ $(stat -c %a "$w") == 700 && $(stat -c %a "$w/tls/tls.key") == 600 ]] || bad+=" modes $(stat -c %a "$w") $(stat -c %a "$w/tls/tls.key");"
  [[ ! -e $w/$file.previous ]] || bad+=" a previous manifest on first install;"
  if ! out="$(run_installer 2>&1)" || [[ $out == *wrote* ]]; then bad+=" unchanged re-run wrote: $out;"; fi
  local old; old="$(cat "$m/$file")"
  eval "set -- $2"
  # An upgrade to a tag that is not the chart's appVersion (the first install's).
  "$helm" template watchmux "$chart" -n "$ns_privileged" "$@" --set image.tag=99.0.0 >"$tmp/$name-upgrade.yaml"
  mount_src "$tmp/$name-upgrade.yaml"
  if ! out="$(run_installer 2>&1)"; then bad+=" upgrade: $out;"; fi
  grep -q 'image: registry.example/watchmux:99.0.0' "$m/$file" || bad+=" upgrade did not write the new image;"
  [[ "$(cat "$w/$file.previous" 2>/dev/null)" == "$old" ]] || bad+=" the previous manifest was not kept;"
  local listed; listed="$(cd "$m" && ls -A | paste -sd' ' -)"
  [[ $listed == "$file" ]] || bad+=" manifest dir holds [$listed];"
  cp "$w/$file.previous" "$m/$file"  # the rollback docs/node-local.md gives
  [[ "$(cat "$m/$file")" == "$old" ]] || bad+=" rollback;"
  if [[ -n $staticpodcheck ]] && ! out="$("$staticpodcheck" "$m"/[!.]* 2>&1)"; then bad+=" the kubelet would refuse the manifest dir: $out;"; fi
  if [[ -n $bad ]]; then fail "installer $name:$bad"; return; fi
  say "ok   installer $name (watchmux install-static-pod): install writes ${w#"$h"} ($(cd "$w" && find . -type f | sort | sed 's|^\./||' | paste -sd' ' -); 0700, keys 0600) then the manifest; a re-run writes nothing; an upgrade replaces the manifest and keeps the old one as ${w#"$h"}/$file.previous, leaving one file in ${m#"$h"}; copying it back rolls back"
}
if [[ -z $watchmux_bin ]]; then
  note "no watchmux binary: the installer is not run"
elif [[ $installer_usage != *"usage: watchmux install-static-pod"* ]]; then
  fail "$watchmux_bin has no install-static-pod (the installer DaemonSet runs it): rebuild it"
elif command -v yq >/dev/null; then
  for c in "${cases[@]}"; do
    IFS='|' read -r name _ _ args <<<"$c"
    if [[ $name == nodelocal-staticpod || $name == nodelocal-staticpod-tree ]] && [[ -s $tmp/$name.yaml ]]; then installer_check "$name" "$args"; fi
  done
fi
