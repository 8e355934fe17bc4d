#!/usr/bin/env bash
# Runs watchmux's OCI image under a real OCI runtime (runc) against the test
# API server, as a consumer of the archive would (docs/image.md):
#
#   1. builds the image (image.sh: the release build and the archive);
#   2. reads .run/image/watchmux-oci.tar as any registry client would: every
#      blob's digest checked, the image's config has a numeric non-root user,
#      the entrypoint /watchmux and the version, revision and source labels;
#      building it again gives the same digest (reproducible);
#   3. unpacks the layers into a runc bundle and runs it: the image's user
#      (65532), read-only root filesystem, no capabilities, no new
#      privileges, host network (the API server is on 127.0.0.1), the test
#      cluster's kubeconfig mounted read-only; checks /healthz and /readyz,
#      that /version and a list of namespaces come through it (the list from
#      its cache), that the process is 65532 without capabilities and that
#      its root cannot be written; then SIGTERM, and it exits cleanly;
#   4. pushes the layout with crane to a throwaway registry on loopback
#      (`crane registry serve`) as the chart's README says, and renders the
#      chart with the pushed repository and digest.
#
# Needs Linux and root (runc creates namespaces and cgroups); installs runc
# from the distribution (apt-get) when it is missing. Starts the test cluster
# unless one is up (and then stops it again). About 30 s warm.
#
# Environment: IMAGE_TEST_SKIP_BUILD=1 tests .run/image as it is.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
image_dir="$root/.run/image"
cd "$root"
start=$(date +%s)
say() { echo "image-test: $*"; }
die() { echo "image-test: FAIL: $*" >&2; exit 1; }

[[ $(uname -s) == Linux ]] || die "runc needs Linux"
[[ $EUID == 0 ]] || die "runc needs root here (namespaces, cgroups, mounts); run as root"
if ! command -v runc >/dev/null; then
  say "installing runc (apt-get)"
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq runc >/dev/null 2>&1 ||
    { apt-get -o DPkg::Lock::Timeout=300 update -qq && apt-get -o DPkg::Lock::Timeout=300 install -y -qq runc >/dev/null; } ||
    die "could not install runc"
fi
say "$(runc --version | head -1)"

started=0
if ! bash "$scripts/cluster-up.sh" --check >/dev/null 2>&1; then started=1; fi
tmp="$(mktemp -d)"
id="watchmux-image-test-$$"
state="$tmp/runc-state"
registry_pid=""
cleanup() {
  if [[ -d $state ]]; then
    runc --root "$state" kill "$id" KILL >/dev/null 2>&1 || true
    runc --root "$state" delete --force "$id" >/dev/null 2>&1 || true
  fi
  if [[ -n $registry_pid ]]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
  if [[ $started == 1 ]]; then bash "$scripts/cluster-down.sh" || true; fi
}
trap cleanup EXIT
bash "$scripts/cluster-up.sh" >/dev/null
kubeconfig="$root/.run/kubeconfig"

# --- build, and read the archive ----------------------------------------------------
if [[ ${IMAGE_TEST_SKIP_BUILD:-0} != 1 ]]; then
  bash "$scripts/image.sh"
