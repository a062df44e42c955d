"""The pinned autotune table and the full-search machinery (timed with fake launches)."""

from __future__ import annotations

import json
import time

import pytest

from recommendation_v4.ops.triton import tuning
from recommendation_v4.ops.triton.arch import INTERPRETER, DeviceFacts

H100 = DeviceFacts(backend="cuda", capability=(9, 0), arch="sm90")
MI350X = DeviceFacts(backend="hip", capability=(9, 5), arch="gfx950")
MI300X = DeviceFacts(backend="hip", capability=(9, 4), arch="gfx942")
UNKNOWN = DeviceFacts(backend="vulkan", capability=(1, 0), arch="x")


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A private table file, so lookups are tested against known contents."""
    path = tmp_path / "table.json"

    def write(archs: dict) -> None:
        path.write_text(json.dumps({"format": 1, "archs": archs}))
        tuning._load_table.cache_clear()

    monkeypatch.setenv("HSTU_AUTOTUNE_TABLE", str(path))
    monkeypatch.delenv("TRITON_FULL_AUTOTUNE", raising=False)
    yield write
    tuning._load_table.cache_clear()


def test_lookup_prefers_exact_arch_and_shape_then_backend_then_default(table) -> None:
    table(
        {
            "cuda:sm90": {"hstu_attn_fwd": {"dqk=128,n=4096": {"BLOCK_M": 128}, "default": {"BLOCK_M": 64}}},
            "cuda": {"hstu_attn_fwd": {"default": {"BLOCK_M": 32}}, "layer_norm_fwd": {"default": {"BLOCK_N": 2}}},
            "default": {"layer_norm_fwd": {"default": {"BLOCK_N": 1}}, "hstu_attn_fwd": {"default": {"BLOCK_M": 16}}},
        }
    )
    assert tuning.pinned_config(facts=H100, op="hstu_attn_fwd", key="dqk=128,n=4096") == {"BLOCK_M": 128}
    assert tuning.pinned_config(facts=H100, op="hstu_attn_fwd", key="dqk=64,n=512") == {"BLOCK_M": 64}
    assert tuning.pinned_config(facts=H100, op="layer_norm_fwd", key="d=512") == {"BLOCK_N": 2}
    assert tuning.pinned_config(facts=MI350X, op="layer_norm_fwd", key="d=512") == {"BLOCK_N": 1}
    assert tuning.pinned_config(facts=UNKNOWN, op="hstu_attn_fwd", key="anything") == {"BLOCK_M": 16}


def test_missing_entries_and_bad_files_are_reported_with_the_path(table, tmp_path, monkeypatch) -> None:
    table({"cuda": {}})
    with pytest.raises(KeyError, match="no config for op 'layer_norm_bwd' on hip:gfx950"):
        tuning.pinned_config(facts=MI350X, op="layer_norm_bwd", key="d=8")
    with pytest.raises(KeyError, match="unknown op"):
        tuning.pinned_config(facts=H100, op="matmul", key="")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    monkeypatch.setenv("HSTU_AUTOTUNE_TABLE", str(bad))
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        tuning.pinned_config(facts=H100, op="layer_norm_bwd", key="d=8")


def test_shipped_table_covers_every_op_for_every_backend(monkeypatch) -> None:
    monkeypatch.delenv("HSTU_AUTOTUNE_TABLE", raising=False)
    tuning._load_table.cache_clear()
    for facts in (INTERPRETER, H100, MI350X, MI300X, UNKNOWN):
        for op in tuning.OPS:
            cfg = tuning.pinned_config(facts=facts, op=op, key="never-pinned")
            assert cfg, (facts, op)
            if facts.backend != "hip":  # HIP-only launch options would be rejected by the CUDA compiler
                assert not {"waves_per_eu", "matrix_instr_nonkdim", "kpack"} & set(cfg), (facts, op)


def test_pinned_by_default_even_when_launches_differ_in_speed(table) -> None:
    table({"interpreter": {"layer_norm_fwd": {"default": {"BLOCK_N": 4}}}})
    calls = []
    cfg = tuning.choose_config(facts=INTERPRETER, op="layer_norm_fwd", key="d=8", run=calls.append)
    assert cfg == {"BLOCK_N": 4} and calls == []  # nothing launched to decide


def test_full_autotune_times_the_search_space_and_records_the_winner(table, monkeypatch) -> None:
    table({})
    monkeypatch.setenv("TRITON_FULL_AUTOTUNE", "1")
    monkeypatch.setattr(tuning, "_winners", {})
    space = tuning.search_space(facts=INTERPRETER, op="layer_norm_bwd")
    slow, fast = space[0], space[1]

    def run(cfg: dict) -> None:
        time.sleep(0.02 if cfg == slow else 0.0)

    assert tuning.choose_config(facts=INTERPRETER, op="layer_norm_bwd", key="d=8", run=run) == fast
    assert tuning.winners_table() == {"interpreter": {"layer_norm_bwd": {"d=8": fast}}}
    # Cached: a second call launches nothing.
    assert tuning.choose_config(facts=INTERPRETER, op="layer_norm_bwd", key="d=8", run=lambda c: 1 / 0) == fast


def test_configs_that_fail_are_skipped_and_all_failing_is_an_error(table, monkeypatch) -> None:
    table({})
    monkeypatch.setenv("TRITON_FULL_AUTOTUNE", "1")
    monkeypatch.setattr(tuning, "_winners", {})
    space = tuning.search_space(facts=INTERPRETER, op="ln_mul_dropout_fwd")

    def run(cfg: dict) -> None:
        if cfg == space[0]:
            raise RuntimeError("out of shared memory")

    assert tuning.choose_config(facts=INTERPRETER, op="ln_mul_dropout_fwd", key="k", run=run) == space[1]
    with pytest.raises(RuntimeError, match="no config in the search space ran"):
        tuning.choose_config(facts=INTERPRETER, op="ln_mul_dropout_bwd", key="k", run=lambda c: 1 / 0)


def test_gpu_search_spaces_respect_backend_options() -> None:
    hip_space = tuning.search_space(facts=MI350X, op="hstu_attn_fwd")
    cuda_space = tuning.search_space(facts=H100, op="hstu_attn_fwd")
    assert all("waves_per_eu" in c and "matrix_instr_nonkdim" in c for c in hip_space)
    assert not any("waves_per_eu" in c for c in cuda_space)
    assert len(cuda_space) > 10 and len(hip_space) > len(cuda_space)
