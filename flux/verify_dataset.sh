#!/usr/bin/env bash
# Verifies a flux1 dataset directory (cc12m_preprocessed/, coco_preprocessed/, empty_encodings/):
# 1. file integrity: each part's md5 list from R2 (flux-1-<part>.md5, saved there by the
#    downloader) checked with md5sum; a missing or corrupt file fails and is named;
# 2. structure: python -m flux.data.verify opens every shard with the trainer's reader and checks
#    columns, shapes, row/shard counts, the validation timestep balance and the empty encodings.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/dataset_scripts.sh"

usage() {
  cat <<USAGE
usage: $(basename "$0") [--data-dir DIR] [--expect-train N] [--expect-validation N]
                         [--expect-shapes reference|any] [--skip-md5] [--decode-sample N] [--dry-run] [-h]

  --data-dir DIR           dataset to check (default: \${MLPERF_DATA_ROOT:-<repo>/data}/flux)
  --expect-train N         train samples expected (default 1099776; 0 skips the check)
  --expect-validation N    validation samples expected (default 29696; 0 skips the check)
  --expect-shapes S        "reference" (T5 [256,4096], CLIP [768], latents [16,32,32]) or "any"
  --skip-md5               structure check only (e.g. for a generated dataset without md5 lists)
  --decode-sample N        rows per split to decode (default 64)
  --dry-run                print the checks that would run, check nothing
  -h, --help               this help
Environment: PYTHON selects the interpreter (default: <repo>/.venv/bin/python, else python3).
USAGE
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$(repo_python "$root")"
data_dir="${MLPERF_DATA_ROOT:-$root/data}/flux"
expect_train=1099776
expect_validation=29696
expect_shapes=reference
skip_md5=0
decode_sample=64
dry_run=0
parts="cc12m_preprocessed coco_preprocessed empty_encodings"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --data-dir) need_value "$@"; data_dir="$2"; shift 2 ;;
    --expect-train) need_value "$@"; expect_train="$2"; shift 2 ;;
    --expect-validation) need_value "$@"; expect_validation="$2"; shift 2 ;;
    --expect-shapes) need_value "$@"; expect_shapes="$2"; shift 2 ;;
    --skip-md5) skip_md5=1; shift ;;
    --decode-sample) need_value "$@"; decode_sample="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for value in "$expect_train" "$expect_validation" "$decode_sample"; do
  [[ "$value" =~ ^[0-9]+$ ]] || { echo "error: expected a non-negative integer, got '$value'" >&2; exit 2; }
done
case "$expect_shapes" in reference|any) ;; *) echo "error: --expect-shapes must be reference or any" >&2; exit 2 ;; esac

md5_list() { echo "flux-1-${1//_/-}.md5"; }  # cc12m_preprocessed -> flux-1-cc12m-preprocessed.md5
structure=("$python" -m flux.data.verify --dataset-dir "$data_dir" --expect-train "$expect_train"
  --expect-validation "$expect_validation" --expect-shapes "$expect_shapes" --decode-sample "$decode_sample")

if [[ $dry_run -eq 1 ]]; then
  if [[ $skip_md5 -eq 0 ]]; then
    for part in $parts; do
      echo "dry run: (cd $data_dir/$part && md5sum --check --quiet $(md5_list "$part"))  # R2's own metadata/ entries skipped"
    done
  fi
  echo "dry run: cd $root && ${structure[*]}"
  exit 0
fi

if [[ ! -d "$data_dir" ]]; then
  echo "error: dataset directory not found: $data_dir (download it with flux/download_dataset.sh)" >&2
  exit 1
fi
failed=0
if [[ $skip_md5 -eq 0 ]]; then
  for part in $parts; do
    list="$data_dir/$part/$(md5_list "$part")"
    if [[ ! -f "$list" ]]; then
      echo "FAILED: $part: md5 list $list is missing (re-run flux/download_dataset.sh, or pass --skip-md5)" >&2
      failed=1
      continue
    fi
    # The R2 lists also name the bucket's own metadata/ files; they are not part of the dataset.
    if (cd "$data_dir/$part" && grep -v '^[0-9a-f]\{32\}[[:space:]]\+\(\./\)\?metadata/' "$(basename "$list")" \
        | md5sum --check --quiet -); then
      echo "OK: $part: md5 of every file in $(basename "$list")"
    else
      echo "FAILED: $part: md5 check failed in $data_dir/$part (files named above)" >&2
      failed=1
    fi
  done
fi
cd "$root"
"${structure[@]}" || failed=1
if [[ $failed -ne 0 ]]; then
  echo "verify failed: $data_dir" >&2
  exit 1
fi
echo "verified $data_dir"
