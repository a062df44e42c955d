"""Quantized embedding all-to-alls (recommendation_v4/parallel/qcomms.py).

On CPU/gloo with fbgemm-gpu-cpu 1.9.0, fp16 works both ways: the trainer's losses move off the fp32
ones by ~1e-7 on the first step (forward rounding only) and by ~1e-4 after six, and the MLPerf log
says fp16. TorchRec's registry swaps bf16 for fp16 on CPU (gloo itself moves bf16 fine): that is
refused in one line. The cast-then-clamp encoder matches fbgemm's bit for bit without fbgemm's
full-size fp32 temporary.
"""

from __future__ import annotations

import json

import pytest
import torch
from fbgemm_gpu.quantize_comm import QuantizedCommCodec as FbgemmQuantizedCommCodec
from fbgemm_gpu.split_embedding_configs import SparseType
from torch.profiler import ProfilerActivity, profile

from common.config.checks import ConfigError
from recommendation_v4.parallel import qcomms
from recommendation_v4.parallel.qcomms import CastThenClampCodec, CommPrecisionError, embedding_qcomm_codecs, lowest_comm_precision
from recommendation_v4.parallel.sharding import ShardingConfig
from tests.recommendation_v4.trainer_runs import DEBUG_GIN, run_trainer, tiny_bindings, train_losses
from tests.trainers.trainer_process import run_command, trainer_command

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # building a registry touches no device


@pytest.mark.parametrize("forward, backward, logged", [
    ("fp32", "fp32", "fp32"), ("fp16", "fp32", "fp16"), ("fp32", "fp16", "fp16"), ("fp16", "fp16", "fp16"),
    ("bf16", "fp32", "bfloat16"), ("fp16", "bf16", "bfloat16"),  # bf16 keeps fewer significand bits than fp16
])
def test_mllog_states_the_lowest_comm_precision(forward, backward, logged):
    assert lowest_comm_precision(forward=forward, backward=backward) == logged
    config = ShardingConfig(comm_forward_precision=forward, comm_backward_precision=backward)
    assert config.comm_precision_for_mllog == logged


@pytest.mark.parametrize("field", ["comm_forward_precision", "comm_backward_precision"])
def test_an_unknown_precision_names_the_binding(field):
    with pytest.raises(ConfigError, match=rf"recommendation_v4.ShardingConfig.{field} must be one of \['fp32', 'fp16', 'bf16'\], got 'fp8'"):
        ShardingConfig(**{field: "fp8"})


def test_fp32_both_ways_is_torchrec_s_unquantized_path():
    assert embedding_qcomm_codecs(forward="fp32", backward="fp32", device=CPU) is None


@pytest.mark.parametrize("device", [CPU, CUDA])
def test_fp16_registry_moves_fp16_through_the_cast_then_clamp_codec(device):
    registry = embedding_qcomm_codecs(forward="fp16", backward="fp32", device=device)
    assert list(registry) == ["SEQUENCE_EMBEDDINGS_ALL_TO_ALL"]  # the EmbeddingCollection's all-to-all, only
    codecs = registry["SEQUENCE_EMBEDDINGS_ALL_TO_ALL"]
    assert codecs.forward.quantized_dtype == torch.float16 and codecs.backward.quantized_dtype == torch.float32
    assert isinstance(codecs.forward, CastThenClampCodec)


def test_bf16_is_refused_on_cpu_where_torchrec_would_move_fp16():
    with pytest.raises(CommPrecisionError) as caught:
        embedding_qcomm_codecs(forward="fp32", backward="bf16", device=CPU)
    assert str(caught.value) == (
        'recommendation_v4.ShardingConfig.comm_backward_precision = "bf16" is not enabled by TorchRec on cpu '
        "(its qcomm codec registry moves torch.float16 there); choose one of ['fp32', 'fp16'] for this device"
    )


def test_bf16_is_kept_on_gpu():
    codecs = embedding_qcomm_codecs(forward="bf16", backward="bf16", device=CUDA)["SEQUENCE_EMBEDDINGS_ALL_TO_ALL"]
    assert codecs.forward.quantized_dtype == codecs.backward.quantized_dtype == torch.bfloat16


def test_a_registry_that_does_not_enable_what_was_asked_raises(monkeypatch):
    monkeypatch.setattr(qcomms, "get_qcomm_codecs_registry", lambda *args, **kwargs: None)
    with pytest.raises(CommPrecisionError, match='comm_forward_precision = "fp16" is not enabled by TorchRec on cpu'):
        embedding_qcomm_codecs(forward="fp16", backward="fp16", device=CPU)

    def broken(*args, **kwargs):
        raise RuntimeError("no codec\nsecond line")

    monkeypatch.setattr(qcomms, "get_qcomm_codecs_registry", broken)
    with pytest.raises(CommPrecisionError, match=r"registry failed on cpu: RuntimeError: no codec$"):
        embedding_qcomm_codecs(forward="fp16", backward="fp16", device=CPU)


