"""One Yambda sample as numpy arrays, and the assembly of samples into an `HSTUBatch`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch.profiler import record_function
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from common.data.batch_arena import batch_empty
from recommendation_v4.data import features
from recommendation_v4.data.batch import HSTUBatch


@dataclasses.dataclass
class YambdaSample:
    """One anchor listen: its history (chronological), context and candidate."""

    sample_id: int  # the anchor's row in the processed event table
    label: float  # listen_plus of the anchor
    query_time: int  # the anchor's timestamp
    history: dict[str, np.ndarray]  # features.UIH_ID_FEATURES + "action_weight", "action_timestamp"
    contextual: dict[str, int]  # features.CONTEXTUAL_FEATURES
    candidate: dict[str, int]  # features.CANDIDATE_ID_FEATURES
    history_rows: np.ndarray  # event rows of the history (not batched; for checks and debugging)


HISTORY_PAYLOADS: tuple[str, ...] = ("action_weight", "action_timestamp")


def _output_tensor(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised 1-D batch tensor: a view of the batch's slab when a loader builds it
    (common.data.batch_arena: reused memory, one shared buffer per batch), else fresh memory."""
    return batch_empty(numel, dtype)


def _filled(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    out = _output_tensor(values.size, dtype)
    out.numpy()[:] = values
    return out


def assemble_batch(
    *,
    uih_lengths: np.ndarray,
    history: Mapping[str, np.ndarray],
    contextual: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    query_time: np.ndarray,
    labels: np.ndarray,
    sample_ids: np.ndarray,
) -> HSTUBatch:
    """Pack per-key arrays (any integer dtype) into the merged KJT and the batch.

    KJT keys follow features.MERGED_KJT_KEYS: history ids (uih_lengths[b] values per sample),
    then the contextual and candidate ids (one value per sample each).
    """
    batch = uih_lengths.size
    total_history = int(uih_lengths.sum())
    for name in (*features.UIH_ID_FEATURES, *HISTORY_PAYLOADS):
        if history[name].size != total_history:
            raise ValueError(f"history {name!r} has {history[name].size} values, lengths sum to {total_history}")
    with record_function("## assemble_kjt ##"):
        sources = {**history, **contextual, **candidate}
        num_single = len(features.MERGED_KJT_KEYS) - len(features.UIH_ID_FEATURES)
        values = _output_tensor(len(features.UIH_ID_FEATURES) * total_history + num_single * batch, torch.int64)
        lengths = _output_tensor(len(features.MERGED_KJT_KEYS) * batch, torch.int64)
        values_np, lengths_np = values.numpy(), lengths.numpy()
        offset = 0
        for k, key in enumerate(features.MERGED_KJT_KEYS):
            chunk = sources[key]
            if chunk.size != (total_history if key in features.UIH_ID_FEATURES else batch):
                raise ValueError(f"feature {key!r} has {chunk.size} values for a batch of {batch}")
            values_np[offset : offset + chunk.size] = chunk
            lengths_np[k * batch : (k + 1) * batch] = uih_lengths if key in features.UIH_ID_FEATURES else 1
            offset += chunk.size
        kjt = KeyedJaggedTensor(keys=list(features.MERGED_KJT_KEYS), values=values, lengths=lengths)
    return HSTUBatch(
        features=kjt,
        uih_lengths=_filled(uih_lengths, torch.int64),
        action_weight=_filled(history["action_weight"], torch.int64),
        action_timestamp=_filled(history["action_timestamp"], torch.int64),
        query_time=_filled(query_time, torch.int64),
        num_candidates=_filled(np.ones(batch, dtype=np.int64), torch.int64),
        labels=_filled(labels, torch.float32),
        sample_ids=_filled(sample_ids, torch.int64),
    )


def collate_samples(samples: Sequence[YambdaSample]) -> HSTUBatch:
    """Batch individually built samples (the slow, obviously-correct path)."""
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    history_keys = (*features.UIH_ID_FEATURES, *HISTORY_PAYLOADS)
    return assemble_batch(
        uih_lengths=np.array([s.history[features.UIH_ITEM].size for s in samples], dtype=np.int64),
        history={k: np.concatenate([s.history[k] for s in samples]).astype(np.int64) for k in history_keys},
        contextual={k: np.array([s.contextual[k] for s in samples]) for k in features.CONTEXTUAL_FEATURES},
        candidate={k: np.array([s.candidate[k] for s in samples]) for k in features.CANDIDATE_ID_FEATURES},
        query_time=np.array([s.query_time for s in samples], dtype=np.int64),
        labels=np.array([s.label for s in samples], dtype=np.float32),
        sample_ids=np.array([s.sample_id for s in samples], dtype=np.int64),
    )
