"""Architecture dispatch rules, with faked device properties (no GPU, no interpreter needed)."""

from __future__ import annotations

import types

import pytest
import torch

from recommendation_v4.ops.triton import arch
from recommendation_v4.ops.triton.arch import (
    DeviceFacts,
    detect_device_facts,
    fp32_dot_precision,
    jagged_kernel_variant,
    tma_enabled,
    use_separated_rng_dropout,
)

H100 = DeviceFacts(backend="cuda", capability=(9, 0), arch="sm90", name="NVIDIA H100")
B200 = DeviceFacts(backend="cuda", capability=(10, 0), arch="sm100", name="NVIDIA B200")
A100 = DeviceFacts(backend="cuda", capability=(8, 0), arch="sm80", name="NVIDIA A100")
MI350X = DeviceFacts(backend="hip", capability=(9, 5), arch="gfx950", name="AMD Instinct MI350X")
MI300X = DeviceFacts(backend="hip", capability=(9, 4), arch="gfx942", name="AMD Instinct MI300X")


def _fake_gpu(monkeypatch, *, hip: bool, major: int, minor: int, gcn: str = "", name: str = "gpu") -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    props = types.SimpleNamespace(major=major, minor=minor, name=name, gcnArchName=gcn, multi_processor_count=100)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=None: props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.version, "hip", "7.2.1" if hip else None)


def test_gfx950_reports_capability_9_5_but_is_detected_as_hip_not_hopper(monkeypatch) -> None:
    _fake_gpu(monkeypatch, hip=True, major=9, minor=5, gcn="gfx950:sramecc+:xnack-", name="AMD Instinct MI350X")
    facts = detect_device_facts(torch.device("cuda", 0))
    assert facts == DeviceFacts(backend="hip", capability=(9, 5), arch="gfx950", name="AMD Instinct MI350X")
    assert facts.table_key == "hip:gfx950"
    assert not tma_enabled(facts)


def test_hopper_is_detected_as_cuda_sm90_with_tma(monkeypatch) -> None:
    _fake_gpu(monkeypatch, hip=False, major=9, minor=0, name="NVIDIA H100")
    facts = detect_device_facts(torch.device("cuda", 0))
    assert facts.table_key == "cuda:sm90"
    assert tma_enabled(facts)


def test_interpreter_facts_when_triton_interpret_is_set(monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert detect_device_facts(torch.device("cpu")).backend == "interpreter"


@pytest.mark.parametrize(
    "facts, tma, variant, separated",
    [
        (H100, True, "basic", False),
        (B200, True, "multirow", True),
        (A100, False, "basic", False),
        (MI350X, False, "multirow", True),
        (MI300X, False, "multirow", False),
        (arch.INTERPRETER, False, "basic", False),
    ],
)
def test_dispatch_rules_per_architecture(facts: DeviceFacts, tma: bool, variant: str, separated: bool) -> None:
    assert tma_enabled(facts) is tma
    assert jagged_kernel_variant(facts) == variant
    assert use_separated_rng_dropout(facts) is separated


def test_tma_needs_the_host_descriptor_api(monkeypatch) -> None:
    monkeypatch.setattr(arch, "host_tensor_descriptors_available", lambda: False)
    assert not tma_enabled(H100)


def test_fp32_dots_use_tf32_only_on_nvidia_when_torch_allows_it(monkeypatch) -> None:
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    assert fp32_dot_precision(H100) == "tf32"
    assert fp32_dot_precision(MI350X) == "ieee"
    assert fp32_dot_precision(arch.INTERPRETER) == "ieee"
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    assert fp32_dot_precision(H100) == "ieee"
