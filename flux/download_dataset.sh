#!/usr/bin/env bash
# Downloads the MLPerf Training flux1 preprocessed dataset from MLCommons R2 with the official
# R2 downloader (mlcommons/r2-downloader), which fetches each part's file list (<name>.md5),
# downloads with wget and checks every md5:
#   cc12m_preprocessed/  train: 1,099,776 samples in 4,762 Arrow shards (~2.4 TB)
#   coco_preprocessed/   validation: 29,696 samples in 129 Arrow shards, with `timestep`
#   empty_encodings/     t5_empty.npy, clip_empty.npy
# These are the directory names the reference reads from /dataset. Access may need an MLCommons
# login (the downloader opens a browser) or a service account (--service-account).
# For a local synthetic stand-in use: python -m flux.data.synthetic --size small
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/dataset_scripts.sh"

usage() {
  cat <<USAGE
usage: $(basename "$0") [--data-dir DIR] [--parts "cc12m_preprocessed coco_preprocessed empty_encodings"]
                           [--service-account] [--dry-run] [-h]

  --data-dir DIR      directory that receives the part directories
                      (default: \${MLPERF_DATA_ROOT:-<repo>/data}/flux, where the trainer looks)
  --parts LIST        parts to fetch, space separated (default: all three)
  --service-account   pass -s to the R2 downloader (needs CF_ACCESS_CLIENT_ID / CF_ACCESS_CLIENT_SECRET)
  --dry-run           print what would be downloaded and the commands, download nothing
  -h, --help          this help
Environment: R2_DOWNLOADER_URL overrides the downloader script's URL.
Next step: flux/verify_dataset.sh --data-dir DIR
USAGE
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data_dir="${MLPERF_DATA_ROOT:-$root/data}/flux"
parts="cc12m_preprocessed coco_preprocessed empty_encodings"
service_account=0
dry_run=0
downloader_url="${R2_DOWNLOADER_URL:-https://raw.githubusercontent.com/mlcommons/r2-downloader/refs/heads/main/mlc-r2-downloader.sh}"
metadata_base="https://training.mlcommons-storage.org/metadata"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --data-dir) need_value "$@"; data_dir="$2"; shift 2 ;;
    --parts) need_value "$@"; parts="$2"; shift 2 ;;
    --service-account) service_account=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

# part directory -> R2 metadata file; the downloader names its directory after the last path
# component of the dataset URL the .uri holds, which is the part name.
metadata_uri() {
  case "$1" in
    cc12m_preprocessed) echo "$metadata_base/flux-1-cc12m-preprocessed.uri" ;;
    coco_preprocessed) echo "$metadata_base/flux-1-coco-preprocessed.uri" ;;
    empty_encodings) echo "$metadata_base/flux-1-empty-encodings.uri" ;;
    *) return 1 ;;
  esac
}
for part in $parts; do
  metadata_uri "$part" >/dev/null || { echo "error: unknown part '$part' (cc12m_preprocessed, coco_preprocessed, empty_encodings)" >&2; exit 2; }
done

downloader_flags=()
[[ $service_account -eq 1 ]] && downloader_flags+=(-s)

if [[ $dry_run -eq 1 ]]; then
  echo "dry run: would download the flux1 preprocessed dataset ($parts) into $data_dir"
  echo "dry run: curl -fsSL $downloader_url -o <tmp>/mlc-r2-downloader.sh"
  for part in $parts; do
    echo "dry run: cd $data_dir && bash <tmp>/mlc-r2-downloader.sh ${downloader_flags[*]:+${downloader_flags[*]} }-d $part $(metadata_uri "$part")"
  done
  echo "dry run: then $root/flux/verify_dataset.sh --data-dir $data_dir"
  exit 0
fi

for tool in curl wget md5sum; do
  command -v "$tool" >/dev/null || { echo "error: $tool is required by the R2 downloader" >&2; exit 1; }
done
mkdir -p "$data_dir"
workdir="$(mktemp -d)"
trap 'rm -rf "$workdir"' EXIT
curl -fsSL "$downloader_url" -o "$workdir/mlc-r2-downloader.sh"
cd "$data_dir"
for part in $parts; do
  echo "downloading $part into $data_dir/$part"
  bash "$workdir/mlc-r2-downloader.sh" "${downloader_flags[@]}" -d "$part" "$(metadata_uri "$part")"
done
echo "done: verify with $root/flux/verify_dataset.sh --data-dir $data_dir"
