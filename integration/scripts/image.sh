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
# Another architecture (make dist's arm64 image): IMAGE_ARCH=arm64 builds
# with `cargo build --target aarch64-unknown-linux-gnu` (the rustup target and
# Debian's gcc-aarch64-linux-gnu as the linker), and base/ gets Debian's arm64
# libc6 and libgcc-s1 at this machine's versions (image-sysroot.sh): the
# libraries are then found by the binary's ELF headers (readelf), not ldd.
#
# Also written: $IMAGE_DIR/base-packages.tsv, each file copied into base/ with
# its distribution package, version and architecture (the SBOM reads it).
#
# Environment: IMAGE_SOURCE, SOURCE_DATE_EPOCH, IMAGE_DIR (default .run/image),
# IMAGE_ARCH (default this machine's), IMAGE_SKIP_CARGO=1 (use the release
# binary as it is).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
out="${IMAGE_DIR:-$root/.run/image}"
cd "$root"
start=$(date +%s)

case "$(uname -m)" in
  x86_64) host_arch=amd64 ;;
  aarch64) host_arch=arm64 ;;
  *) host_arch="$(uname -m)" ;;
esac
arch="${IMAGE_ARCH:-$host_arch}"
cargo_target=()
bin="$root/target/release/watchmux"
objcopy=objcopy
if [[ $arch != "$host_arch" ]]; then
  case "$arch" in
    arm64) triple=aarch64-unknown-linux-gnu; gnu=aarch64-linux-gnu ;;
    *) echo "image: IMAGE_ARCH=$arch: only arm64 is built across (from $host_arch)" >&2; exit 1 ;;
  esac
  command -v "$gnu-gcc" >/dev/null || { echo "image: no $gnu-gcc (apt-get install gcc-$gnu)" >&2; exit 1; }
  cargo_target=(--target "$triple")
  bin="$root/target/$triple/release/watchmux"
  objcopy="$gnu-objcopy"
  # The C compiler (ring's assembly and C) and the linker for the target.
  triple_env="${triple//-/_}"
  export "CC_$triple_env=$gnu-gcc" "AR_$triple_env=$gnu-ar"
  export "CARGO_TARGET_${triple_env^^}_LINKER=$gnu-gcc"
  # jemalloc (the default allocator) bakes the page size in at build time:
  # 64 KiB pages run on arm64 kernels of 4, 16 and 64 KiB pages alike, where
  # this build machine's 4 KiB would crash on the larger ones.
  export JEMALLOC_SYS_WITH_LG_PAGE=16
  sysroot="$root/.run/image-sysroot/$arch"
  bash "$scripts/image-sysroot.sh" "$arch" "$sysroot"
fi

bash "$scripts/image-tools.sh"
if [[ ${IMAGE_SKIP_CARGO:-0} != 1 ]]; then
  # The revision watchmux_build_info reports (build.rs), the same commit as
  # the image's revision label below, as `make release` stamps it. Without
  # SOURCE_DATE_EPOCH: the cc crate reruns ring's C build when it changes (a
  # new commit's time would rebuild ring and all above it), and nothing in the
  # binary reads it.
  WATCHMUX_GIT_REVISION="$(git rev-parse --short=12 HEAD)" env -u SOURCE_DATE_EPOCH cargo build --locked --release ${cargo_target[@]+"${cargo_target[@]}"} --bin watchmux
fi
[[ -x $bin ]] || { echo "image: no $bin (cargo build --release)" >&2; exit 1; }

# --- the build context ---------------------------------------------------------
ctx="$out/context"
rm -rf "$ctx"
mkdir -p "$ctx/base/etc"
umask 022
"$objcopy" --strip-debug "$bin" "$ctx/watchmux"
chmod 0755 "$ctx/watchmux"

