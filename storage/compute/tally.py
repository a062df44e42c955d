"""FLOPs and tensor bytes of every operator a step runs, by phase, module and operator kind.

A TorchDispatchMode sees each aten operator after autograd has split the step into its forward
and backward operators, with real, fake or meta tensors alike, so the counts need no
accelerator and no real memory when the model is too large. Matmul, convolution and attention
FLOPs come from torch.utils.flop_counter's formulas (the ones FlopCounterMode and torchtitan's
MFU rely on), plus the CPU flash-attention operators that registry leaves out. Everything else
that makes tensors is counted as one FLOP per element it writes (pointwise) or reads
(reductions, norms): an estimate, labelled "other", which the roofline's compute bound hardly
feels. Bytes are each operator's tensor inputs plus outputs: the traffic of eager execution
with no fusion, not a lower bound.

Kinds: matmul (mm, addmm, scaled mm), attention (SDPA, flex attention, and the batched matmuls
bmm/baddbmm, which in these models only attention uses), convolution, embedding (lookups: no
FLOPs, only bytes), other.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any

import torch
import torch.utils.flop_counter as flop_counter
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.module_tracker import ModuleTracker

KINDS = ("matmul", "attention", "convolution", "embedding", "other")

aten = torch.ops.aten


def _cpu_flash_forward(query, key, value, *args, out_val=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query.shape, key.shape, value.shape)


def _cpu_flash_backward(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


# The registry's formulas work on shapes (their shape_wrapper converts the tensors).
_EXTRA_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_forward,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward,
}
_ATTENTION_NAMES = ("attention", "bmm", "baddbmm", "flex_attention")
_EMBEDDING_NAMES = ("embedding", "embedding_bag", "_embedding_bag", "embedding_dense_backward",
                    "embedding_backward", "_embedding_bag_backward", "_embedding_bag_dense_backward")
_REDUCING = re.compile(r"(sum|mean|norm|amax|amin|max|min|var|std|softmax|prod|logsumexp|cumsum)")


def operator_kind(func: Any) -> str:
    name = func._overloadpacket.__name__
    namespace = func.namespace
    if namespace == "fbgemm" or name in _EMBEDDING_NAMES:
        return "embedding"
    if "conv" in name:
        return "convolution"
    if any(part in name for part in _ATTENTION_NAMES):
        return "attention"
    if name in ("mm", "addmm", "_scaled_mm"):
        return "matmul"
    return "other"


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


def _numel(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() for t in tensors)


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def operator_flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
    packet = func._overloadpacket
    formula = flop_counter.flop_registry.get(packet) or _EXTRA_FORMULAS.get(packet)
    if formula is not None:
        return int(formula(*args, **kwargs, out_val=out))
    if operator_kind(func) == "embedding" or func.is_view:
        return 0
    outputs = _tensors(out)
    if not outputs or not any(t.is_floating_point() for t in outputs):
        return 0
    if torch.Tag.pointwise in func.tags:
        return _numel(outputs)
    if _REDUCING.search(packet.__name__):
        return _numel([t for t in _tensors((args, kwargs)) if t.is_floating_point()])
    return 0  # copies, reshapes, indexing, fills: data movement, counted in bytes only


def module_group(parents: set[str]) -> str:
    """The top-level child module an operator runs under, its block index folded ("double_blocks")."""
    deepest = max(parents, key=lambda p: (p.count("."), p)) if parents else "Global"
    parts = deepest.split(".")
    if len(parts) < 2:
        return "(top level)"
    return parts[1] if not parts[1].isdigit() else parts[0]


@dataclasses.dataclass
class PhaseCounts:
    flops: dict[str, dict[str, int]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(lambda: collections.defaultdict(int)))  # module -> kind -> flops
    bytes_by_kind: dict[str, int] = dataclasses.field(default_factory=lambda: collections.defaultdict(int))
    operators: int = 0

    def total(self) -> int:
        return sum(sum(kinds.values()) for kinds in self.flops.values())

    def by_kind(self) -> dict[str, int]:
        sums = {kind: 0 for kind in KINDS}
        for kinds in self.flops.values():
            for kind, value in kinds.items():
                sums[kind] += value
        return sums

    def by_module(self) -> dict[str, int]:
        return {module: sum(kinds.values()) for module, kinds in sorted(self.flops.items())}

    def as_json(self) -> dict[str, Any]:
        return {"flops": self.total(), "flops_by_kind": self.by_kind(), "flops_by_module": self.by_module(),
                "tensor_bytes_by_kind": {kind: int(self.bytes_by_kind.get(kind, 0)) for kind in KINDS},
                "operators": self.operators}


class OpTally(TorchDispatchMode):
    """Counts what runs while it is entered, into `phases[phase]`; switch phases with `phase(name)`."""

    def __init__(self) -> None:
        super().__init__()
        self.phases: dict[str, PhaseCounts] = {}
        self._phase = "forward"
        self._modules = ModuleTracker()

    def phase(self, name: str) -> "_PhaseSwitch":
        return _PhaseSwitch(self, name)

    def __enter__(self):
        self._modules.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self._modules.__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        counts = self.phases.setdefault(self._phase, PhaseCounts())
        kind = operator_kind(func)
        counts.flops[module_group(set(self._modules.parents))][kind] += operator_flops(func, args, kwargs, out)
        if not func.is_view:
            counts.bytes_by_kind[kind] += _nbytes(_tensors((args, kwargs))) + _nbytes(_tensors(out))
        counts.operators += 1
        return out


class _PhaseSwitch:
    def __init__(self, tally: OpTally, name: str) -> None:
        self.tally, self.name, self.before = tally, name, tally._phase

    def __enter__(self) -> OpTally:
        self.before, self.tally._phase = self.tally._phase, self.name
        return self.tally

    def __exit__(self, *exc) -> None:
        self.tally._phase = self.before
