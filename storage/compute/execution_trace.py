"""Collectives as a PyTorch execution trace recorded them (common.TraceConfig.execution_trace).

An execution trace (ExecutionTraceObserver, the input of MLCommons Chakra) keeps every operator
with its tensors as [tensor id, storage id, offset, elements, element size, device]. The c10d
operators among them are the collectives a rank called, with their message sizes; this reads
them back, per recorded step (`ProfilerStep#<n>` spans), as storage.compute.collectives records.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from storage.compute.collectives import Collective

# c10d operator -> (kind, which tensor argument is the input, which the output)
_OPERATORS = {
    "c10d::allreduce_": ("all_reduce", 0, 0),
    "c10d::allreduce_coalesced_": ("all_reduce", 0, 0),
    "c10d::_allgather_base_": ("all_gather", 1, 0),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", 1, 0),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", 1, 0),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1, 0),
    "c10d::alltoall_base_": ("all_to_all", 1, 0),
    "c10d::broadcast_": ("broadcast", 0, 0),
}


class ExecutionTraceError(ValueError):
    """The file is not an execution trace this reader understands (names the file)."""


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as handle:
            trace = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise ExecutionTraceError(f"{path}: not a readable execution trace ({error})") from error
    if not isinstance(trace, dict) or not isinstance(trace.get("nodes"), list):
        raise ExecutionTraceError(f"{path}: no 'nodes' list (not a PyTorch execution trace)")
    return trace


def _tensor_bytes(value: Any, type_name: str) -> int:
    """Bytes of a Tensor or a list of Tensors argument ([id, storage, offset, numel, itemsize, device])."""
    if type_name.startswith("Tensor("):
        return int(value[3]) * int(value[4])
    if type_name.startswith("GenericList[Tensor"):
        return sum(int(v[3]) * int(v[4]) for v in value)
    return 0


def _tensor_arguments(node: dict) -> list[int]:
    inputs = node.get("inputs", {})
    return [_tensor_bytes(v, t) for v, t in zip(inputs.get("values", []), inputs.get("types", []))
            if t.startswith("Tensor(") or t.startswith("GenericList[Tensor")]


def _step_of(node: dict, nodes: dict[int, dict]) -> int | None:
    seen = set()
    while True:
        if node["name"].startswith("ProfilerStep#"):
            return int(node["name"].split("#", 1)[1])
        parent = node.get("ctrl_deps")
        if parent not in nodes or parent in seen:
            return None
        seen.add(parent)
        node = nodes[parent]


def _purpose(node: dict, nodes: dict[int, dict]) -> str:
    parent = nodes.get(node.get("ctrl_deps"))
    return parent["name"] if parent is not None else ""


def collectives_by_step(trace: dict[str, Any], *, group_size: int) -> dict[int, list[Collective]]:
    """Step -> its collectives, each as one call in a group of `group_size` (the trace does not name
    the group: pass the world size when every collective spans it)."""
    nodes = {n["id"]: n for n in trace["nodes"]}
    steps: dict[int, list[Collective]] = {}
    for node in trace["nodes"]:
        known = _OPERATORS.get(node["name"])
        if known is None:
            continue
        kind, arg_in, arg_out = known
        step = _step_of(node, nodes)
        if step is None:
            continue
        sizes = _tensor_arguments(node)
        steps.setdefault(step, []).append(Collective(kind=kind, in_bytes=sizes[arg_in], out_bytes=sizes[arg_out],
                                                     group_size=group_size, purpose=_purpose(node, nodes)))
    return steps
