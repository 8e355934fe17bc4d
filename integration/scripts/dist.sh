#!/usr/bin/env bash
# A release in one command (`make dist`; docs/release.md): for the version in
# Cargo.toml, the one place it is written, into .run/dist/<version>/:
#
#   watchmux-<v>-linux-<arch>.oci.tar   the image of each architecture
#                                       (image.sh), an OCI archive;
#   watchmux-<v>.oci.tar                the multi-architecture index over
#                                       them, as an OCI archive;
#   watchmux-<v>-linux-<arch>.cdx.json  the SBOM (CycloneDX): the Rust crates
#                                       linked (cargo-cyclonedx) and the
#                                       image's Debian packages;
#   watchmux-<v>.sig, .payload.json     the cosign signature over the index
#                                       digest and the payload it signs;
#   cosign.pub                          the key that verifies it;
#   image-digests.txt                   the index's and each image's digest;
#   watchmux-<v>.tgz                    the packaged chart;
#   SHA256SUMS                          over every file above.
#
# Chart.yaml's version and appVersion must equal Cargo.toml's version, or
# nothing is built. Along the way, on a registry on loopback (crane registry
# serve, 127.0.0.1:$DIST_REGISTRY_PORT, stopped on exit): the images and the
# index are pushed, signed with cosign (key-based, no transparency log) and
# the signature verified, and a tampered digest and a wrong key must fail
# verification; the chart is pushed as an OCI artefact, pulled back, compared
# and rendered from its oci:// reference. Each image's binary runs
# `--version` with only the libraries in the image (arm64 under qemu-user).
#
# Tools, each cached per machine (tool-cache.sh): ocibuild and crane
# (image-tools.sh), helm (build-helm.sh), cosign (build-cosign.sh, several
# minutes cold), cargo-cyclonedx (build-cyclonedx.sh). arm64 needs the rustup
# target and Debian's gcc-aarch64-linux-gnu and qemu-user: installed when
# missing (rustup, apt-get).
#
# Environment:
#   DIST_ARCHES="amd64 arm64"   the architectures (amd64 alone: no index)
#   DIST_REGISTRY_PORT=17480    the loopback registry's port
#   COSIGN_KEY, COSIGN_PASSWORD a real release's signing key (a path or a
#                               cosign KMS reference) and its password; without
#                               COSIGN_KEY a throwaway key pair is made in
#                               .run/dist/.work (and says so)
#   SOURCE_DATE_EPOCH, IMAGE_SOURCE  as image.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
scripts="$root/integration/scripts"
cd "$root"
start=$(date +%s)
say() { echo "dist: $*"; }
die() { echo "dist: FAIL: $*" >&2; exit 1; }

# --- the version, from Cargo.toml; the chart must agree ---------------------------
version="$(awk -F'"' '/^\[package\]/{p=1} p && /^version *=/{print $2; exit}' Cargo.toml)"
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+].*)?$ ]] || die "Cargo.toml: no semantic version (\"$version\")"
chart_yaml="$root/charts/watchmux/Chart.yaml"
chart_version="$(awk '$1 == "version:" { gsub(/"/, "", $2); print $2; exit }' "$chart_yaml")"
app_version="$(awk '$1 == "appVersion:" { gsub(/"/, "", $2); print $2; exit }' "$chart_yaml")"
[[ $chart_version == "$version" && $app_version == "$version" ]] ||
  die "charts/watchmux/Chart.yaml says version $chart_version, appVersion $app_version; Cargo.toml says $version: make them agree"
git diff --quiet HEAD -- 2>/dev/null || say "note: uncommitted changes: the images' revision label ends in -dirty"

arches="${DIST_ARCHES:-amd64 arm64}"
out="$root/.run/dist/$version"
work="$root/.run/dist/.work"
rm -rf "$out" "$work/run"
mkdir -p "$out" "$work/run"
run="$work/run"
say "watchmux $version (Chart.yaml agrees), $(git rev-parse --short=12 HEAD), for ${arches// /, } into ${out#"$root"/}"