fi
archive="$image_dir/watchmux-oci.tar"
[[ -f $archive ]] || die "no $archive"
oci="$tmp/oci"
mkdir -p "$oci"
tar -xf "$archive" -C "$oci"
[[ $(jq -r .imageLayoutVersion "$oci/oci-layout") == 1.0.0 ]] || die "oci-layout: not an OCI image layout 1.0.0"
blob() { echo "$oci/blobs/${1/://}"; }
for b in "$oci"/blobs/sha256/*; do
  [[ "sha256:$(sha256sum "$b" | cut -d' ' -f1)" == "sha256:$(basename "$b")" ]] || die "blob $(basename "$b"): digest mismatch"
done
[[ $(jq '.manifests | length' "$oci/index.json") == 1 ]] || die "index.json: want one manifest"
digest="$(jq -r '.manifests[0].digest' "$oci/index.json")"
ref_name="$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"] // empty' "$oci/index.json")"
manifest="$(blob "$digest")"
config="$(blob "$(jq -r .config.digest "$manifest")")"
jq -e '.os == "linux"' "$config" >/dev/null || die "config: os is not linux"

version="$(awk -F'"' '/^\[package\]/{p=1} p && /^version *=/{print $2; exit}' Cargo.toml)"
label() { jq -r --arg k "org.opencontainers.image.$1" '.config.Labels[$k] // "<missing>"' "$config"; }
[[ $(label version) == "$version" ]] || die "label version: $(label version), want $version"
[[ $(label revision) == "$(git rev-parse HEAD)"* ]] || die "label revision: $(label revision), want $(git rev-parse HEAD)"
[[ $(label source) != "<missing>" ]] || die "label source missing"
[[ $(jq -c .config.Entrypoint "$config") == '["/watchmux"]' ]] || die "entrypoint: $(jq -c .config.Entrypoint "$config")"
user="$(jq -r '.config.User // ""' "$config")"
[[ $user =~ ^([0-9]+):([0-9]+)$ && ${BASH_REMATCH[1]} != 0 && ${BASH_REMATCH[2]} != 0 ]] ||
  die "user: \"$user\", want numeric uid:gid, not root"
uid="${BASH_REMATCH[1]}"; gid="${BASH_REMATCH[2]}"
say "ok   $archive: $ref_name $digest, $(jq '.layers | length' "$manifest") layers, $(( $(stat -c %s "$archive") / 1024 ))KiB; user $user; version $(label version), revision $(label revision), source \"$(label source)\""

if [[ ${IMAGE_TEST_SKIP_BUILD:-0} != 1 ]]; then
  IMAGE_SKIP_CARGO=1 IMAGE_DIR="$tmp/rebuild" bash "$scripts/image.sh" >/dev/null 2>&1 || die "second build failed"
  again="$(jq -r '.manifests[0].digest' "$tmp/rebuild/oci/index.json")"
  [[ $again == "$digest" ]] || die "a second build gave $again, not $digest: not reproducible"
  cmp -s "$archive" "$tmp/rebuild/watchmux-oci.tar" || die "a second build gave a different archive"
  say "ok   a second build gives the same digest and archive, byte for byte"
fi

# --- a runc bundle --------------------------------------------------------------
bundle="$tmp/bundle"
mkdir -p "$bundle/rootfs"
for l in $(jq -r '.layers[].digest' "$manifest"); do
  case "$(jq -r --arg d "$l" '.layers[] | select(.digest == $d) | .mediaType' "$manifest")" in
    application/vnd.oci.image.layer.v1.tar+gzip) tar -xzf "$(blob "$l")" -C "$bundle/rootfs" --numeric-owner --same-permissions ;;
    application/vnd.oci.image.layer.v1.tar) tar -xf "$(blob "$l")" -C "$bundle/rootfs" --numeric-owner --same-permissions ;;
    *) die "layer $l: unexpected media type" ;;
  esac
done
suid="$(find "$bundle/rootfs" -perm /6000 -o -perm -0002 ! -type l | head -3)"
[[ -z $suid ]] || die "setuid/setgid or world-writable files in the image: $suid"

# The kubeconfig as a Secret volume gives it: readable by the pod's user only.
install -m 0400 -o "$uid" -g "$gid" "$kubeconfig" "$tmp/kubeconfig"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
api_port="$(free_port)"; admin_port="$(free_port)"
(cd "$bundle" && runc spec)
env_json="$(jq -c '["PATH=/", "RUST_LOG=info"] + (.config.Env // [])' "$config")"
jq --argjson uid "$uid" --argjson gid "$gid" --argjson env "$env_json" --argjson ep "$(jq -c .config.Entrypoint "$config")" \
   --arg kubeconfig "$tmp/kubeconfig" --arg api "127.0.0.1:$api_port" --arg admin "127.0.0.1:$admin_port" '
  .process.terminal = false
  | .process.user = {uid: $uid, gid: $gid}
  # The entrypoint from the image, then the args a pod spec would give.
  | .process.args = $ep + ["--kubeconfig=/kube/config", "--listen=" + $api, "--admin-listen=" + $admin, "--cache-warm"]
  | .process.env = $env
  | .process.cwd = "/"
  | .process.noNewPrivileges = true
  | .process.capabilities = {bounding: [], effective: [], inheritable: [], permitted: [], ambient: []}
  | .root.readonly = true
  | .hostname = "watchmux"
  # Host network: the test API server listens on the host loopback only.
  | .linux.namespaces |= map(select(.type != "network"))
  # sysfs belongs to a network namespace; with the host network, the host
  # /sys read-only (as container engines do for host-network containers).
  | .mounts |= map(if .destination == "/sys" then {destination: "/sys", type: "bind", source: "/sys", options: ["rbind", "nosuid", "noexec", "nodev", "ro"]} else . end)
  | .mounts += [{destination: "/kube/config", type: "bind", source: $kubeconfig, options: ["bind", "ro", "nosuid", "nodev", "noexec"]}]
  ' "$bundle/config.json" > "$bundle/config.json.new"
mv "$bundle/config.json.new" "$bundle/config.json"

# --- run it -----------------------------------------------------------------------
log="$tmp/watchmux.log"
mkdir -p "$state"
runc --root "$state" run --bundle "$bundle" --detach "$id" >"$log" 2>&1 </dev/null ||
  { cat "$log" >&2; die "runc run failed"; }
pid="$(runc --root "$state" state "$id" | jq -r .pid)"
healthy=""
for _ in $(seq 1 100); do
  healthy="$(curl -fsS --max-time 2 "http://127.0.0.1:$admin_port/healthz" 2>/dev/null)" && break
  [[ $(runc --root "$state" state "$id" 2>/dev/null | jq -r .status) == running ]] || break
  sleep 0.2
done
[[ $healthy == ok ]] || { cat "$log" >&2; die "no /healthz from the container (status $(runc --root "$state" state "$id" 2>/dev/null | jq -r .status))"; }
ready=""
for _ in $(seq 1 50); do
  ready="$(curl -fsS --max-time 2 "http://127.0.0.1:$admin_port/readyz" 2>/dev/null)" && break
  sleep 0.2
done
[[ $ready == ok ]] || { cat "$log" >&2; die "not ready: $(curl -sS "http://127.0.0.1:$admin_port/readyz?verbose" 2>&1)"; }
say "ok   runc run: /healthz and /readyz ok after $(( $(date +%s) - start ))s into the test"

# The process: the image's user, no capabilities, no new privileges, a
# read-only root.
status="/proc/$pid/status"
for f in Uid Gid; do
  want="$uid"; [[ $f == Gid ]] && want="$gid"
  got="$(awk -v f="$f:" '$1 == f {print $2, $3, $4, $5}' "$status")"
  [[ $got == "$want $want $want $want" ]] || die "$f of the container's process: $got, want $want"
done
[[ $(awk '$1 == "CapEff:" || $1 == "CapPrm:" || $1 == "CapBnd:" {print $2}' "$status" | sort -u) == 0000000000000000 ]] ||
  die "the container's process has capabilities: $(grep ^Cap "$status" | tr '\n' ' ')"
[[ $(awk '$1 == "NoNewPrivs:" {print $2}' "$status") == 1 ]] || die "no_new_privs is not set"
[[ $(awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | cut -d, -f1) == ro ]] || die "the container's root is not mounted read-only"
if touch "/proc/$pid/root/probe" 2>/dev/null; then die "the container's root filesystem is writable"; fi
[[ $(awk '$5 == "/kube/config" {print $6}' "/proc/$pid/mountinfo" | cut -d, -f1) == ro ]] || die "the kubeconfig is not mounted read-only"
say "ok   the process runs as $uid:$gid, no capabilities, no_new_privs, root and kubeconfig read-only"

# Proxying: /version passes through; namespaces are cached by default, and
# with --cache-warm ready means synced, so their list comes from the cache.
admin_token="$(cut -d, -f1 "$root/.run/cluster/tokens.csv" | head -1)"
api_url="$(grep '^APISERVER_URL=' "$root/.run/cluster/env" | cut -d= -f2-)"
direct="$(curl -fsS --max-time 5 --cacert "$root/.run/cluster/ca.crt" -H "Authorization: Bearer $admin_token" "$api_url/version" | jq -r .gitVersion)"
through="$(curl -fsS --max-time 5 "http://127.0.0.1:$api_port/version" | jq -r .gitVersion)" || true
[[ -n $direct && $through == "$direct" ]] || die "/version through the container: ${through:-nothing}, directly: $direct"
# (not curl's own User-Agent: the API server pretty-prints for curl, and that
# passes through; at any version: a consistent LIST is the cache's only when it
# can prove itself current at once, which a busy cluster does not promise)
names="$(curl -fsS --max-time 10 -A image-test "http://127.0.0.1:$api_port/api/v1/namespaces?resourceVersion=0" | jq -r '[.items[].metadata.name] | join(" ")')" || true
[[ " $names " == *" default "* && " $names " == *" kube-system "* ]] || { cat "$log" >&2; die "namespaces through the container: [$names]"; }
lists="$(curl -fsS --max-time 5 "http://127.0.0.1:$admin_port/metrics" |
  awk '/^watchmux_cache_list_total\{/ && /resource="namespaces"/ {s += $NF} END {print s + 0}')"
[[ $lists -ge 1 ]] || die "$(curl -fsS "http://127.0.0.1:$admin_port/metrics" | grep -E 'passthrough_total|consistent_read')
the namespace list was not served from the cache (watchmux_cache_list_total{resource=\"namespaces\"} = $lists)"
say "ok   through the container: /version $through (as directly), $(wc -w <<<"$names") namespaces (default, kube-system, ...) from its cache"
# The binary reports the commit the image's label names (not "unknown").
built="$(curl -fsS --max-time 5 "http://127.0.0.1:$admin_port/metrics" | sed -n 's/^watchmux_build_info{.*revision="\([^"]*\)".*/\1/p')"
[[ -n $built && $(label revision) == "$built"* ]] || die "watchmux_build_info revision \"$built\", image label $(label revision)"
say "ok   watchmux_build_info revision $built, as the image's label"

