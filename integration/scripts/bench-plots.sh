#!/usr/bin/env bash
# The benchmark plots: matplotlib in a venv under .run/ (made once, from the
# Python package index), then bench-plots.py over .run/bench-*/ into docs/img/.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/.run/venv-plots"
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q matplotlib
fi
cd "$root"
"$venv/bin/python" integration/scripts/bench-plots.py .run docs/img
