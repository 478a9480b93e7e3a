#!/usr/bin/env bash
# The Validate check for two or three models on this machine's GPU, in under 5 minutes:
#   benchmarks/gpu_check.sh                        # cuda; report under $OUT/validation/<card> or out/validation/<card>
#   benchmarks/gpu_check.sh --device cpu --quick   # CI smoke test
# Arguments pass through to benchmarks/gpu_check.py (--out DIR, --models ..., --install).
set -euo pipefail
cd "$(dirname "$0")/.."
# As a module from the repository root, so a bare checkout runs it without installing the package.
exec python -m benchmarks.gpu_check "$@"
