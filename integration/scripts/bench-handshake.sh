#!/usr/bin/env bash
# What one TLS handshake costs watchmux, by serving key: RSA 2048 (the test
# cluster's kube-apiserver certificate) against ECDSA P-256 (minted here,
# signed by the cluster's CA). A reconnect storm pays one handshake per
# client. `openssl s_time` opens new TLS sessions for HANDSHAKE_SECONDS (10)
# against a release watchmux caching one small resource; the figure is
# watchmux's utime + stime from /proc over the run divided by the
# connections, HANDSHAKE_ROUNDS (2) rounds of each key, alternating.
#
# Usage: bench-handshake.sh   (make bench-handshake; about a minute after the build)
# Everything on loopback; ports 17792-17793.
listen="127.0.0.1:${BENCH_PORT:-17792}"
admin="127.0.0.1:${BENCH_ADMIN_PORT:-17793}"
# shellcheck source-path=SCRIPTDIR source=bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
logs="$root/.run/bench-handshake"
seconds="${HANDSHAKE_SECONDS:-10}"
rounds="${HANDSHAKE_ROUNDS:-2}"
(( seconds > 0 && seconds <= 120 && rounds > 0 && rounds <= 10 )) ||
  { echo "bench-handshake: 1-120 seconds, 1-10 rounds" >&2; exit 2; }
mkdir -p "$logs"
if [[ ${BENCH_SKIP_BUILD:-0} != 1 || ! -x $logs/watchmux ]]; then
  cargo build --locked --release -q
  cp -f "$root/target/release/watchmux" "$logs/watchmux"
fi
bench_cluster_up
machine_line
state="$root/.run/cluster"

openssl genpkey -quiet -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$logs/ecdsa.key"
openssl req -new -key "$logs/ecdsa.key" -subj "/CN=watchmux-bench" |
  openssl x509 -req -CA "$state/ca.crt" -CAkey "$state/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 1 -out "$logs/ecdsa.crt" 2>/dev/null \
    -extfile <(printf '%s\n' "subjectAltName=IP:127.0.0.1" "basicConstraints=critical,CA:FALSE" \
      "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth")

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
echo
echo "| serving key | round | new TLS sessions | watchmux CPU, ms | CPU a handshake, ms |"
echo "|---|---|---|---|---|"
clk_tck="$(getconf CLK_TCK)"
for round in $(seq 1 "$rounds"); do
  for key in rsa2048 ecdsa-p256; do
    if [[ $key == rsa2048 ]]; then cert="$state/apiserver.crt" pkey="$state/apiserver.key"
    else cert="$logs/ecdsa.crt" pkey="$logs/ecdsa.key"; fi
    start_watchmux "$logs/watchmux" "$logs/watchmux-$key.log" --cache-resources leases \
      --tls-cert-file "$cert" --tls-private-key-file "$pkey"
    before="$(ticks "$wm_pid")"
    sessions="$(timeout $(( seconds + 30 )) openssl s_time -connect "$listen" -new -time "$seconds" \
      -CAfile "$state/ca.crt" 2>&1 | awk '/connections in/ { print $1; exit }')"
    after="$(ticks "$wm_pid")"
    stop_watchmux
    [[ ${sessions:-0} -gt 0 ]] || { echo "bench-handshake: no TLS session with $key" >&2; exit 1; }
    awk -v k="$key" -v r="$round" -v n="$sessions" -v t=$(( after - before )) -v hz="$clk_tck" \
      'BEGIN { ms = t * 1000 / hz; printf "| %s | %d | %d | %.0f | %.3f |\n", k, r, n, ms, ms / n }'
  done
done