# The libraries at the paths the dynamic loader looks them up at (its built-in
# directories: the image has no ld.so.cache), the loader at the binary's
# PT_INTERP path.
libs=()
if [[ -z ${sysroot:-} ]]; then
  files_root=""
  while read -r line; do
    case "$line" in
      *"=> not found"*) echo "image: ldd: $line" >&2; exit 1 ;;
      *"=> /"*) p="${line#*=> }"; libs+=("${p%% (*}") ;;
      /*) libs+=("${line%% (*}") ;;
    esac
  done < <(ldd "$bin")
else
  # ldd cannot run a foreign binary: the loader from PT_INTERP, then the
  # DT_NEEDED libraries, transitively, from Debian's multiarch directory.
  files_root="$sysroot/root"
  interp="$(readelf -lW "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)\]$/\1/p')"
  if [[ -n $interp ]]; then libs+=("$interp"); fi
  queue=("$bin")
  while [[ ${#queue[@]} -gt 0 ]]; do
    elf="${queue[0]}"; queue=("${queue[@]:1}")
    for needed in $(readelf -dW "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'); do
      # The C library needs the loader: the one already at PT_INTERP.
      [[ -n $interp && $needed == "${interp##*/}" ]] && continue
      lib="/lib/$gnu/$needed"
      [[ " ${libs[*]} " == *" $lib "* ]] && continue
      [[ -e $files_root$lib ]] || { echo "image: $needed (needed by $elf) is not in $files_root/lib/$gnu" >&2; exit 1; }
      libs+=("$lib")
      queue+=("$(readlink -f "$files_root$lib")")
    done
  done
fi
[[ ${#libs[@]} -gt 0 ]] || echo "image: no shared libraries (a static binary): none copied"
# The package of a file: dpkg's database here, image-sysroot.sh's list for
# another architecture ("package<TAB>version<TAB>architecture", or nothing).
package_of() {
  local path="$1" real pkg
  if [[ -n $files_root ]]; then
    real="/$(realpath --relative-to="$files_root" "$(readlink -f "$files_root$path")")"
    awk -F'\t' -v p="$path" -v r="$real" '$1 == p || $1 == r { print $2 "\t" $3 "\t" $4; exit }' "$sysroot/files.tsv"
  elif command -v dpkg >/dev/null && pkg="$(dpkg -S "$path" 2>/dev/null | head -1 | sed 's/: .*//')" && [[ -n $pkg ]]; then
    dpkg-query -W -f '${Package}\t${Version}\t${Architecture}\n' "$pkg"
  fi
}
: >"$out/base-packages.tsv"
pkgs=()
for lib in ${libs[@]+"${libs[@]}"}; do
  install -D -m 0755 "$(readlink -f "$files_root$lib")" "$ctx/base$lib"
  pkg="$(package_of "$lib")"
  printf '%s\t%s\n' "$lib" "${pkg:-unknown}" >>"$out/base-packages.tsv"
  if [[ -n $pkg ]]; then pkgs+=("${pkg%%$'\t'*}"); fi
done
for pkg in $(printf '%s\n' ${pkgs[@]+"${pkgs[@]}"} | sort -u); do
  # libgcc-s1's notice is its source package's (doc/libgcc-s1 links to
  # gcc-12-base, not downloaded for another architecture): that package at
  # the same version is installed here (image-sysroot.sh pins it so), and the
  # text does not depend on the architecture.
  for notice in "$files_root/usr/share/doc/$pkg/copyright" "/usr/share/doc/$pkg/copyright"; do
    if [[ -f $notice ]]; then
      install -D -m 0644 "$notice" "$ctx/base/usr/share/doc/$pkg/copyright"
      break
    fi
  done
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

"$root/.run/bin/ocibuild" -f "$root/Dockerfile" -context "$ctx" -epoch "$epoch" -platform "linux/$arch" \
  -build-arg "VERSION=$version" -build-arg "REVISION=$revision" -build-arg "SOURCE=$source" \
  -ref-name "watchmux:$version" -layout "$out/oci" -archive "$out/watchmux-oci.tar"
size="$(du -b "$out/watchmux-oci.tar" | cut -f1)"
echo "image: $out/watchmux-oci.tar ($((size / 1024 / 1024)) MiB; layout in $out/oci), watchmux $version, revision $revision, in $(( $(date +%s) - start ))s"
