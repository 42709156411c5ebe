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
  # -qq: errors only; this machine's pip configuration names package locations that may be absent,
  # and pip warns once per package about each of them
  .venv/bin/python -m pip install -qq --upgrade pip
  .venv/bin/python -m pip install -qq -e ".[dev]"
  touch .venv/.simcoll-installed
fi
