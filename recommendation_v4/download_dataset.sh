#!/usr/bin/env bash
# Download the public Yambda dataset (https://huggingface.co/datasets/yandex/yambda) into
# <dataset-dir>/raw/, the layout the preprocessing reads (recommendation_v4/data/layout.py).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/dataset_scripts.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [--size 50m|500m|5b] [--dataset-dir DIR | --data-root DIR]
                           [--with-embeddings] [--dry-run]

Fetches flat/<size>/multi_event.parquet, album_item_mapping.parquet and
artist_item_mapping.parquet into <dataset-dir>/raw/.
  --size SIZE         50m (default), 500m or 5b (5b's multi_event.parquet is ~50 GB)
  --dataset-dir DIR   target dataset directory (default: <data-root>/yambda-<size>)
  --data-root DIR     parent of the default dataset directory (default: ./data)
  --with-embeddings   also fetch embeddings.parquet (audio embeddings; the trainer ignores them)
  --dry-run           print every command instead of running it
Environment: HF_ENDPOINT overrides https://huggingface.co (e.g. a mirror).
Next step: recommendation_v4/verify_dataset.sh --dataset-dir <dataset-dir>
USAGE
}

size=50m
data_root=data
dataset_dir=""
with_embeddings=0
dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --size) size="${2:?--size needs a value}"; shift 2 ;;
    --dataset-dir) dataset_dir="${2:?--dataset-dir needs a value}"; shift 2 ;;
    --data-root) data_root="${2:?--data-root needs a value}"; shift 2 ;;
    --with-embeddings) with_embeddings=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$size" in
  50m|500m|5b) ;;
  *) echo "error: --size must be 50m, 500m or 5b, got '$size'" >&2; exit 2 ;;
esac
dataset_dir="${dataset_dir:-$data_root/yambda-$size}"
raw_dir="$dataset_dir/raw"
base_url="${HF_ENDPOINT:-https://huggingface.co}/datasets/yandex/yambda/resolve/main"

# Downloads to <name>.part and renames when complete, so an interrupted download never
# looks like a finished file; --continue-at - resumes a partial one.
fetch() {
  local remote_path="$1" local_name="$2"
  if [[ $dry_run -eq 0 && -f "$raw_dir/$local_name" ]]; then
    echo "exists, skipping: $raw_dir/$local_name"
    return
  fi
  run curl --fail --location --retry 5 --continue-at - \
    --output "$raw_dir/$local_name.part" "$base_url/$remote_path"
  run mv "$raw_dir/$local_name.part" "$raw_dir/$local_name"
}

run mkdir -p "$raw_dir"
fetch "flat/$size/multi_event.parquet" multi_event.parquet
fetch album_item_mapping.parquet album_item_mapping.parquet
fetch artist_item_mapping.parquet artist_item_mapping.parquet
if [[ $with_embeddings -eq 1 ]]; then
  fetch embeddings.parquet embeddings.parquet
fi
if [[ $dry_run -eq 0 ]]; then
  echo "downloaded Yambda-$size into $raw_dir"
  echo "verify with: recommendation_v4/verify_dataset.sh --dataset-dir $dataset_dir"
fi