# SIGTERM: a clean exit within the shutdown grace.
runc --root "$state" kill "$id" TERM
for _ in $(seq 1 100); do
  [[ $(runc --root "$state" state "$id" 2>/dev/null | jq -r .status) == stopped ]] && break
  sleep 0.2
done
[[ $(runc --root "$state" state "$id" | jq -r .status) == stopped ]] || die "still running 20 s after SIGTERM"
if grep -Eq 'panicked|ERROR' "$log"; then cat "$log" >&2; die "errors in the container's log"; fi
runc --root "$state" delete "$id"
say "ok   SIGTERM: stopped cleanly"

# --- push with crane, render the chart with it ---------------------------------
crane="$root/.run/bin/crane"
reg_port="$(free_port)"
"$crane" registry serve --address "127.0.0.1:$reg_port" >"$tmp/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 1 50); do curl -fsS --max-time 1 "http://127.0.0.1:$reg_port/v2/" >/dev/null 2>&1 && break; sleep 0.1; done
repo="127.0.0.1:$reg_port/watchmux"
"$crane" push "$image_dir/oci" "$repo:$version" >"$tmp/push.log" 2>&1 || { cat "$tmp/push.log" "$tmp/registry.log" >&2; die "crane push"; }
pushed="$("$crane" digest "$repo:$version")"
[[ $pushed == "$digest" ]] || die "crane push: the registry has $pushed, the archive $digest"
[[ $("$crane" config "$repo:$version" | jq -r '.config.Labels["org.opencontainers.image.revision"]') == "$(label revision)" ]] ||
  die "crane config: labels lost in the push"
bash "$scripts/build-helm.sh" >/dev/null
rendered="$("$root/.run/helm" template wm "$root/charts/watchmux" --set mode=tier --set image.repository="$repo" --set image.digest="$digest" |
  yq -r 'select(.kind == "Deployment") | .spec.template.spec.containers[0].image')"
[[ $rendered == "$repo@$digest" ]] || die "the chart renders image $rendered, want $repo@$digest"
kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; registry_pid=""
say "ok   crane push to a registry on loopback kept the digest; the chart renders image: $rendered"
say "all checks passed in $(( $(date +%s) - start ))s"
