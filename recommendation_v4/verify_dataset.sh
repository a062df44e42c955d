#!/usr/bin/env bash
# Verify a Yambda dataset directory: raw files present, readable parquet with the Yambda
# schema (recommendation_v4/data/schema.py), and optionally their SHA-256 checksums.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/dataset_scripts.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") --dataset-dir DIR [--checksums FILE] [--dry-run]

  --dataset-dir DIR   dataset directory holding raw/multi_event.parquet,
                      raw/album_item_mapping.parquet and raw/artist_item_mapping.parquet
  --checksums FILE    sha256sum-format file ("<sha256>  <file name>" per line, names
                      relative to raw/) to check the files against
  --dry-run           print every command instead of running it
Environment: PYTHON selects the interpreter (default: python).
USAGE
}

dataset_dir=""
checksums=""
dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dataset-dir) dataset_dir="${2:?--dataset-dir needs a value}"; shift 2 ;;
    --checksums) checksums="${2:?--checksums needs a value}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ -z "$dataset_dir" ]]; then
  echo "error: --dataset-dir is required" >&2
  usage >&2
  exit 2
fi
python="${PYTHON:-python}"
raw_dir="$dataset_dir/raw"

for name in multi_event.parquet album_item_mapping.parquet artist_item_mapping.parquet; do
  if [[ $dry_run -eq 0 && ! -f "$raw_dir/$name" ]]; then
    echo "error: missing $raw_dir/$name; download it with recommendation_v4/download_dataset.sh" \
      "or generate a synthetic dataset with python -m recommendation_v4.data.synthetic --out $dataset_dir" >&2
    exit 1
  fi
  run test -f "$raw_dir/$name"
done
run "$python" -m recommendation_v4.data.schema --dataset-dir "$dataset_dir"
if [[ -n "$checksums" ]]; then
  checksums_abs="$(cd "$(dirname "$checksums")" && pwd)/$(basename "$checksums")"
  # sha256sum resolves the names relative to the current directory: run it inside raw/.
  if [[ $dry_run -eq 1 ]]; then
    echo "(cd $(printf '%q' "$raw_dir") && sha256sum --check --strict --quiet $(printf '%q' "$checksums_abs"))"
  else
    (cd "$raw_dir" && sha256sum --check --strict --quiet "$checksums_abs")
  fi
fi
if [[ $dry_run -eq 0 ]]; then
  echo "verified $dataset_dir"
fi
