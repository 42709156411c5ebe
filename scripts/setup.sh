#!/usr/bin/env bash
# Create .venv (if needed) and install simcoll with its dev extras into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import simcoll, pytest, hypothesis, nbclient" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.simcoll-installed ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[dev]"
  touch .venv/.simcoll-installed
fi
