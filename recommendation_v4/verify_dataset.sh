#!/usr/bin/env bash
# Verify a Yambda dataset directory in the DLRMv4 reference's tree (recommendation_v4/data/layout.py),
# checking what it holds as the reference's verify_dataset.sh does (mlcommons/training PR #889): the
# raw download, the preprocessed files, the flat-event cache, or the prepared download (a cache, the
# popularity and the mappings, no parquet).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/dataset_scripts.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") --dataset-dir DIR [--size SIZE] [--reference-checksums cache|all]
                         [--checksums FILE] [--dry-run]

  --dataset-dir DIR   the dataset directory (the reference's \$DLRM_DATA_PATH)
  --size SIZE         50m, 500m, 5b or a synthetic size (default: the one DIR holds)
  --reference-checksums cache|all
                      also check against the reference's published checksums (5b only):
                      cache: processed_5b/hstu_cache_L4086/ with sha256sums_yambda_5b_cache.txt
                        (a cache built here from the reference's sessions matches too);
                      all: as the reference's script, also md5sums_yambda_5b_processed.txt for the
                        mappings, item_popularity.npy and, where train_sessions.parquet is present,
                        the preprocessing outputs (the reference's own bytes: its prepared download
                        or a copy of its preprocessing)
  --checksums FILE    your own md5sum or sha256sum list, paths relative to the dataset directory
  --dry-run           print every command instead of running it
What is checked, where present: shared_metadata/ (required: the trainer sizes its item tables from
the mappings); raw/<size>/multi_event.parquet's schema; in processed_<size>/, a trainable source (a
complete hstu_cache_L<L>/ or train_sessions.parquet), every file readable, item_popularity.npy as
long as the mappings' vocabulary, each complete cache's arrays as long as its store_meta.json says.
Environment: PYTHON selects the interpreter (default: <repo>/.venv/bin/python, else python3).
USAGE
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$root/recommendation_v4"
python="$(repo_python "$root")"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"  # the repository's modules, from any directory
dataset_dir=""
size=""
reference=""
checksums=""
dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dataset-dir) need_value "$@"; dataset_dir="$2"; shift 2 ;;
    --size) need_value "$@"; size="$2"; shift 2 ;;
    --reference-checksums) need_value "$@"; reference="$2"; shift 2 ;;
    --checksums) need_value "$@"; checksums="$2"; shift 2 ;;
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
case "$reference" in
  ""|cache|all) ;;
  *) echo "error: --reference-checksums must be cache or all, got '$reference'" >&2; exit 2 ;;
esac

how_to_get="download it with recommendation_v4/download_dataset.sh --dataset-dir $dataset_dir or generate \
a synthetic one with python -m recommendation_v4.data.synthetic --out $dataset_dir"
if [[ -z "$size" ]]; then  # the one size the directory holds (layout.find_size)
  found="$(
    shopt -s nullglob
    for path in "$dataset_dir"/processed_*/; do path="${path%/}"; echo "${path##*/processed_}"; done
    for path in "$dataset_dir"/raw/*/multi_event.parquet; do path="${path%/*}"; echo "${path##*/}"; done
  )"
  found="$(sort -u <<<"$found" | grep -v '^$' || true)"
  if [[ -z "$found" ]]; then
    echo "error: no Yambda data in $dataset_dir (no raw/<size>/multi_event.parquet, no processed_<size>/): $how_to_get" >&2
    exit 1
  fi
  if [[ "$(wc -l <<<"$found")" -ne 1 ]]; then
    echo "error: $dataset_dir holds more than one size ($(tr '\n' ' ' <<<"$found")); name one with --size" >&2
    exit 2
  fi
  size="$found"
fi
if [[ ! "$size" =~ ^[a-z0-9_]+$ ]]; then
  echo "error: bad --size '$size'" >&2
  exit 2
fi
if [[ -n "$reference" && "$size" != 5b ]]; then
  echo "error: the reference publishes checksums of Yambda-5b only (--size 5b), not of '$size'" >&2
  exit 2
fi
raw_events="$dataset_dir/raw/$size/multi_event.parquet"
metadata_dir="$dataset_dir/shared_metadata"
processed_dir="$dataset_dir/processed_$size"
present() { [[ $dry_run -eq 1 || -e "$1" ]]; }  # a dry run prints the checks of a complete tree

# --- always required: the two item mappings -------------------------------------------------
for name in artist_item_mapping.parquet album_item_mapping.parquet; do
  if ! present "$metadata_dir/$name"; then
    echo "error: missing $metadata_dir/$name (the trainer sizes its item tables from it): $how_to_get" >&2
    exit 1
  fi