def _edge_values(dtype: torch.dtype) -> torch.Tensor:
    limit = torch.finfo(dtype).max
    edges = [0.0, -0.0, 1e-8, -6e-8, 1.0, limit, -limit, limit * 1.0001, limit * 1.01, 1e6, 3.4e38, -3.4e38,
             float("inf"), float("-inf"), float("nan")]
    if dtype == torch.float16:
        edges += [65504.0, 65505.0, 65519.0, 65519.99, 65520.0, 65536.0]  # around the rounding edge of HALF_MAX
    generator = torch.Generator().manual_seed(0)
    scaled = torch.randn(4096, generator=generator) * torch.logspace(-10, 39, 4096).clamp(max=3e38)
    return torch.cat([torch.tensor(edges, dtype=torch.float32), scaled])


@pytest.mark.parametrize("precision, dtype", [(SparseType.FP16, torch.float16), (SparseType.BF16, torch.bfloat16)])
def test_cast_then_clamp_encodes_bit_for_bit_like_fbgemm(precision, dtype):
    fbgemm = FbgemmQuantizedCommCodec(comm_precision=precision)
    ours = CastThenClampCodec.replacing(fbgemm)
    values = _edge_values(dtype)
    expected, got = fbgemm.encode(values), ours.encode(values)
    assert got.dtype == expected.dtype == dtype
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))  # bits, NaN included
    assert torch.equal(values.view(torch.int32), _edge_values(dtype).view(torch.int32))  # the input is left alone
    assert torch.equal(ours.decode(got).view(torch.int32), fbgemm.decode(expected).view(torch.int32))


def _largest_allocation(codec, values: torch.Tensor) -> int:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        codec.encode(values)
    return max(event.cpu_memory_usage for event in prof.events())


def test_cast_then_clamp_never_allocates_a_full_size_fp32_copy():
    values = torch.randn(1 << 20)
    fbgemm = FbgemmQuantizedCommCodec(comm_precision=SparseType.FP16)
    assert _largest_allocation(fbgemm, values) == 4 * values.numel()  # fbgemm's clamp, in fp32: what the measure sees
    assert _largest_allocation(CastThenClampCodec.replacing(fbgemm), values) == 2 * values.numel()


# ---------------------------------------------------------------- the trainer, 2 gloo ranks

STEPS = 6
FP16_BOTH_WAYS = ('recommendation_v4.ShardingConfig.comm_forward_precision = "fp16"',
                  'recommendation_v4.ShardingConfig.comm_backward_precision = "fp16"')


def _mllog_value(run_dir, key: str):
    for line in (run_dir / "mllog.log").read_text().splitlines():
        record = json.loads(line.split(":::MLLOG ", 1)[1])
        if record["key"] == key:
            return record["value"]
    raise AssertionError(f"{key} not in {run_dir / 'mllog.log'}")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.over_budget(
    reason="two 2-rank TorchRec trainings (fp32 and fp16 all-to-alls) whose losses it compares")
def test_fp16_all_to_alls_train_close_to_fp32_but_not_identically(tiny_data_root, tmp_path):
    runs = {}
    for name, extra in (("fp32", ()), ("fp16", FP16_BOTH_WAYS)):
        bindings = tiny_bindings(data_root=tiny_data_root, output_root=tmp_path, run_name=name, max_steps=STEPS)
        run_trainer(nproc=2, bindings=[*bindings, 'recommendation_v4.ShardingConfig.default_sharding_type = "row_wise"',
                                       *extra])
        runs[name] = tmp_path / "recommendation_v4" / name
    fp32, fp16 = train_losses(runs["fp32"]), train_losses(runs["fp16"])
    assert len(fp32) == len(fp16) == STEPS
    # observed here: 2.4e-7 on step 1 (the forward's rounding alone), 1.5e-4 by step 6
    differences = [abs(a - b) for a, b in zip(fp32, fp16)]
    assert all(d > 0 for d in differences), differences  # the all-to-alls really moved fp16
    assert differences[0] < 1e-5, differences
    assert all(d <= 2e-3 * abs(a) for d, a in zip(differences, fp32)), differences
    assert _mllog_value(runs["fp32"], "lowest_numerical_precision_in_comm") == "fp32"
    assert _mllog_value(runs["fp16"], "lowest_numerical_precision_in_comm") == "fp16"


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.over_budget(reason="a 2-rank TorchRec launch that must stop in one line")
def test_bf16_all_to_alls_stop_a_cpu_run_in_one_line(tiny_data_root, tmp_path):
    bindings = [*tiny_bindings(data_root=tiny_data_root, output_root=tmp_path, run_name="bf16", max_steps=1),
                'recommendation_v4.ShardingConfig.comm_forward_precision = "bf16"']
    cmd = trainer_command(package="recommendation_v4", gin_file=DEBUG_GIN, nproc=2, bindings=bindings)
    proc = run_command(cmd, timeout=600, expect_returncode=1)  # torchrun's status when its ranks exit 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("config error:")]
    # each rank says it; torchrun stops the other rank as soon as one exits 2, sometimes before it has printed
    assert len(lines) in (1, 2) and set(lines) == {
        'config error: recommendation_v4.ShardingConfig.comm_forward_precision = "bf16" is not enabled by '
        "TorchRec on cpu (its qcomm codec registry moves torch.float16 there); choose one of "
        "['fp32', 'fp16'] for this device"}, lines
