"""How an `app_state` becomes DCP tensors plus a JSON layout, and back (README.md beside this file).

- DCP receives tensors only; every other leaf and the nesting go into a per-rank JSON layout, so
  loading never unpickles arbitrary objects.
- Nested dicts load in place; objects with `state_dict()` get back their exact saved structure.
- `RankLocal` marks an entry whose tensors differ per rank.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

JsonNode = dict[str, Any]


@dataclass(frozen=True)
class RankLocal:
    """An ``app_state`` entry whose tensors differ per rank; saved once per rank."""

    state: Any


def is_stateful(obj: Any) -> bool:
    return (
        not isinstance(obj, Mapping)
        and callable(getattr(obj, "state_dict", None))
        and callable(getattr(obj, "load_state_dict", None))
    )


def entry_prefix(key: str, *, rank_local: bool, rank: int) -> str:
    return f"{key}.__rank{rank}__" if rank_local else key


def encode_tree(obj: Any, *, fqn: str, tensors: dict[str, torch.Tensor]) -> JsonNode:
    """Layout node for ``obj``; its tensors are added to ``tensors`` under dotted names."""
    if isinstance(obj, torch.Tensor):
        if fqn in tensors:
            raise ValueError(
                f"checkpoint name clash at {fqn!r}: two app_state paths flatten to the same "
                "dotted name (a key that contains '.')"
            )
        tensors[fqn] = obj
        return {"tensor": fqn}
    if isinstance(obj, Mapping):
        items = []
        for key, value in obj.items():
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise TypeError(f"app_state key {key!r} under {fqn!r} must be a str or an int")
            items.append([key, encode_tree(value, fqn=f"{fqn}.{key}", tensors=tensors)])
        return {"dict": items}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [encode_tree(v, fqn=f"{fqn}.{i}", tensors=tensors) for i, v in enumerate(obj)]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    raise TypeError(
        f"app_state value at {fqn!r} is a {type(obj).__name__}: only tensors, dicts, lists, "
        "tuples, None, bool, int, float and str can be checkpointed"
    )


def decode_tree(node: JsonNode, tensor_for: Callable[[str], torch.Tensor]) -> Any:
    """Inverse of ``encode_tree``; ``tensor_for(fqn)`` supplies the loaded tensors."""
    if "tensor" in node:
        return tensor_for(node["tensor"])
    if "dict" in node:
        return {key: decode_tree(child, tensor_for) for key, child in node["dict"]}
    if "list" in node:
        return [decode_tree(child, tensor_for) for child in node["list"]]
    if "tuple" in node:
        return tuple(decode_tree(child, tensor_for) for child in node["tuple"])
    if "value" in node:
        return node["value"]
    raise ValueError(f"checkpoint layout node has no known kind: {sorted(node)}")


def tensor_names(node: JsonNode) -> list[str]:
    """Every tensor name referenced by a layout node."""
    if "tensor" in node:
        return [node["tensor"]]
    children = node.get("dict")
    if children is not None:
        return [name for _, child in children for name in tensor_names(child)]
    for kind in ("list", "tuple"):
        if kind in node:
            return [name for child in node[kind] for name in tensor_names(child)]
    return []


def merge_into(target: Any, loaded: Any, *, where: str) -> None:
    """Write ``loaded`` into the caller's nested containers, keeping their identity."""
    if isinstance(target, dict) and isinstance(loaded, dict):
        for key, value in loaded.items():
            current = target.get(key)
            if isinstance(current, (dict, list)) and type(current) is type(value):
                merge_into(current, value, where=f"{where}.{key}")
            else:
                target[key] = value
        return
    if isinstance(target, list) and isinstance(loaded, list) and len(target) == len(loaded):
        for index, value in enumerate(loaded):
            if isinstance(target[index], (dict, list)) and type(target[index]) is type(value):
                merge_into(target[index], value, where=f"{where}.{index}")
            else:
                target[index] = value
        return
    raise ValueError(
        f"checkpoint structure at {where!r} ({type(loaded).__name__}) does not match the "
        f"live state ({type(target).__name__})"
    )


def allocate_like_saved(metadata: Metadata, fqn: str) -> torch.Tensor:
    """A CPU tensor with the saved shape and dtype, for DCP to load ``fqn`` into."""
    entry = metadata.state_dict_metadata.get(fqn)
    if not isinstance(entry, TensorStorageMetadata):
        raise ValueError(f"checkpoint has no tensor named {fqn!r}")
    return torch.empty(entry.size, dtype=entry.properties.dtype)


