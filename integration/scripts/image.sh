#!/usr/bin/env bash
# Builds watchmux's OCI image from the Dockerfile, without a container daemon
# (`make image`; docs/image.md):
#
#   1. cargo build --release;
#   2. stages the build context in .run/image/context: watchmux (the release
#      binary, debug info stripped: names stay for backtraces), and base/ with
#      exactly the shared libraries the binary links (as ldd resolves them on
#      this machine: glibc and libgcc_s), their packages' copyright notices,
#      watchmux's LICENSE, /etc/passwd and /etc/group with the non-root user
#      65532, and /etc/nsswitch.conf (hosts: files, then DNS);
#   3. runs ocibuild (integration/tools/image) on the Dockerfile and that
#      context: .run/image/oci (an OCI image layout: `crane push` reads it)
#      and .run/image/watchmux-oci.tar (the same as one file: `skopeo copy
#      oci-archive:...` reads it).
#
# Labels: org.opencontainers.image.version (Cargo.toml), .revision (git HEAD,
# "-dirty" with uncommitted changes), .source ($IMAGE_SOURCE, else the git
# remote "origin" when it is a URL). Every timestamp is SOURCE_DATE_EPOCH
# (default: HEAD's commit time): the same commit, toolchain and C library give
# the same image digest.
#
# Environment: IMAGE_SOURCE, SOURCE_DATE_EPOCH, IMAGE_DIR (default .run/image),
# IMAGE_SKIP_CARGO=1 (use target/release/watchmux as it is).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
out="${IMAGE_DIR:-$root/.run/image}"
cd "$root"
start=$(date +%s)

bash "$scripts/image-tools.sh"
if [[ ${IMAGE_SKIP_CARGO:-0} != 1 ]]; then
  # The revision watchmux_build_info reports (build.rs), the same commit as
  # the image's revision label below, as `make release` stamps it.
  WATCHMUX_GIT_REVISION="$(git rev-parse --short=12 HEAD)" cargo build --locked --release --bin watchmux
fi
bin="$root/target/release/watchmux"
[[ -x $bin ]] || { echo "image: no $bin (cargo build --release)" >&2; exit 1; }

# --- the build context ---------------------------------------------------------
ctx="$out/context"
rm -rf "$ctx"
mkdir -p "$ctx/base/etc"
umask 022
objcopy --strip-debug "$bin" "$ctx/watchmux"
chmod 0755 "$ctx/watchmux"

# The libraries at the paths the dynamic loader looks them up at (its built-in
# directories: the image has no ld.so.cache), the loader at the binary's
# PT_INTERP path.
libs=()
while read -r line; do
  case "$line" in
    *"=> not found"*) echo "image: ldd: $line" >&2; exit 1 ;;
    *"=> /"*) p="${line#*=> }"; libs+=("${p%% (*}") ;;
    /*) libs+=("${line%% (*}") ;;
  esac
done < <(ldd "$bin")
[[ ${#libs[@]} -gt 0 ]] || echo "image: ldd finds no shared libraries (a static binary): none copied"
pkgs=()
for lib in ${libs[@]+"${libs[@]}"}; do
  install -D -m 0755 "$(readlink -f "$lib")" "$ctx/base$lib"
  if command -v dpkg >/dev/null && pkg="$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1)" && [[ -n $pkg ]]; then
    pkgs+=("$pkg")
  fi
done
for pkg in $(printf '%s\n' ${pkgs[@]+"${pkgs[@]}"} | sort -u); do
  if [[ -f /usr/share/doc/$pkg/copyright ]]; then
    install -D -m 0644 "/usr/share/doc/$pkg/copyright" "$ctx/base/usr/share/doc/$pkg/copyright"
  fi
done
install -D -m 0644 "$root/LICENSE" "$ctx/base/usr/share/doc/watchmux/LICENSE"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' \
  > "$ctx/base/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' > "$ctx/base/etc/group"
printf '%s\n' 'hosts: files dns' > "$ctx/base/etc/nsswitch.conf"
chmod 0644 "$ctx/base/etc/"*

# --- labels and build -------------------------------------------------------------
version="$(awk -F'"' '/^\[package\]/{p=1} p && /^version *=/{print $2; exit}' Cargo.toml)"
revision="$(git rev-parse HEAD)"
git diff --quiet HEAD -- 2>/dev/null || revision+="-dirty"
source="${IMAGE_SOURCE:-}"
if [[ -z $source ]]; then
  source="$(git config --get remote.origin.url 2>/dev/null || true)"
  [[ $source == *://* ]] || source=""
fi
[[ -n $source ]] || echo "image: note: no IMAGE_SOURCE and no origin URL: org.opencontainers.image.source is empty" >&2
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) arch="$(uname -m)" ;;
esac

"$root/.run/bin/ocibuild" -f "$root/Dockerfile" -context "$ctx" -epoch "$epoch" -platform "linux/$arch" \
  -build-arg "VERSION=$version" -build-arg "REVISION=$revision" -build-arg "SOURCE=$source" \
  -ref-name "watchmux:$version" -layout "$out/oci" -archive "$out/watchmux-oci.tar"
size="$(du -b "$out/watchmux-oci.tar" | cut -f1)"
echo "image: $out/watchmux-oci.tar ($((size / 1024 / 1024)) MiB; layout in $out/oci), watchmux $version, revision $revision, in $(( $(date +%s) - start ))s"
