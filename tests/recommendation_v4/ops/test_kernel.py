"""Kernel choice: parsing, and the logged-once fallback to PYTORCH where Triton cannot run."""

from __future__ import annotations

import logging

import pytest
import torch

from recommendation_v4.ops import HammerKernel, resolve_kernel


def test_pytorch_is_always_pytorch_and_strings_parse() -> None:
    assert resolve_kernel(HammerKernel.PYTORCH) is HammerKernel.PYTORCH
    assert resolve_kernel("pytorch") is HammerKernel.PYTORCH
    assert HammerKernel("TRITON") is HammerKernel.TRITON


def test_unknown_kernel_names_the_choices() -> None:
    with pytest.raises(ValueError, match="PYTORCH, TRITON"):
        resolve_kernel("CUTLASS")


def test_triton_on_cpu_without_interpreter_falls_back_and_logs_once(
    monkeypatch, caplog, fresh_fallback_log
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with caplog.at_level(logging.WARNING, logger="recommendation_v4.ops.kernel"):
        for _ in range(3):
            assert resolve_kernel(HammerKernel.TRITON, device=torch.device("cpu")) is HammerKernel.PYTORCH
    fallbacks = [r for r in caplog.records if "TRITON requested" in r.getMessage()]
    assert len(fallbacks) == 1
    assert "TRITON_INTERPRET=1" in fallbacks[0].getMessage()


def test_triton_runs_on_cpu_under_the_interpreter(monkeypatch, fresh_fallback_log) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_kernel("TRITON", device=torch.device("cpu")) is HammerKernel.TRITON
