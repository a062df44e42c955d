"""The Hugging Face `Dataset.save_to_disk` directory around the shards, read and written.

    <split_dir>/data-00000-of-00003.arrow   Arrow IPC *stream* files (no footer)
    <split_dir>/data-00001-of-00003.arrow
    <split_dir>/data-00002-of-00003.arrow
    <split_dir>/dataset_info.json           {"citation", "description", "features", "homepage", "license"}
    <split_dir>/state.json                  {"_data_files": [{"filename": ...}, ...], "_fingerprint", ...}

The JSON written here has the fields `datasets` 5.x writes for an in-memory dataset, so
`datasets.load_from_disk` opens our directories; `state.json`'s `_data_files` is the shard list
`load_from_disk` trusts, so the reader trusts it too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from common.object_store.location import Location, ObjectPath
from flux.data.schema import FluxDataError

DATASET_INFO_FILE = "dataset_info.json"
STATE_FILE = "state.json"


def shard_file_name(index: int, num_shards: int) -> str:
    return f"data-{index:05d}-of-{num_shards:05d}.arrow"


def shard_row_counts(num_rows: int, num_shards: int) -> list[int]:
    """Rows per shard when `num_rows` are cut into `num_shards` contiguous pieces.

    `datasets` (`Dataset.shard(contiguous=True)`) gives the first `num_rows % num_shards`
    shards one extra row; 1,099,776 rows in 4,762 shards gives 231 and 230.
    """
    if num_shards < 1 or num_rows < num_shards:
        raise ValueError(f"cannot cut {num_rows} rows into {num_shards} non-empty shards")
    base, extra = divmod(num_rows, num_shards)
    return [base + (1 if index < extra else 0) for index in range(num_shards)]


def _write_json_atomically(path: Path, content: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(content, indent=2, sort_keys=True))
    os.replace(temporary, path)


def write_dataset_info(split_dir: Path, *, features: dict[str, Any], num_rows: int | None = None) -> None:
    info: dict[str, Any] = {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}
    if num_rows is not None:
        # What `datasets` records for a prepared split; load_from_disk reads it as the split size.
        info["splits"] = {"train": {"name": "train", "num_bytes": 0, "num_examples": num_rows, "dataset_name": None}}
    _write_json_atomically(Path(split_dir) / DATASET_INFO_FILE, info)


def write_state(split_dir: Path, *, shard_names: list[str], fingerprint: str) -> None:
    state = {
        "_data_files": [{"filename": name} for name in shard_names],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    _write_json_atomically(Path(split_dir) / STATE_FILE, state)


def _read_json(path: Location) -> dict[str, Any]:
    if not path.is_file():
        raise FluxDataError(
            f"{path} is missing: {path.parent} is not a `datasets` save_to_disk directory "
            "(expected data-*.arrow shards, dataset_info.json and state.json)"
        )
    try:
        content = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise FluxDataError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(content, dict):
        raise FluxDataError(f"{path}: expected a JSON object, got {type(content).__name__}")
    return content


def read_shard_paths(split_dir: Location) -> list[Path] | list[ObjectPath]:
    """The shard files `state.json` lists, in order; FluxDataError if any is absent. Under an s3://
    prefix, one listing of the prefix finds them all (a HEAD per shard would be thousands)."""
    present = None
    if isinstance(split_dir, ObjectPath):
        present = {path.name for path, _ in split_dir.list()}
        if not present:
            raise FluxDataError(f"{split_dir}: no objects under this prefix at {split_dir.endpoint.url}")
    elif not split_dir.is_dir():
        raise FluxDataError(f"{split_dir}: dataset directory not found")
    _read_json(split_dir / DATASET_INFO_FILE)
    state_path = split_dir / STATE_FILE
    entries = _read_json(state_path).get("_data_files")
    if not isinstance(entries, list) or not entries:
        raise FluxDataError(f"{state_path}: field '_data_files' must be a non-empty list of {{'filename': ...}}")
    paths = []
    for entry in entries:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or os.sep in name:
            raise FluxDataError(f"{state_path}: bad '_data_files' entry {entry!r}")
        path = split_dir / name
        if not (name in present if present is not None else path.is_file()):
            raise FluxDataError(f"{path}: shard listed in {state_path} is missing")
        paths.append(path)
    return paths


def declared_num_rows(split_dir: Location) -> int | None:
    """The row count `dataset_info.json` declares (summed over its splits), if it declares one."""
    splits = _read_json(split_dir / DATASET_INFO_FILE).get("splits")
    if not isinstance(splits, dict) or not splits:
        return None
    counts = [s.get("num_examples") for s in splits.values() if isinstance(s, dict)]
    if not counts or not all(isinstance(c, int) for c in counts):
        return None
    return sum(counts)
