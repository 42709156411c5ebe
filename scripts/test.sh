#!/usr/bin/env bash
# The README's test command: set up .venv if needed, lint, run the tests and
# every docstring example of the package (pyproject: testpaths, --doctest-modules).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
if [ $# -eq 0 ]; then set -- tests simcoll gpu; fi
.venv/bin/python -m pytest -n 2 -q "$@"
