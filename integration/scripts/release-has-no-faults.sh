#!/usr/bin/env bash
# The test-only fault hook (src/cache/fault.rs, cargo feature
# `fault-injection`) must never be in the release binary: builds it as
# image.sh does (no features; a no-op when it is up to date) and looks for
# the variable that arms the hook, which only that module names.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
cargo build --locked --release --bin watchmux
bin="$root/target/release/watchmux"
marker=WATCHMUX_FAULT_INJECT
if grep -qa "$marker" "$bin"; then
  echo "release-has-no-faults: $bin contains $marker: the fault hook is compiled in" >&2
  exit 1
fi
# The check can fail: a build with the feature does contain it.
if [[ "${1:-}" == "--self-test" ]]; then
  cargo build --locked --release --features fault-injection --bin watchmux
  grep -qa "$marker" "$bin" || { echo "release-has-no-faults: the marker is not found even with the feature" >&2; exit 1; }
  cargo build --locked --release --bin watchmux
  echo "release-has-no-faults: self-test ok (the feature build has $marker)"
fi
echo "release-has-no-faults: ok ($bin has no fault hook)"
