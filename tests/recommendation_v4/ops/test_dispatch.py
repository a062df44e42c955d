"""The op-dispatch helper: the kernel it picks, when it imports Triton code, and its labels."""

from __future__ import annotations

import torch

from recommendation_v4.ops import layer_norm
from recommendation_v4.ops.dispatch import dispatch

CPU = torch.device("cpu")


def _labels(fn) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events() if e.name.startswith("## ")]


def _unreachable(_module):
    raise AssertionError("the Triton branch ran")


def test_pytorch_runs_the_reference_without_importing_triton_code() -> None:
    # A module that does not exist would raise on import: PYTORCH must never get that far.
    result = dispatch(
        "op", kernel="PYTORCH", device=CPU, pytorch=lambda: "ref", triton=_unreachable, triton_module="missing"
    )
    assert result == "ref"


def test_triton_gets_its_module_imported_and_its_own_label(monkeypatch, fresh_fallback_log) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")

    def run():
        return dispatch(
            "op", kernel="TRITON", device=CPU, pytorch=lambda: None, triton=lambda m: m.__name__, triton_module="arch"
        )

    assert run() == "recommendation_v4.ops.triton.arch"
    assert _labels(run) == ["## op_triton ##"]


def test_triton_where_it_cannot_run_falls_back_under_the_pytorch_label(monkeypatch, fresh_fallback_log) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.randn(3, 8)
    labels = _labels(lambda: layer_norm(x=x, weight=torch.ones(8), bias=torch.zeros(8), eps=1e-5, kernel="TRITON"))
    assert labels == ["## layer_norm_pytorch ##"]