done

# --- the raw event log, where present: its schema (footers, and the first rows decoded) ---------
if present "$raw_events"; then
  run "$python" -m recommendation_v4.data.schema --dataset-dir "$dataset_dir" --size "$size"
else
  echo "note: no $raw_events (a prepared download): nothing to preprocess from"
fi

# --- processed_<size>/, where present: at least one trainable source ---------------------------
have_cache=0
have_sessions=0
if present "$processed_dir"; then
  compgen -G "$processed_dir/hstu_cache_L*/_READY" >/dev/null && have_cache=1
  [[ -s "$processed_dir/train_sessions.parquet" ]] && have_sessions=1
  if [[ $dry_run -eq 0 && $have_cache -eq 0 && $have_sessions -eq 0 ]]; then
    echo "error: $processed_dir holds neither a complete hstu_cache_L<L>/ (_READY) nor train_sessions.parquet," \
      "one of which the trainer needs (the cache is built from the parquet); preprocess again with" \
      "python -m recommendation_v4.data.preprocess --dataset-dir $dataset_dir --size $size --force" >&2
    exit 1
  fi
elif present "$raw_events"; then
  echo "note: no $processed_dir yet: the trainer preprocesses the raw files on first use (ahead of time:" \
    "python -m recommendation_v4.data.preprocess --dataset-dir $dataset_dir --size $size)"
else
  echo "error: no Yambda data in $dataset_dir (no $raw_events, no $processed_dir): $how_to_get" >&2
  exit 1
fi

# --- the mappings and processed_<size>/ through the trainer's own readers -----------------------
read -r -d '' structure <<'PY' || true
import json, pathlib, sys

import numpy as np

from recommendation_v4.data import cache_format as cf
from recommendation_v4.data import layout, schema
from recommendation_v4.data.item_maps import ItemMaps

dataset_dir, size = pathlib.Path(sys.argv[1]), sys.argv[2]
processed = pathlib.Path(layout.processed_dir(dataset_dir, size))
metadata = pathlib.Path(layout.shared_metadata_dir(dataset_dir))
try:
    for name in layout.MAPPING_FILES:
        schema.validate_parquet_file(metadata / name, schema.RAW_FILE_COLUMNS[name])
    items = ItemMaps.load(dataset_dir, processed).num_items  # refuses an item_popularity.npy of another length
    popularity = (processed / layout.ITEM_POPULARITY_FILE).is_file()
    print(f"ok {metadata}: {items:,} items" + (f", as many as {layout.ITEM_POPULARITY_FILE}" if popularity else ""))
    rows = {}
    for name in (layout.TRAIN_SESSIONS_FILE, layout.TEST_EVENTS_FILE, layout.SESSION_INDEX_FILE):
        if (processed / name).is_file():
            rows[name] = schema.validate_parquet_file(processed / name, ()).num_rows
            print(f"ok {processed / name}: {rows[name]:,} rows")
    if (processed / layout.SPLIT_META_FILE).is_file():
        meta = json.loads((processed / layout.SPLIT_META_FILE).read_text())
        for name, key in ((layout.TRAIN_SESSIONS_FILE, "num_sessions"), (layout.TEST_EVENTS_FILE, "num_test_events"),
                          (layout.SESSION_INDEX_FILE, "num_users")):
            if name in rows and rows[name] != meta[key]:
                raise schema.DatasetError(f"{processed / name} has {rows[name]:,} rows, {layout.SPLIT_META_FILE} "
                                          f"says {key} {meta[key]:,}: they come from different preprocessing runs")
        print(f"ok {processed / layout.SPLIT_META_FILE}: {meta['num_train_events']:,} train events")
    for cache_dir in sorted(processed.glob("hstu_cache_L*")):
        if not cf.is_ready(cache_dir):
            print(f"note: {cache_dir} is incomplete (no {cf.READY_FILE}): a trainer builds it again")
            continue
        cache = cf.FlatEventCache.open(cache_dir)  # every array's dtype and length against store_meta.json
        anchors = []
        for path in sorted(cache_dir.glob("positions_L*.npy")):
            positions = np.load(path, mmap_mode="r")
            if positions.dtype != np.int64 or positions.ndim != 1 or (positions.size and positions[-1] >= cache.total_events):
                raise schema.DatasetError(f"{path}: not int64 anchor positions of the cache's {cache.total_events:,} events")
            stamps = path.with_name(path.name.replace("positions_", "anchor_ts_", 1))
            if stamps.is_file() and np.load(stamps, mmap_mode="r").shape != positions.shape:
                raise schema.DatasetError(f"{stamps}: not one timestamp per anchor of {path.name}")
            anchors.append(f"{path.stem.removeprefix('positions_')} {positions.size:,}")
        print(f"ok {cache_dir}: {cache.total_events:,} events of {cache.num_users:,} users; anchors "
              + (", ".join(anchors) or "none yet"))
