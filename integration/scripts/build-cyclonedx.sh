#!/usr/bin/env bash
# Installs cargo-cyclonedx (the CycloneDX project's own generator for Cargo
# workspaces) at the version pinned below, into .run/cargo-tools/bin: make
# dist writes the release's SBOM of the Rust dependencies with it (dist.sh).
#
# `cargo install --locked`: the tool's own Cargo.lock, so the build is the one
# its authors tested. Skipped when installed from the same inputs (the pin and
# rustc's version, .run/cargo-tools/.stamp); a clean checkout copies it from
# the machine's tool cache (tool-cache.sh). A cold build takes a few minutes
# on two cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=tool-cache.sh
source "$root/integration/scripts/tool-cache.sh"
version="0.5.9"
dest="$root/.run/cargo-tools"
out="$dest/bin"
stamp_file="$dest/.stamp"
stamp="$( (echo "cargo-cyclonedx $version"; rustc --version) | sha256sum | cut -d' ' -f1)"

if [[ -f $stamp_file && "$(cat "$stamp_file")" == "$stamp" && -x $out/cargo-cyclonedx ]]; then
  echo "build-cyclonedx: cargo-cyclonedx up to date ($version)"
  tool_cache_save cargo-cyclonedx "$stamp" "$out" cargo-cyclonedx
  exit 0
fi
if tool_cache_restore cargo-cyclonedx "$stamp" "$out" cargo-cyclonedx; then
  echo "$stamp" > "$stamp_file"
  exit 0
fi
echo "build-cyclonedx: installing cargo-cyclonedx $version (cargo install --locked)"
start=$(date +%s)
# Its own target directory: not watchmux's, whose cache it would only churn.
CARGO_TARGET_DIR="$dest/target" cargo install --locked --quiet --root "$dest" --version "$version" cargo-cyclonedx
rm -rf "$dest/target"
echo "$stamp" > "$stamp_file"
tool_cache_save cargo-cyclonedx "$stamp" "$out" cargo-cyclonedx
echo "build-cyclonedx: done in $(( $(date +%s) - start ))s"
