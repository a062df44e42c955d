#!/usr/bin/env bash
# Verifies an OpenImages-MLPerf directory: labels json present and valid, image and class counts
# (the reference subset's by default), every listed file present, a sample of files decodable.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/dataset_scripts.sh"

usage() {
  cat <<USAGE
usage: $(basename "$0") [--dataset-dir DIR] [--expect-train N] [--expect-validation N]
                         [--expect-classes N] [--decode-sample N] [--dry-run] [-h]

  --dataset-dir DIR      dataset to check (default: \$DATASET_DIR or /datasets/open-images-v6-mlperf)
  --expect-train N       train images expected (default 1170301; 0 skips the check)
  --expect-validation N  validation images expected (default 24781; 0 skips the check)
  --expect-classes N     categories expected (default 264; 0 skips the check)
  --decode-sample N      files per split to decode (default 200)
  --dry-run              print the check that would run
  -h, --help             this help
USAGE
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$(repo_python "$root")"
dataset_dir="${DATASET_DIR:-/datasets/open-images-v6-mlperf}"
expect_train=1170301
expect_validation=24781
expect_classes=264
decode_sample=200
dry_run=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dataset-dir) need_value "$@"; dataset_dir="$2"; shift 2 ;;
    --expect-train) need_value "$@"; expect_train="$2"; shift 2 ;;
    --expect-validation) need_value "$@"; expect_validation="$2"; shift 2 ;;
    --expect-classes) need_value "$@"; expect_classes="$2"; shift 2 ;;
    --decode-sample) need_value "$@"; decode_sample="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

for value in "$expect_train" "$expect_validation" "$expect_classes" "$decode_sample"; do
  [[ "$value" =~ ^[0-9]+$ ]] || { echo "error: expected a non-negative integer, got '$value'" >&2; exit 2; }
done

command=("$python" -m retinanet.data.verify --dataset-dir "$dataset_dir"
  --expect-train "$expect_train" --expect-validation "$expect_validation"
  --expect-classes "$expect_classes" --decode-sample "$decode_sample")

if [[ "$dry_run" -eq 1 ]]; then
  echo "dry run: cd $root && ${command[*]}"
  exit 0
fi

if [[ ! -d "$dataset_dir" ]]; then
  echo "error: dataset directory not found: $dataset_dir" >&2
  exit 1
fi
cd "$root"
"${command[@]}"
