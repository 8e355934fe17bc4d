#!/usr/bin/env bash
# Starts a real etcd + kube-apiserver on 127.0.0.1 for watchmux's integration
# tests, so the proxy can be tested against the genuine API server rather than a
# fake. Idempotent: if the cluster is already up and /readyz answers ok it only
# refreshes the kubeconfig and exits 0.
#
# State lives in .run/cluster (git-ignored): a CA (also the --client-ca-file,
# so tests can mint system:node:<name> client certs with ca.key), the serving
# cert, the service-account key, tokens.csv with an admin token, etcd data,
# logs and pid files. Outputs: .run/kubeconfig (context "watchmux-test", admin
# by token) and .run/cluster/env (shell-sourceable KEY=value lines).
#
# Ports: ETCD_PORT (23379), ETCD_PEER_PORT (23380), APISERVER_PORT (16443).
#
# WATCHMUX_CLUSTER_NODE_AUTHZ=1 also enables the NodeRestriction admission
# plugin (the Node authorizer is always on), for the control-plane tests
# (controlplane-up.sh), whose hollow kubelets act as system:node:<name>.
# Unset, the API server's flags are what the e2e suite has always used.
#
# CLUSTER_ETCD_ARGS and CLUSTER_APISERVER_ARGS add flags to etcd and
# kube-apiserver (split on spaces), for the scale bench's larger etcd quota
# and in-flight limits; unset, nothing changes.
#
# WATCHMUX_K8S_MINOR runs another supported minor (integration/versions/
# minors.txt; make test-matrix): its kube-apiserver and etcd, built by
# build-k8s.sh <minor> into .run/versions/<minor>/bin. Unset, or the pinned
# minor, it is .run/bin as always. The binary directory goes into env
# (K8S_BIN), so cluster-down.sh and --restart-apiserver use the same binaries.
#
# Usage: cluster-up.sh [--check | --restart-apiserver]
#   --check: build and start nothing; exit 0 if the cluster is up and ready,
#            1 if not (e2e.sh and demo.sh use it to know whether to stop it).
#   --restart-apiserver: stop kube-apiserver with APISERVER_STOP_SIGNAL (TERM,
#            as an upgrade; KILL, as a crash) and start it again on the same etcd.
#   --replace-apiserver PORT: an upgrade of one API server of the cluster (the
#            first, or an --extra-apiserver): TERM, wait for it to exit, start
#            WATCHMUX_K8S_MINOR's kube-apiserver (the pinned one if unset) on
#            the same port with the same flags, wait for /readyz. The cluster's
#            K8S_BIN stays the minor it started with (bench-upgrade.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
# shellcheck source-path=SCRIPTDIR source=versions-lib.sh
source "$scripts/versions-lib.sh"
k8s_minor="${WATCHMUX_K8S_MINOR:-$(versions_pinned)}"
if [[ $k8s_minor == "$(versions_pinned)" ]]; then bin="$root/.run/bin"; else bin="$root/.run/versions/$k8s_minor/bin"; fi
state="$root/.run/cluster"
kubeconfig="$root/.run/kubeconfig"
etcd_port="${ETCD_PORT:-23379}"
etcd_peer_port="${ETCD_PEER_PORT:-23380}"
api_port="${APISERVER_PORT:-16443}"
etcd_url="http://127.0.0.1:$etcd_port"
api_url="https://127.0.0.1:$api_port"
timeout_s=180

api_ready() {  # uses $admin_token
  [[ "$(curl -fsS --max-time 3 --cacert "$state/ca.crt" -H "Authorization: Bearer $admin_token" \
        "$api_url/readyz" 2>/dev/null)" == ok ]]
}
etcd_healthy() { curl -fsS --max-time 3 "$etcd_url/health" 2>/dev/null | grep -q '"health":"true"'; }
pid_alive() { [[ -f "$state/$1.pid" ]] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; }
port_free() { ! ss -Hltn "sport = :$1" | grep -q .; }