def encode_app_state(app_state: Mapping[str, Any], *, rank: int) -> tuple[dict[str, torch.Tensor], dict]:
    """(flat tensors for DCP, JSON layout of this rank) for a whole ``app_state``."""
    tensors: dict[str, torch.Tensor] = {}
    layout: dict[str, Any] = {}
    for key, entry in app_state.items():
        if not isinstance(key, str) or not key or "." in key:
            raise ValueError(f"app_state key {key!r} must be a non-empty str without '.'")
        rank_local = isinstance(entry, RankLocal)
        value = entry.state if rank_local else entry
        stateful = is_stateful(value)
        if not stateful and not isinstance(value, Mapping):
            raise TypeError(
                f"app_state[{key!r}] is a {type(value).__name__}: pass a dict of tensors or an "
                "object with state_dict()/load_state_dict()"
            )
        tree = value.state_dict() if stateful else value
        prefix = entry_prefix(key, rank_local=rank_local, rank=rank)
        layout[key] = {
            "stateful": stateful,
            "rank_local": rank_local,
            "tree": encode_tree(tree, fqn=prefix, tensors=tensors),
        }
    return tensors, layout


@dataclass
class LoadPlan:
    """What DCP loads into (``flat``) and what to run once it has (``finish``)."""

    flat: dict[str, torch.Tensor]
    finishers: list[Callable[[], None]]

    def finish(self) -> None:
        for finisher in self.finishers:
            finisher()


def plan_load(
    app_state: Mapping[str, Any],
    *,
    layout: Mapping[str, Any],
    metadata: Metadata,
    rank: int,
    same_world_size: bool,
    where: Path,
) -> LoadPlan:
    """Match the live ``app_state`` against a saved layout; raises on any mismatch."""
    plan = LoadPlan(flat={}, finishers=[])
    for key, entry in app_state.items():
        if key not in layout:
            raise ValueError(f"{where} has no app_state entry {key!r} (it has {sorted(layout)})")
        saved = layout[key]
        rank_local = isinstance(entry, RankLocal)
        if saved["rank_local"] != rank_local:
            raise ValueError(f"{where}: app_state[{key!r}] RankLocal wrapping differs from the saved one")
        if rank_local and not same_world_size:
            raise ValueError(f"{where}: RankLocal app_state[{key!r}] cannot be loaded by a different world size")
        value = entry.state if rank_local else entry
        stateful = is_stateful(value)
        live_tensors: dict[str, torch.Tensor] = {}
        encode_tree(
            value.state_dict() if stateful else value,
            fqn=entry_prefix(key, rank_local=rank_local, rank=rank),
            tensors=live_tensors,
        )
        # A Stateful entry loads what was saved; a dict entry loads what the caller passes.
        wanted = tensor_names(saved["tree"]) if stateful else list(live_tensors)
        absent = [name for name in wanted if name not in metadata.state_dict_metadata]
        if absent:
            raise ValueError(f"{where} lacks tensors {_few(absent)}")
        unused = [name for name in tensor_names(saved["tree"]) if name not in live_tensors]
        if unused and not stateful:
            warnings.warn(f"{where}: app_state[{key!r}] has no place for saved tensors {_few(unused)}; not loaded")
        for name in wanted:
            plan.flat[name] = live_tensors[name] if name in live_tensors else allocate_like_saved(metadata, name)
        plan.finishers.append(_finisher(key, saved["tree"], value, stateful, plan.flat))
    return plan


def _few(names: list[str]) -> str:
    return f"{names[:5]}{' ...' if len(names) > 5 else ''}"


_SKIPPED = object()


def _drop_skipped(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _drop_skipped(v) for k, v in tree.items() if v is not _SKIPPED}
    if isinstance(tree, (list, tuple)):
        if any(v is _SKIPPED for v in tree):
            raise ValueError("a saved list holds tensors the live state does not have")
        return type(tree)(_drop_skipped(v) for v in tree)
    return tree


def _finisher(key: str, saved_tree: JsonNode, value: Any, stateful: bool, flat: dict[str, torch.Tensor]):
    def finish() -> None:
        if stateful:
            value.load_state_dict(decode_tree(saved_tree, flat.__getitem__))
            return
        # Saved tensors the caller did not pass are skipped; non-tensor leaves are copied.
        loaded = decode_tree(saved_tree, lambda name: flat.get(name, _SKIPPED))
        merge_into(value, _drop_skipped(loaded), where=key)

    return finish
