#!/usr/bin/env bash
# image-sysroot.sh ARCH DIR: the C library for an image of another
# architecture than this machine's (make dist's arm64 image; image.sh with
# IMAGE_ARCH): Debian's own libc6 and libgcc-s1 packages for ARCH, at the
# versions installed here, so both architectures' images carry the same
# patched C library. Not the cross toolchain's libc6-ARCH-cross: that is the
# copy the cross compiler links against, older than the distribution's
# security updates.
#
# apt-get runs with a private state in DIR (its own package lists for ARCH,
# its own cache; this machine's dpkg architectures and lists are untouched)
# and downloads the two .deb files; they are unpacked into DIR/root, and
# DIR/files.tsv names, for every file, its package, version and
# architecture (image.sh copies from root/ and writes what it copied for the
# SBOM). Skipped when DIR holds the same packages at the same versions.
set -euo pipefail
arch="${1:?usage: image-sysroot.sh ARCH DIR}"
dir="${2:?usage: image-sysroot.sh ARCH DIR}"
say() { echo "image-sysroot: $*"; }
die() { echo "image-sysroot: $*" >&2; exit 1; }
for tool in apt-get dpkg-query dpkg-deb; do command -v "$tool" >/dev/null || die "needs Debian's $tool"; done

# The versions installed on this machine (the host image's C library).
pkgs=()
for p in libc6 libgcc-s1; do
  v="$(dpkg-query -W -f '${Version}' "$p:$(dpkg --print-architecture)" 2>/dev/null)" || die "$p is not installed here"
  pkgs+=("$p:$arch=$v")
done
want="$(printf '%s\n' "${pkgs[@]}")"
if [[ -f $dir/.complete && "$(cat "$dir/.complete")" == "$want" ]]; then
  say "$arch: ${pkgs[*]} up to date in $dir"
  exit 0
fi

rm -rf "$dir"
mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/debs" "$dir/root"
apt_opts=(-q -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
  -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o "Dir::State::status=/dev/null"
  -o "DPkg::Lock::Timeout=300" -o "Acquire::Retries=3")
say "$arch: apt-get update (private lists)"
apt-get "${apt_opts[@]}" update >"$dir/apt-update.log" 2>&1 || { cat "$dir/apt-update.log" >&2; die "apt-get update for $arch failed"; }
# apt-get download writes into the working directory, as _apt when it can.
chmod 0777 "$dir/debs"
(cd "$dir/debs" && apt-get "${apt_opts[@]}" download "${pkgs[@]}") >"$dir/apt-download.log" 2>&1 ||
  { cat "$dir/apt-download.log" >&2; die "apt-get download ${pkgs[*]} failed (is this version still in the archive?)"; }

: >"$dir/files.tsv"
for deb in "$dir"/debs/*.deb; do
  name="$(dpkg-deb -f "$deb" Package)"; version="$(dpkg-deb -f "$deb" Version)"; deb_arch="$(dpkg-deb -f "$deb" Architecture)"
  [[ $deb_arch == "$arch" ]] || die "$deb is for $deb_arch, not $arch"
  dpkg-deb -x "$deb" "$dir/root"
  # ./lib/aarch64-linux-gnu/libc.so.6 -> /lib/aarch64-linux-gnu/libc.so.6
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n 's|^\./\(.*[^/]\)$|/\1|p' |
    awk -v p="$name" -v v="$version" -v a="$deb_arch" '{ print $0 "\t" p "\t" v "\t" a }' >>"$dir/files.tsv"
done
rm -rf "$dir/lists" "$dir/cache"
echo "$want" >"$dir/.complete"
say "$arch: ${pkgs[*]} unpacked into $dir/root"
