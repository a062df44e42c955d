#!/usr/bin/env bash
# Every benchmark's load and throughput numbers, one line per measurement:
#   scripts/benchmark.sh            (make bench)
# DLRM-HSTU: loader samples/s at history 4096, training samples/s, attention memory, window
# turnover. RetinaNet: decoded+augmented images/s per loader worker at 800x800, training images/s.
# FLUX.1: reader samples/s and MB/s per worker on reference-shape shards (T5 [256, 4096] bf16).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
cd "$repo"
echo "== recommendation_v4 (DLRM-HSTU)"
"$python" -m recommendation_v4.bench.suite "$@"
echo "== retinanet"
"$python" -m retinanet.bench.suite
echo "== flux"
"$python" -m flux.bench.loader
