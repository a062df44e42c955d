"""Device facts and the architecture-specific dispatch rules of the Triton kernels.

Every rule takes a `DeviceFacts`, so tests can fake any GPU. Kept free of `import triton`
(apart from a lazy probe), so it can be imported and tested without the interpreter.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Optional

import torch

from recommendation_v4.ops.kernel import interpreter_enabled


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """What the kernels need to know about the device they run on."""

    backend: str  # "cuda", "hip" or "interpreter"
    capability: tuple[int, int]  # torch.cuda.get_device_capability(); (0, 0) for the interpreter
    arch: str  # "sm90", "sm100", "gfx950", ...; "interpreter" for the CPU interpreter
    name: str = ""

    @property
    def table_key(self) -> str:
        """The autotune table's architecture key, e.g. "cuda:sm90", "hip:gfx950", "interpreter"."""
        return "interpreter" if self.backend == "interpreter" else f"{self.backend}:{self.arch}"


INTERPRETER = DeviceFacts(backend="interpreter", capability=(0, 0), arch="interpreter", name="TRITON_INTERPRET=1")


def detect_device_facts(device: Optional[torch.device] = None) -> DeviceFacts:
    """Facts for `device` (default: the current CUDA/ROCm device, or the interpreter)."""
    if interpreter_enabled() or (device is not None and device.type == "cpu"):
        return INTERPRETER
    index = device.index if device is not None and device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    capability = (int(props.major), int(props.minor))
    if torch.version.hip:
        # gcnArchName looks like "gfx950:sramecc+:xnack-"; the features do not change the kernels.
        arch = str(getattr(props, "gcnArchName", "gfx")).split(":")[0]
        return DeviceFacts(backend="hip", capability=capability, arch=arch, name=props.name)
    return DeviceFacts(backend="cuda", capability=capability, arch=f"sm{capability[0]}{capability[1]}", name=props.name)


def host_tensor_descriptors_available() -> bool:
    return importlib.util.find_spec("triton.tools.tensor_descriptor") is not None


def tma_enabled(facts: DeviceFacts) -> bool:
    """Load K/V tiles through TMA tensor descriptors.

    Only NVIDIA Hopper (sm90) and Blackwell (sm100/sm103) have TMA. ROCm is excluded by backend,
    not by capability: gfx950 (MI350X) reports capability (9, 5), which a "major == 9" test
    would mistake for Hopper and then emit descriptor code that does not compile on HIP.
    The interpreter emulates descriptors; it uses them only when asked to (tests do).
    """
    if facts.backend != "cuda":
        return False
    return facts.capability[0] in (9, 10) and host_tensor_descriptors_available()


def jagged_kernel_variant(facts: DeviceFacts) -> str:
    """"basic" (one row per program) or "multirow" (a tile of rows per program) concat/split.

    The basic kernels fail in ROCm's TritonAMDGPUCanonicalizePointers pass at make_ttgir,
    so HIP always routes to multirow; Blackwell also prefers multirow. Others keep basic.
    """
    if facts.backend == "hip":
        return "multirow"
    if facts.backend == "cuda" and facts.capability[0] >= 10:
        return "multirow"
    return "basic"


def is_amd_mi350(facts: DeviceFacts) -> bool:
    return facts.backend == "hip" and facts.arch in ("gfx950",)


def use_separated_rng_dropout(facts: DeviceFacts) -> bool:
    """Output-path dropout from a precomputed mask (read again by backward) instead of
    regenerating Philox numbers in both kernels. Measured +5.6% end to end on MI350X in the
    reference; also the Blackwell choice there. Costs one byte per element of saved mask.
    """
    return is_amd_mi350(facts) or (facts.backend == "cuda" and facts.capability[0] == 10)


def fp32_dot_precision(facts: DeviceFacts) -> str:
    """`tl.dot` input precision for fp32 operands: TF32 where torch allows it on NVIDIA
    (the matmul-unit tolerance), exact IEEE elsewhere (ROCm, the interpreter)."""
    if facts.backend == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"