case "${1:-}" in
  --check)
    [[ -f "$state/tokens.csv" && -f "$state/ca.crt" ]] || exit 1
    admin_token="$(cut -d, -f1 "$state/tokens.csv" | head -1)"
    if pid_alive etcd && pid_alive apiserver && api_ready; then
      echo "cluster-up: running at $api_url"; exit 0
    fi
    echo "cluster-up: not running" >&2; exit 1 ;;
  "") ;;
  --restart-apiserver) ;;
  --extra-apiserver) ;;
  --replace-apiserver) ;;
  *) echo "usage: $0 [--check | --restart-apiserver | --extra-apiserver PORT | --replace-apiserver PORT]" >&2; exit 2 ;;
esac

# One cluster-up at a time (e2e.sh and demo.sh may race); children close fd 9.
mkdir -p "$root/.run"
exec 9> "$root/.run/cluster-up.lock"
flock -w 900 9 || { echo "cluster-up: timed out waiting for another cluster-up" >&2; exit 1; }

"$scripts/build-k8s.sh" "$k8s_minor"
umask 077   # keys and tokens below are private
mkdir -p "$state"

# --- credentials (generated once, kept across restarts) ----------------------
gen_key() { openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1"; }
if [[ ! -f "$state/ca.crt" || ! -f "$state/ca.key" ]]; then
  gen_key "$state/ca.key"
  openssl req -x509 -new -key "$state/ca.key" -out "$state/ca.crt" -days 3650 \
    -subj "/CN=watchmux-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
  rm -f "$state/apiserver.crt"   # a new CA invalidates the serving cert
fi
if [[ ! -f "$state/apiserver.crt" || ! -f "$state/apiserver.key" ]]; then
  gen_key "$state/apiserver.key"
  openssl req -new -key "$state/apiserver.key" -subj "/CN=kube-apiserver" |
    openssl x509 -req -CA "$state/ca.crt" -CAkey "$state/ca.key" \
      -set_serial "0x$(openssl rand -hex 16)" -days 3650 -out "$state/apiserver.crt" \
      -extfile <(printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" \
        "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth")
fi
[[ -f "$state/sa.key" ]] || gen_key "$state/sa.key"
[[ -f "$state/tokens.csv" ]] || echo "$(openssl rand -hex 32),admin,admin,system:masters" > "$state/tokens.csv"
admin_token="$(cut -d, -f1 "$state/tokens.csv" | head -1)"

write_client_files() {
  cat > "$kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: watchmux-test
  cluster:
    server: $api_url
    certificate-authority-data: $(base64 -w0 "$state/ca.crt")
users:
- name: admin
  user:
    token: $admin_token
contexts:
- name: watchmux-test
  context:
    cluster: watchmux-test
    user: admin
current-context: watchmux-test
EOF
  { printf '%s=%q\n' ETCD_ENDPOINT "$etcd_url" APISERVER_URL "$api_url" \
      ADMIN_TOKEN "$admin_token" CA_CERT "$state/ca.crt" CA_KEY "$state/ca.key" \
      KUBECONFIG_PATH "$kubeconfig" KUBECTL "$bin/kubectl" ETCD_DATA_DIR "$state/etcd" \
      K8S_BIN "$bin" K8S_MINOR "$k8s_minor"
  } > "$state/env"
}

start=$(date +%s)
deadline=$(( start + timeout_s ))
fail() {
  echo "cluster-up: $1" >&2
  for log in etcd apiserver; do
    [[ -f "$state/$log.log" ]] && { echo "--- tail of $state/$log.log" >&2; tail -n 40 "$state/$log.log" >&2; }
  done
  # An extra API server that failed leaves the cluster it joined running.
  [[ ${joining:-0} == 1 ]] || "$scripts/cluster-down.sh" >/dev/null || true
  exit 1
}
# Runs "$@" detached in its own session; its pid goes to $state/<name>.pid.
# etcd takes any ETCD_* environment variable as a flag, so ours (ETCD_PORT, ...)
# are unset for the child.
start_detached() {
  local name="$1"; shift
  ( unset $(compgen -e | grep '^ETCD_' || true)
    exec setsid nohup "$@" > "$state/$name.log" 2>&1 < /dev/null 9>&- ) &
  echo $! > "$state/$name.pid"
}
wait_for() {  # wait_for <process name> <check command...>
  local name="$1"; shift
  until "$@"; do
    pid_alive "$name" || fail "$name exited during startup"
    (( $(date +%s) < deadline )) || fail "$name not ready within ${timeout_s}s"
    sleep 0.5
  done
}

start_apiserver() {  # start_apiserver [name port]: another API server on the same etcd
  local name="${1:-apiserver}" port="${2:-$api_port}"
  local extra=()
  [[ "${WATCHMUX_CLUSTER_NODE_AUTHZ:-}" == 1 ]] && extra+=(--enable-admission-plugins=NodeRestriction)
  local more=()
  read -r -a more <<< "${CLUSTER_APISERVER_ARGS:-}"
  extra+=("${more[@]}")
  start_detached "$name" "$bin/kube-apiserver" "${extra[@]}" \
    --etcd-servers="$etcd_url" --etcd-compaction-interval=0 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
    --tls-cert-file="$state/apiserver.crt" --tls-private-key-file="$state/apiserver.key" \
    --client-ca-file="$state/ca.crt" --token-auth-file="$state/tokens.csv" \
    --authorization-mode=Node,RBAC \
    --service-cluster-ip-range=10.0.0.0/24 \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$state/sa.key" --service-account-signing-key-file="$state/sa.key" \
    --endpoint-reconciler-type=none --disable-admission-plugins=ServiceAccount
}

# serve_on <name> <port>: one more API server on the cluster's etcd, started
# and waited for (its /readyz); $start is when it started.
serve_on() {
  start=$(date +%s); deadline=$(( start + timeout_s ))
  start_apiserver "$1" "$2"
  api_url="https://127.0.0.1:$2"
  wait_for "$1" api_ready
}

# --restart-apiserver: stop kube-apiserver alone and start it again on the same
# etcd (data kept), as an upgrade or a crash would. For the restart tests.
if [[ "${1:-}" == "--restart-apiserver" ]]; then
  pid_alive etcd && pid_alive apiserver || { echo "cluster-up: not running" >&2; exit 1; }
  # The running cluster's own addresses, not this shell's port variables: a
  # caller that forgot to export them must not start kube-apiserver on the
  # default ports against another checkout's etcd.
  if [[ -f "$state/env" ]]; then
    etcd_url="$(sed -n 's/^ETCD_ENDPOINT=//p' "$state/env")"
    api_url="$(sed -n 's/^APISERVER_URL=//p' "$state/env")"
    api_port="${api_url##*:}"
    running_bin="$(sed -n 's/^K8S_BIN=//p' "$state/env")"
    bin="${running_bin:-$bin}"   # the running minor's binaries
  fi
  pid="$(cat "$state/apiserver.pid")"
  stop_signal="${APISERVER_STOP_SIGNAL:-TERM}"
  [[ $stop_signal == TERM || $stop_signal == KILL ]] || { echo "cluster-up: APISERVER_STOP_SIGNAL is TERM or KILL" >&2; exit 2; }
  kill -"$stop_signal" "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  mv -f "$state/apiserver.log" "$state/apiserver.log.prev"
  start=$(date +%s); deadline=$(( start + timeout_s ))
  start_apiserver
  wait_for apiserver api_ready
  echo "cluster-up: kube-apiserver restarted in $(( $(date +%s) - start ))s"
  exit 0
fi

# --extra-apiserver PORT: one more kube-apiserver on the running cluster's
# etcd, with its certificates and tokens, as a control plane of several API
# servers has (apiserver-PORT.pid; cluster-down stops it). For the tests of
# --upstream-servers. Stop it alone with: kill -KILL "$(cat .run/cluster/apiserver-PORT.pid)".
if [[ "${1:-}" == "--extra-apiserver" ]]; then
  port="${2:?--extra-apiserver PORT}" joining=1
  pid_alive etcd && pid_alive apiserver || { echo "cluster-up: not running" >&2; exit 1; }
  etcd_url="$(sed -n 's/^ETCD_ENDPOINT=//p' "$state/env")"
  running_bin="$(sed -n 's/^K8S_BIN=//p' "$state/env")"
  bin="${running_bin:-$bin}"   # the running minor's binaries
  admin_token="$(cut -d, -f1 "$state/tokens.csv" | head -1)"
  if pid_alive "apiserver-$port"; then
    echo "cluster-up: extra kube-apiserver already running on $port"; exit 0
  fi
  port_free "$port" || { echo "cluster-up: port $port is in use" >&2; exit 1; }
  serve_on "apiserver-$port" "$port"
  echo "cluster-up: extra kube-apiserver ready at $api_url in $(( $(date +%s) - start ))s"
  exit 0
fi

# --replace-apiserver PORT: stop, replace, start, as a rolling control-plane
# upgrade does to each API server in turn. A graceful stop (TERM) may take a
# while (in-flight requests drain), so it is waited for, up to 120 s.
if [[ "${1:-}" == "--replace-apiserver" ]]; then
  port="${2:?--replace-apiserver PORT}" joining=1
  pid_alive etcd || { echo "cluster-up: not running" >&2; exit 1; }
  etcd_url="$(sed -n 's/^ETCD_ENDPOINT=//p' "$state/env")"
  main_url="$(sed -n 's/^APISERVER_URL=//p' "$state/env")"
  if [[ $port == "${main_url##*:}" ]]; then name=apiserver; else name="apiserver-$port"; fi
  pid_alive "$name" || { echo "cluster-up: no kube-apiserver $name on $port" >&2; exit 1; }
  pid="$(cat "$state/$name.pid")"
  kill -TERM "$pid"
  for _ in $(seq 1 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { echo "cluster-up: $name ignored TERM for 120 s, killing" >&2; kill -KILL "$pid"; }
  for _ in $(seq 1 50); do port_free "$port" && break; sleep 0.1; done
  mv -f "$state/$name.log" "$state/$name.log.prev"
  serve_on "$name" "$port"
  echo "cluster-up: $name on $port replaced by $k8s_minor in $(( $(date +%s) - start ))s"
  exit 0
fi

if pid_alive etcd && pid_alive apiserver && api_ready; then
  write_client_files
  echo "cluster-up: already running at $api_url (kubeconfig: $kubeconfig)"
  exit 0
fi

# Not (fully) up: clear leftovers of an earlier run, then start fresh.
"$scripts/cluster-down.sh" >/dev/null
for p in "$etcd_port" "$etcd_peer_port" "$api_port"; do
  port_free "$p" || { echo "cluster-up: port $p on 127.0.0.1 is already in use" >&2; exit 1; }
done

for log in etcd apiserver; do   # keep one previous run's logs
  [[ -f "$state/$log.log" ]] && mv -f "$state/$log.log" "$state/$log.log.prev"
done

etcd_extra=()
read -r -a etcd_extra <<< "${CLUSTER_ETCD_ARGS:-}"
start_detached etcd "$bin/etcd" "${etcd_extra[@]}" --name watchmux-test --data-dir "$state/etcd" \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "watchmux-test=http://127.0.0.1:$etcd_peer_port" \
  --unsafe-no-fsync --watch-progress-notify-interval=5s
wait_for etcd etcd_healthy

start_apiserver
wait_for apiserver api_ready

write_client_files
echo "cluster-up: ready at $api_url in $(( $(date +%s) - start ))s (kubeconfig: $kubeconfig, env: $state/env)"
