#!/usr/bin/env bash
# The README's test command: install into .venv, lint, run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
.venv/bin/ruff check layoutopt tests benchmarks
export TVM_NUM_THREADS=${TVM_NUM_THREADS:-2}
.venv/bin/python -m pytest -q "$@"
