"""Quantized embedding all-to-alls (TorchRec "qcomms"): the precision the sequence-embedding
all-to-alls move in the forward (looked-up rows) and the backward (their gradients).

    registry = embedding_qcomm_codecs(forward="fp16", backward="fp16", device=device)
    EmbeddingCollectionSharder(qcomm_codecs_registry=registry)

The reference run moved both directions in fp16 (PR #889: the same window AUC as fp32 within
seed noise, half the all-to-all bytes, ~6% faster end to end). Two lessons of that run are built in:

* A precision that is asked for and not enabled is an error, never a quiet fp32 (or fp16): a
  rank that silently moved another precision than its peers would desynchronise the collective,
  and the MLPerf log would state the wrong `lowest_numerical_precision_in_comm`. TorchRec's
  registry itself swaps bf16 for fp16 on CPU/gloo with only a log line, so the registry it
  returns is checked against what was asked for.
* fbgemm's fp16/bf16 encoder clamps in fp32 and then casts, which allocates a full-size fp32
  copy of the all-to-all input; on the hot rank of a skewed batch that copy ran the reference
  out of memory. `CastThenClampCodec` casts first and clamps the half-size result in place, with
  bit-identical output (tests/recommendation_v4/parallel/test_qcomms.py checks it against fbgemm's).
"""

from __future__ import annotations

from typing import Dict, Optional

import torch
from fbgemm_gpu.quantize_comm import QuantizationContext
from fbgemm_gpu.quantize_comm import QuantizedCommCodec as FbgemmQuantizedCommCodec
from fbgemm_gpu.split_embedding_configs import SparseType
from torchrec.distributed.fbgemm_qcomm_codec import CommType, QCommsConfig, get_qcomm_codecs_registry
from torchrec.distributed.types import CommOp, QuantizedCommCodecs

from common.config.checks import ConfigError

COMM_PRECISIONS = ("fp32", "fp16", "bf16")
_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# The names the MLPerf 6.1 rules accept for lowest_numerical_precision_in_comm.
_MLLOG_NAMES = {"fp32": "fp32", "fp16": "fp16", "bf16": "bfloat16"}
# "Lowest precision" read as fewest significand bits: bf16 (8) < fp16 (11) < fp32 (24).
_SIGNIFICAND_BITS = {"fp32": 24, "fp16": 11, "bf16": 8}
# An EmbeddingCollection's outputs are sequences: its all-to-alls are this comm op, and only it.
_EMBEDDING_COMM_OP = CommOp.SEQUENCE_EMBEDDINGS_ALL_TO_ALL


class CommPrecisionError(ConfigError):
    """A comm precision binding names an unknown precision or one TorchRec does not enable here."""


def lowest_comm_precision(*, forward: str, backward: str) -> str:
    """The MLPerf name of the lowest precision the embedding all-to-alls move (the dense
    all-reduce is fp32 in either case)."""
    lowest = min(("fp32", forward, backward), key=_SIGNIFICAND_BITS.__getitem__)
    return _MLLOG_NAMES[lowest]


class CastThenClampCodec(FbgemmQuantizedCommCodec):
    """fbgemm's codec with an fp16/bf16 encoder that never holds a full-size fp32 temporary.

    `clamp(x, MIN, MAX).half()` (fbgemm) and `x.half().clamp_(MIN, MAX)` agree bit for bit:
    finite values inside the range cast the same; values beyond it become the range end either
    way (the cast gives +-inf or the end itself, which clamp_ maps to the end); NaN stays NaN.
    """

    @classmethod
    def replacing(cls, codec: FbgemmQuantizedCommCodec) -> "CastThenClampCodec":
        # the same state as the codec TorchRec built (loss scale, row dim, ...): TorchRec reads
        # some of it (`_comm_precision`) directly, so the subclass carries it unchanged
        twin = cls.__new__(cls)
        twin.__dict__.update(vars(codec))
        return twin

    def encode(self, input_tensor: torch.Tensor, ctx: Optional[QuantizationContext] = None) -> torch.Tensor:
        half = {SparseType.FP16: torch.float16, SparseType.BF16: torch.bfloat16}.get(self._comm_precision)
        if half is None or self._loss_scale is not None or input_tensor.dtype == half:
            return super().encode(input_tensor, ctx)  # nothing large to save on these paths
        limits = torch.finfo(half)
        with torch.profiler.record_function(f"## encoder {self._comm_precision} cast-then-clamp ##"):
            return input_tensor.to(half).clamp_(limits.min, limits.max)


def _check_enabled(codecs: QuantizedCommCodecs | None, *, forward: str, backward: str, device: torch.device) -> None:
    for direction, asked in (("forward", forward), ("backward", backward)):
        codec = getattr(codecs, direction, None) if codecs is not None else None
        got = codec.quantized_dtype if codec is not None else None
        if got != _DTYPES[asked]:
            raise CommPrecisionError(
                f'recommendation_v4.ShardingConfig.comm_{direction}_precision = "{asked}" is not enabled by TorchRec on '
                f"{device.type} (its qcomm codec registry moves {got} there); choose one of "
                f"{[p for p in COMM_PRECISIONS if p != asked]} for this device"
            )


def embedding_qcomm_codecs(*, forward: str, backward: str, device: torch.device) -> Optional[Dict[str, QuantizedCommCodecs]]:
    """The qcomm codec registry for an EmbeddingCollectionSharder; None for fp32 both ways
    (TorchRec's unquantized path, untouched). Raises CommPrecisionError when TorchRec would move
    anything other than what was asked for."""
    for direction, asked in (("forward", forward), ("backward", backward)):
        if asked not in COMM_PRECISIONS:
            raise CommPrecisionError(
                f"recommendation_v4.ShardingConfig.comm_{direction}_precision must be one of {COMM_PRECISIONS}, got {asked!r}"
            )
    if forward == backward == "fp32":
        return None
    config = QCommsConfig(forward_precision=CommType(forward), backward_precision=CommType(backward))
    try:
        registry = get_qcomm_codecs_registry(config, comm_ops=[_EMBEDDING_COMM_OP], device=device)
    except Exception as error:  # a registry that cannot be built must stop the run, not fall back
        first_line = (str(error).splitlines() or [""])[0]
        raise CommPrecisionError(
            f"recommendation_v4.ShardingConfig.comm_forward_precision/comm_backward_precision = {forward}/{backward}: "
            f"TorchRec's qcomm codec registry failed on {device.type}: {type(error).__name__}: {first_line}"
        ) from error
    codecs = (registry or {}).get(_EMBEDDING_COMM_OP.name)
    _check_enabled(codecs, forward=forward, backward=backward, device=device)
    assert codecs is not None  # _check_enabled raised otherwise
    for direction in ("forward", "backward"):
        codec = getattr(codecs, direction)
        if isinstance(codec, FbgemmQuantizedCommCodec):
            setattr(codecs, direction, CastThenClampCodec.replacing(codec))
    return registry