# --- tools ----------------------------------------------------------------------
if [[ " $arches " == *" arm64 "* ]]; then
  if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
    say "rustup target add aarch64-unknown-linux-gnu"
    rustup target add aarch64-unknown-linux-gnu
  fi
  missing=()
  command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
  command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
  if [[ ${#missing[@]} -gt 0 ]]; then
    say "installing ${missing[*]} (apt-get)"
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
      { apt-get -o DPkg::Lock::Timeout=300 update -qq &&
        apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
      die "could not install ${missing[*]}"
  fi
fi
bash "$scripts/image-tools.sh"
bash "$scripts/build-helm.sh"
bash "$scripts/build-cosign.sh"
bash "$scripts/build-cyclonedx.sh"
crane="$root/.run/bin/crane"
helm="$root/.run/helm"
cosign="$root/.run/bin/cosign"
cyclonedx="$root/.run/cargo-tools/bin/cargo-cyclonedx"

# --- a registry on loopback ----------------------------------------------------------
port="${DIST_REGISTRY_PORT:-17480}"
registry="127.0.0.1:$port"
registry_pid=""
cleanup() {
  if [[ -n $registry_pid ]]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
if curl -sS --max-time 1 "http://$registry/" >/dev/null 2>&1; then
  die "something already answers on $registry (DIST_REGISTRY_PORT chooses another port)"
fi
"$crane" registry serve --address "$registry" >"$run/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 1 50); do
  curl -fsS --max-time 1 "http://$registry/v2/" >/dev/null 2>&1 && break
  kill -0 "$registry_pid" 2>/dev/null || { cat "$run/registry.log" >&2; die "the registry did not start"; }
  sleep 0.1
done
curl -fsS --max-time 1 "http://$registry/v2/" >/dev/null || die "the registry on $registry does not answer"
repo="$registry/watchmux"

# --- the images ---------------------------------------------------------------------
# A deterministic tar of a directory (an OCI layout): names sorted, no owners,
# every time the commit's.
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"
tar_dir() { tar -C "$1" --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -cf "$2" .; }
declare -A digest_of
for arch in $arches; do
  image_dir="$work/image-$arch"
  IMAGE_ARCH="$arch" IMAGE_DIR="$image_dir" bash "$scripts/image.sh"
  ctx="$image_dir/context"
  # The binary with nothing but the image's own libraries: its loader, its
  # library directory (for arm64, qemu-user resolves every path in base/ first).
  case "$arch" in
    amd64) ran="$("$ctx/base/lib64/ld-linux-x86-64.so.2" --library-path "$ctx/base/lib/x86_64-linux-gnu" "$ctx/watchmux" --version)" ;;
    arm64) ran="$(qemu-aarch64 -L "$ctx/base" "$ctx/watchmux" --version)" ;;
    *) die "no way to run a $arch binary here" ;;
  esac
  [[ $ran == *"$version"* ]] || die "$arch: watchmux --version with the image's libraries says \"$ran\", want $version"
  say "ok   $arch: the image's binary runs on the image's libraries: $(head -1 <<<"$ran")"
  cp "$image_dir/watchmux-oci.tar" "$out/watchmux-$version-linux-$arch.oci.tar"
  digest_of[$arch]="$(jq -r '.manifests[0].digest' "$image_dir/oci/index.json")"
  "$crane" push "$image_dir/oci" "$repo:$version-$arch" >"$run/push-$arch.log" 2>&1 || { cat "$run/push-$arch.log" >&2; die "crane push $arch"; }
  [[ $("$crane" digest "$repo:$version-$arch") == "${digest_of[$arch]}" ]] || die "$arch: the registry's digest is not the archive's"
  [[ $("$crane" config "$repo:$version-$arch" | jq -r '.os + "/" + .architecture') == "linux/$arch" ]] || die "$arch: the image's config is not linux/$arch"
done

# The reference a release names: the index over every architecture, or the
# one image when there is one.
read -r -a arch_list <<<"$arches"
if [[ ${#arch_list[@]} -gt 1 ]]; then
  manifests=()
  for arch in "${arch_list[@]}"; do manifests+=(-m "$repo@${digest_of[$arch]}"); done
  "$crane" index append "${manifests[@]}" -t "$repo:$version" >"$run/index.log" 2>&1 || { cat "$run/index.log" >&2; die "crane index append"; }
  platforms="$("$crane" manifest "$repo:$version" | jq -r '[.manifests[] | .platform.os + "/" + .platform.architecture] | sort | join(" ")')"
  want="$(for arch in "${arch_list[@]}"; do echo "linux/$arch"; done | sort | xargs)"
  [[ $platforms == "$want" ]] || die "the index lists [$platforms], want [$want]"
else
  "$crane" tag "$repo:$version-${arch_list[0]}" "$version" 2>"$run/index.log"
fi
image_digest="$("$crane" digest "$repo:$version")"
rm -rf "$work/index-layout"
"$crane" pull --format oci "$repo@$image_digest" "$work/index-layout" >/dev/null
tar_dir "$work/index-layout" "$out/watchmux-$version.oci.tar"
{
  echo "$image_digest watchmux:$version"
  for arch in "${arch_list[@]}"; do echo "${digest_of[$arch]} watchmux:$version linux/$arch"; done
} >"$out/image-digests.txt"
say "ok   images pushed to $repo: $version = $image_digest (${arches// /, })"

# --- the SBOM -----------------------------------------------------------------------
# cargo-cyclonedx: the crates of the binary (normal dependencies, for the
# target: not dev- or build-only ones), then the image's C library as the
# Debian packages image.sh copied it from.
sbom_tmp="$work/sbom"
rm -rf "$sbom_tmp"; mkdir -p "$sbom_tmp"
for arch in "${arch_list[@]}"; do
  case "$arch" in amd64) triple=x86_64-unknown-linux-gnu ;; arm64) triple=aarch64-unknown-linux-gnu ;; esac
  # It writes next to Cargo.toml, under the name given.
  name="watchmux-sbom-$$-$arch"
  "$cyclonedx" cyclonedx --format json --spec-version 1.5 --target "$triple" --no-build-deps \
    --override-filename "$name" >"$run/cyclonedx-$arch.log" 2>&1 || { cat "$run/cyclonedx-$arch.log" >&2; die "cargo cyclonedx ($arch)"; }
  mv "$root/$name.json" "$sbom_tmp/rust-$arch.json"
  # image.sh's list: path, package, version, architecture.
  jq -R -s --arg distro "debian-$(. /etc/os-release && echo "$VERSION_ID")" '
    [split("\n")[] | select(length > 0) | split("\t") | {path: .[0], name: .[1], version: .[2], arch: .[3]}]
    | group_by(.name) | map({
        type: "library",
        "bom-ref": ("pkg:deb/debian/" + .[0].name + "@" + .[0].version + "?arch=" + .[0].arch + "&distro=" + $distro),
        name: .[0].name, version: .[0].version, publisher: "Debian",
        purl: ("pkg:deb/debian/" + .[0].name + "@" + .[0].version + "?arch=" + .[0].arch + "&distro=" + $distro),
        properties: [.[] | {name: "watchmux:image-file", value: .path}]
      })' "$work/image-$arch/base-packages.tsv" >"$sbom_tmp/debs-$arch.json"
  jq -e 'length > 0 and all(.[]; .name != "unknown")' "$sbom_tmp/debs-$arch.json" >/dev/null ||
    die "$arch: a library in the image has no Debian package: $(cat "$work/image-$arch/base-packages.tsv")"
  jq --slurpfile debs "$sbom_tmp/debs-$arch.json" --arg digest "${digest_of[$arch]}" --arg arch "$arch" '
    .components += $debs[0]
    | .metadata.properties = (.metadata.properties // []) + [
        {name: "watchmux:image-digest", value: $digest},
        {name: "watchmux:platform", value: ("linux/" + $arch)}]' \
    "$sbom_tmp/rust-$arch.json" >"$out/watchmux-$version-linux-$arch.cdx.json"
  crates="$(jq '[.components[] | select(.purl // "" | startswith("pkg:cargo/"))] | length' "$out/watchmux-$version-linux-$arch.cdx.json")"
  debs="$(jq -r '[.[] | .name + " " + .version] | join(", ")' "$sbom_tmp/debs-$arch.json")"
  [[ $crates -gt 10 ]] || die "$arch: the SBOM names $crates crates"
  say "ok   SBOM $arch: $crates crates, $debs"
done

# --- the signature ------------------------------------------------------------------
keys="$work/keys"
mkdir -p "$keys"
if [[ -n ${COSIGN_KEY:-} ]]; then
  key="$COSIGN_KEY"
  say "signing with COSIGN_KEY"
else
  key="$keys/cosign.key"
  if [[ ! -f $key ]]; then
    (cd "$keys" && COSIGN_PASSWORD="" "$cosign" generate-key-pair >/dev/null 2>&1) || die "cosign generate-key-pair"
  fi
  export COSIGN_PASSWORD=""
  say "note: signing with a throwaway key ($key): not a key anyone trusts; a real release sets COSIGN_KEY"
fi
"$cosign" public-key --key "$key" >"$out/cosign.pub" 2>"$run/public-key.log" || { cat "$run/public-key.log" >&2; die "cosign public-key"; }
# --recursive: the index and each image in it; no transparency log here.
"$cosign" sign --key "$key" --tlog-upload=false --yes --recursive "$repo@$image_digest" >"$run/sign.log" 2>&1 ||
  { cat "$run/sign.log" >&2; die "cosign sign"; }
# cosign verify fetches sigstore's public trust root (TUF) first unless given
# keys of its own; none of it serves a key-based signature without a log, and
# this machine reaches none of it: naming any key file (cosign.pub itself, as
# a CT log key no certificate here uses) keeps it from trying.
export SIGSTORE_CT_LOG_PUBLIC_KEY_FILE="$out/cosign.pub"
verify() { "$cosign" verify --key "$2" --insecure-ignore-tlog=true "$1" 2>"$run/verify-last.log"; local rc=$?; cat "$run/verify-last.log" >>"$run/verify.log"; return $rc; }
verified="$(verify "$repo@$image_digest" "$out/cosign.pub")" || { cat "$run/verify.log" >&2; die "cosign verify of $image_digest"; }
[[ $(jq -r '.[0].critical.image["docker-manifest-digest"]' <<<"$verified") == "$image_digest" ]] ||
  die "cosign verify: the signed payload does not name $image_digest"
for arch in "${arch_list[@]}"; do
  verify "$repo@${digest_of[$arch]}" "$out/cosign.pub" >/dev/null || { cat "$run/verify.log" >&2; die "cosign verify of the $arch image"; }
done
say "ok   cosign verify: $image_digest and each image are signed by cosign.pub"

# A tampered image: the amd64 one with one label more (another digest), and
# the good signature copied to where cosign looks for that digest's. The
# signature is valid, but it names another digest: verification must fail.
tampered_digest="$("$crane" mutate "$repo@${digest_of[${arch_list[0]}]}" --label org.example.tampered=1 -t "$repo:tampered" 2>>"$run/tamper.log" | sed 's/.*@//')"
[[ $tampered_digest == sha256:* && $tampered_digest != "$image_digest" ]] || die "crane mutate gave \"$tampered_digest\""
"$crane" copy "$repo:${image_digest/:/-}.sig" "$repo:${tampered_digest/:/-}.sig" >>"$run/tamper.log" 2>&1 || { cat "$run/tamper.log" >&2; die "crane copy of the signature"; }
if verify "$repo@$tampered_digest" "$out/cosign.pub" >/dev/null; then
  die "cosign verify accepted $tampered_digest, an image the signature does not name"
fi
# ... for that reason, not another (no signature found, a registry error).
grep -q "invalid or missing digest in claim" "$run/verify-last.log" ||
  { cat "$run/verify-last.log" >&2; die "cosign verify refused $tampered_digest, but not for its digest"; }
# Another key: verification must fail too.
mkdir -p "$run/other-key"
(cd "$run/other-key" && COSIGN_PASSWORD="" "$cosign" generate-key-pair >/dev/null 2>&1) || die "cosign generate-key-pair (other)"
if verify "$repo@$image_digest" "$run/other-key/cosign.pub" >/dev/null; then
  die "cosign verify accepted the signature with a key that did not make it"
fi
grep -q "invalid signature" "$run/verify-last.log" ||
  { cat "$run/verify-last.log" >&2; die "cosign verify refused another key, but not for its signature"; }
say "ok   cosign verify refuses a tampered digest ($tampered_digest) and another key"

# The signature as files, so the release can be verified (and the signature
# attached to the image wherever it is pushed) without this registry.
"$cosign" download signature "$repo@$image_digest" >"$run/signature.json" 2>>"$run/verify.log" || die "cosign download signature"
jq -r 'select(.Payload) | .Base64Signature' "$run/signature.json" | head -1 >"$out/watchmux-$version.sig"
jq -r 'select(.Payload) | .Payload' "$run/signature.json" | head -1 | base64 -d >"$out/watchmux-$version.payload.json"
"$cosign" verify-blob --key "$out/cosign.pub" --signature "$out/watchmux-$version.sig" --insecure-ignore-tlog=true \
  "$out/watchmux-$version.payload.json" >>"$run/verify.log" 2>&1 || { cat "$run/verify.log" >&2; die "cosign verify-blob of the saved signature"; }
[[ $(jq -r '.critical.image["docker-manifest-digest"]' "$out/watchmux-$version.payload.json") == "$image_digest" ]] ||
  die "the saved payload does not name $image_digest"
say "ok   cosign verify-blob: the saved signature and payload name $image_digest"

# --- the chart ----------------------------------------------------------------------
"$helm" package "$root/charts/watchmux" --version "$version" --app-version "$version" -d "$out" >"$run/helm-package.log" ||
  die "helm package"
chart_tgz="$out/watchmux-$version.tgz"
[[ -f $chart_tgz ]] || die "helm package made no $chart_tgz"
"$helm" push "$chart_tgz" "oci://$registry/charts" --plain-http >"$run/helm-push.log" 2>&1 || { cat "$run/helm-push.log" >&2; die "helm push"; }
mkdir -p "$run/pulled"
"$helm" pull "oci://$registry/charts/watchmux" --version "$version" --plain-http -d "$run/pulled" >>"$run/helm-push.log" 2>&1 ||
  { cat "$run/helm-push.log" >&2; die "helm pull"; }
cmp -s "$chart_tgz" "$run/pulled/watchmux-$version.tgz" || die "the chart pulled back differs from the one pushed"
# Rendered straight from its oci:// reference, as the README installs it,
# with the image the release names.
rendered="$("$helm" template watchmux "oci://$registry/charts/watchmux" --version "$version" --plain-http \
  --set mode=tier --set image.repository="$repo" --set image.digest="$image_digest" 2>>"$run/helm-push.log" |
  yq -r 'select(.kind == "Deployment") | .spec.template.spec.containers[0].image')"
[[ $rendered == "$repo@$image_digest" ]] || die "the chart from oci://$registry/charts/watchmux renders image \"$rendered\""
say "ok   chart watchmux-$version: pushed to oci://$registry/charts, pulled back the same, renders image $rendered"

# --- checksums ---------------------------------------------------------------------
(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >"$run/SHA256SUMS" &&
  mv "$run/SHA256SUMS" SHA256SUMS && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS"

say "done in $(( $(date +%s) - start ))s: ${out#"$root"/}"
for f in "$out"/*; do printf '  %10s  %s\n' "$(stat -c %s "$f")" "${f##*/}"; done
