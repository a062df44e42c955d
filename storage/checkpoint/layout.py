"""A checkpoint directory's layout, to compare an emulated save with a real one: its files and their
sizes, and DCP's `.metadata` without what differs between any two saves (the checkpoint id, the
save id). Tensor bytes are not part of it; neither are the rank files' sizes (their RNG states are
JSON lists whose digits vary from save to save)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.checkpoint.files import read_dcp_metadata

_VARYING_SIZES = ("rank", "metadata.json", "COMPLETE.json", ".metadata")


def layout(checkpoint: Path) -> dict[str, Any]:
    files = sorted(p.name for p in checkpoint.iterdir() if p.is_file())
    sizes = {name: (checkpoint / name).stat().st_size for name in files if not name.startswith(_VARYING_SIZES)}
    metadata = read_dcp_metadata(checkpoint)
    tensors = {fqn: (tuple(entry.size), str(entry.properties.dtype), entry.properties.requires_grad,
                     sorted((tuple(c.offsets), tuple(c.sizes)) for c in entry.chunks))
               for fqn, entry in metadata.state_dict_metadata.items()}
    storage = {(index.fqn, tuple(index.offset)): (info.relative_path, info.offset, info.length)
               for index, info in metadata.storage_data.items()}
    return {"files": files, "sizes": sizes, "tensors": tensors, "storage": storage,
            "planner_data": metadata.planner_data}


def differences(real: dict[str, Any], emulated: dict[str, Any], *, limit: int = 10) -> list[str]:
    """What differs, one line each (at most `limit` per part); empty when the layouts are equal."""
    found: list[str] = []
    for part in ("files", "sizes", "tensors", "storage", "planner_data"):
        a, b = real[part], emulated[part]
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(set(a) | set(b), key=str)
            lines = [f"{part}[{key}]: real {a.get(key)} emulated {b.get(key)}" for key in keys if a.get(key) != b.get(key)]
            found += lines[:limit] + ([f"{part}: {len(lines) - limit} more"] if len(lines) > limit else [])
        else:
            found.append(f"{part}: real {a} emulated {b}")
    return found
