#!/usr/bin/env bash
# The README's main job: install into .venv, then run layoutopt on its embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
export TVM_NUM_THREADS=${TVM_NUM_THREADS:-2}
exec .venv/bin/layoutopt tune "$@"
