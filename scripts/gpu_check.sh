#!/usr/bin/env bash
# GPU verification in one command (scripts/gpu_check.py says what it runs and writes).
#
#   bash scripts/gpu_check.sh              # on the GPU machine: every phase, results in $OUT
#   bash scripts/gpu_check.sh --list       # the phases, budgets and commands (runs nothing)
#   bash scripts/gpu_check.sh --prepare    # here, with a network: wheels to carry, .gpu_carry/
#
# The Python is $PYTHON if set, else python3 (on the GPU machine, the one holding PyTorch).
# Exit status: 0 all well, 1 a phase failed, 3 no GPU, 2 bad arguments, 130 interrupted.
set -u
cd "$(dirname "$0")/.." || exit 2
PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "gpu_check: no Python: '$PY' is not on PATH (set PYTHON=/path/to/python3)" >&2
    exit 2
fi
exec "$PY" scripts/gpu_check.py "$@"
