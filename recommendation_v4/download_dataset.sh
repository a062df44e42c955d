#!/usr/bin/env bash
# Download Yambda into the DLRMv4 reference's tree (mlcommons/training PR #889, recommendation_v4/
# README.MD "Steps to download and verify data"; recommendation_v4/data/layout.py):
#   default      the raw files from HuggingFace (yandex/yambda), the reference's "Option B":
#                flat/<size>/multi_event.parquet -> <dataset-dir>/raw/<size>/multi_event.parquet,
#                the two item mappings            -> <dataset-dir>/shared_metadata/
#                The trainer preprocesses them (processed_<size>/) and builds its flat-event cache
#                on first use; ahead of time: python -m recommendation_v4.data.preprocess, then
#                python -m recommendation_v4.data.cache_build.
#   --prepared   the reference's prepared 5b download ("Option A", MLCommons R2, ~227 GB):
#                processed_5b/hstu_cache_L4086/, processed_5b/item_popularity.npy, shared_metadata/;
#                it trains as is (no raw files, no preprocessing, no cache build).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/dataset_scripts.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [--size 50m|500m|5b] [--dataset-dir DIR | --data-root DIR]
                           [--with-embeddings] [--prepared] [--dry-run]

  --size SIZE         50m (default), 500m or 5b (5b's multi_event.parquet is ~38 GB)
  --dataset-dir DIR   the dataset directory, the reference's \$DLRM_DATA_PATH
                      (default: <data-root>/yambda-<size>, where a trainer looks)
  --data-root DIR     parent of the default dataset directory (default: \${MLPERF_DATA_ROOT:-data})
  --with-embeddings   also fetch embeddings.parquet into shared_metadata/ (the trainer ignores it)
  --prepared          the reference's prepared 5b dataset from MLCommons R2 instead of the raw
                      files (needs --size 5b; the R2 downloader checks every file's md5)
  --dry-run           print every command instead of running it
Environment: HF_ENDPOINT overrides https://huggingface.co (e.g. a mirror);
R2_DOWNLOADER_URL overrides the R2 downloader script's URL.
Next step: recommendation_v4/verify_dataset.sh --dataset-dir <dataset-dir> --size <size>
USAGE
}

size=50m
data_root="${MLPERF_DATA_ROOT:-data}"
dataset_dir=""
with_embeddings=0
prepared=0
dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --size) need_value "$@"; size="$2"; shift 2 ;;
    --dataset-dir) need_value "$@"; dataset_dir="$2"; shift 2 ;;
    --data-root) need_value "$@"; data_root="$2"; shift 2 ;;
    --with-embeddings) with_embeddings=1; shift ;;
    --prepared) prepared=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$size" in
  50m|500m|5b) ;;
  *) echo "error: --size must be 50m, 500m or 5b, got '$size'" >&2; exit 2 ;;
esac
if [[ $prepared -eq 1 && "$size" != 5b ]]; then
  echo "error: --prepared is the reference's Yambda-5b dataset only; add --size 5b" >&2
  exit 2
fi
dataset_dir="${dataset_dir:-$data_root/yambda-$size}"
verify_next="recommendation_v4/verify_dataset.sh --dataset-dir $dataset_dir --size $size"

if [[ $prepared -eq 1 ]]; then
  downloader_url="${R2_DOWNLOADER_URL:-https://raw.githubusercontent.com/mlcommons/r2-downloader/refs/heads/main/mlc-r2-downloader.sh}"
  metadata_uri="https://training.mlcommons-storage.org/metadata/dlrmv4_dataset.uri"
  downloader="<tmp>/mlc-r2-downloader.sh"
  if [[ $dry_run -eq 0 ]]; then
    for tool in curl wget md5sum; do
      command -v "$tool" >/dev/null || { echo "error: $tool is required by the R2 downloader" >&2; exit 1; }
    done
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    downloader="$scratch/mlc-r2-downloader.sh"
  fi
  run mkdir -p "$dataset_dir"
  run curl --fail --silent --show-error --location --output "$downloader" "$downloader_url"
  run bash "$downloader" -d "$dataset_dir" "$metadata_uri"
  if [[ $dry_run -eq 0 ]]; then
    echo "downloaded the prepared Yambda-5b dataset into $dataset_dir"
    echo "verify with: $verify_next --reference-checksums all"
  fi
  exit 0
fi

raw_dir="$dataset_dir/raw/$size"
metadata_dir="$dataset_dir/shared_metadata"
base_url="${HF_ENDPOINT:-https://huggingface.co}/datasets/yandex/yambda/resolve/main"

# Downloads to <name>.part and renames when complete, so an interrupted download never
# looks like a finished file; --continue-at - resumes a partial one.
fetch() {
  local remote_path="$1" target="$2"
  if [[ $dry_run -eq 0 && -f "$target" ]]; then
    echo "exists, skipping: $target"
    return
  fi
  run curl --fail --location --retry 5 --continue-at - --output "$target.part" "$base_url/$remote_path"
  run mv "$target.part" "$target"
}

run mkdir -p "$raw_dir" "$metadata_dir"
fetch "flat/$size/multi_event.parquet" "$raw_dir/multi_event.parquet"
fetch artist_item_mapping.parquet "$metadata_dir/artist_item_mapping.parquet"
fetch album_item_mapping.parquet "$metadata_dir/album_item_mapping.parquet"
if [[ $with_embeddings -eq 1 ]]; then
  fetch embeddings.parquet "$metadata_dir/embeddings.parquet"
fi
if [[ $dry_run -eq 0 ]]; then
  echo "downloaded Yambda-$size into $dataset_dir (raw/$size/, shared_metadata/)"
  echo "verify with: $verify_next"
fi
