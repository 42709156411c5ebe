#!/usr/bin/env bash
# The README's main job: set up .venv if needed, then compare every applicable
# algorithm on the built-in DGX-1 (arguments are passed to `simcoll compare`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p out
exec .venv/bin/simcoll compare --topology dgx1 --collective allreduce --csv out/compare.csv --plot out/compare.png "$@"
