#!/usr/bin/env bash
# The README's test command: set up .venv if needed, lint, run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -n 2 -q "$@"