except (schema.DatasetError, OSError, ValueError, KeyError) as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(1)
PY
if [[ $dry_run -eq 1 ]]; then
  echo "$(printf '%q' "$python") - $(printf '%q' "$dataset_dir") $size  # the trainer's readers over shared_metadata/ and processed_$size/"
else
  "$python" - "$dataset_dir" "$size" <<<"$structure"
fi

# --- checksums --------------------------------------------------------------------------------
if [[ $dry_run -eq 0 ]]; then
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
fi

# check_list LIST DIR LABEL: md5sum or sha256sum (by the hash length) of LIST's lines, inside DIR.
check_list() {
  local list="$1" dir="$2" label="$3" tool=sha256sum
  [[ -r "$list" && "$(head -c 33 "$list")" =~ ^[0-9a-f]{32}[[:space:]] ]] && tool=md5sum
  if [[ $dry_run -eq 1 ]]; then
    echo "(cd $(printf '%q' "$dir") && $tool --check --strict $(printf '%q' "$list"))  # $label"
    return
  fi
  echo "$label: checking $(wc -l <"$list") file(s) with $tool"
  (cd "$dir" && "$tool" --check --strict "$list")
}

# reference_subset FILE PATTERN LABEL: the lines of a published list whose paths match PATTERN,
# checked inside processed_5b/ (the reference's verify_subset)
reference_subset() {
  if [[ $dry_run -eq 1 ]]; then
    local tool=sha256sum
    [[ "$1" == *md5sums* ]] && tool=md5sum
    echo "grep -E '^[0-9a-f]{32,64}[[:space:]]' $(printf '%q' "$1") | grep -E $(printf '%q' "$2")" \
      "| (cd $(printf '%q' "$processed_dir") && $tool --check --strict -)  # $3"
    return
  fi
  local subset="$scratch/subset.$RANDOM"
  grep -E '^[0-9a-f]{32,64}[[:space:]]' "$1" | grep -E "$2" >"$subset" || true
  if [[ ! -s "$subset" ]]; then
    echo "error: no checksums match $2 in $1" >&2
    exit 1
  fi
  check_list "$subset" "$processed_dir" "$3"
}

if [[ -n "$reference" ]]; then
  cache_ready=0
  present "$processed_dir/hstu_cache_L4086/_READY" && cache_ready=1
  if [[ "$reference" == all ]]; then
    reference_subset "$here/md5sums_yambda_5b_processed.txt" 'shared_metadata/' "item mappings"
    if present "$processed_dir/item_popularity.npy"; then
      reference_subset "$here/md5sums_yambda_5b_processed.txt" 'item_popularity\.npy' "item popularity"
    fi
    if present "$processed_dir/train_sessions.parquet"; then
      reference_subset "$here/md5sums_yambda_5b_processed.txt" '^[0-9a-f]{32}[[:space:]]+[a-z_]+\.(parquet|json)$' \
        "preprocessing outputs"
    fi
  elif [[ $cache_ready -eq 0 ]]; then
    echo "error: no complete $processed_dir/hstu_cache_L4086/ to check against the reference's checksums" >&2
    exit 1
  fi
  if [[ $cache_ready -eq 1 ]]; then
    reference_subset "$here/sha256sums_yambda_5b_cache.txt" 'hstu_cache_L4086/' "flat-event cache"
  else
    echo "note: no complete hstu_cache_L4086/: a trainer builds it on first use"
  fi
fi

if [[ -n "$checksums" ]]; then
  if [[ $dry_run -eq 1 ]]; then
    check_list "$checksums" "$dataset_dir" "$checksums (its lines but comments)"
  elif [[ ! -f "$checksums" ]]; then
    echo "error: no checksum file $checksums" >&2
    exit 2
  else
    grep -Ev '^[[:space:]]*(#|$)' "$checksums" >"$scratch/own" || true
    check_list "$scratch/own" "$dataset_dir" "$checksums"
  fi
fi

if [[ $dry_run -eq 0 ]]; then
  if [[ $have_cache -eq 1 ]]; then
    what="with a flat-event cache"
  elif [[ $have_sessions -eq 1 ]]; then
    what="preprocessed, the flat-event cache not built yet"
  else
    what="raw files, not preprocessed yet"
  fi
  echo "verified $dataset_dir ($size: $what)"
fi
