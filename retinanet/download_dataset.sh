#!/usr/bin/env bash
# Downloads the MLPerf OpenImages-v6 subset (264 classes; 1,170,301 train and 24,781 validation
# images, about 352 GB) with fiftyone and writes <dir>/{train,validation}/labels/openimages-mlperf.json,
# the layout the reference (mlcommons/training single_stage_detector) trains on.
# Needs internet access and `pip install fiftyone`. For a local synthetic stand-in use:
#   python -m retinanet.data.synthetic --size small --seed 0 --out DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/dataset_scripts.sh"

usage() {
  cat <<USAGE
usage: $(basename "$0") [--dataset-dir DIR] [--splits "train validation"] [--dry-run] [-h]

  --dataset-dir DIR  where to download (default: \$DATASET_DIR or /datasets/open-images-v6-mlperf)
  --splits LIST      splits to fetch, space separated (default: "train validation")
  --dry-run          print what would run, download nothing
  -h, --help         this help
USAGE
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$(repo_python "$root")"
dataset_dir="${DATASET_DIR:-/datasets/open-images-v6-mlperf}"
splits="train validation"
dry_run=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dataset-dir) need_value "$@"; dataset_dir="$2"; shift 2 ;;
    --dataset-dir=*) dataset_dir="${1#*=}"; shift ;;
    --splits) need_value "$@"; splits="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

for split in $splits; do
  case "$split" in
    train|validation) ;;
    *) echo "error: unknown split '$split' (train, validation)" >&2; exit 2 ;;
  esac
done

# shellcheck disable=SC2206  # the split list is meant to word-split
command=("$python" -m retinanet.data.fiftyone_download --dataset-dir "$dataset_dir" --splits $splits)

if [[ "$dry_run" -eq 1 ]]; then
  echo "dry run: would download OpenImages-v6 MLPerf subset ($splits) into $dataset_dir"
  echo "dry run: cd $root && ${command[*]}"
  exit 0
fi

if ! "$python" -c "import fiftyone" 2>/dev/null; then
  echo "error: fiftyone is not installed for $python; run: $python -m pip install fiftyone" >&2
  exit 1
fi
mkdir -p "$dataset_dir"
cd "$root"
"${command[@]}"
echo "done: verify with $root/retinanet/verify_dataset.sh --dataset-dir $dataset_dir"
