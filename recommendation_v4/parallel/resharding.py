"""Resuming under another sharding plan: the checkpoint's RowWiseAdagrad state against this plan's.

- DCP re-shards embedding weights itself; the fused RowWiseAdagrad accumulators (one per row of
  each column shard) do not fit another plan, so `adapt_sparse_optimizer_state` (the task's
  `adapt_checkpoint`) finds those tables from the DCP metadata before the load.
- `recommendation_v4.ShardingConfig.sparse_optimizer_on_reshard`: "fail" (one line), "convert"
  or "reset"; what each does is in README.md beside this file.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torchrec.distributed.model_parallel import DistributedModelParallel

from common.checkpoint.manager import AdaptedLoad
from common.checkpoint.payload import encode_tree
from common.distributed.collectives import max_over_ranks, world_rank
from common.config.checks import ConfigError

logger = logging.getLogger(__name__)

RESHARD_POLICIES = ("fail", "convert", "reset")
_POLICY_BINDING = "recommendation_v4.ShardingConfig.sparse_optimizer_on_reshard"
_SHARDING_BINDING = "recommendation_v4.ShardingConfig.sharding_overrides"


class ReshardError(ConfigError):
    """The checkpoint's sparse optimizer state (or a table) does not fit this run's sharding plan."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a table's weight is cut: row ranges x column ranges (widths in column order)."""

    row_splits: int
    column_widths: tuple[int, ...]

    @classmethod
    def of_chunks(cls, chunks: Sequence[tuple[Sequence[int], Sequence[int]]]) -> "Layout":
        rows = {offsets[0] for offsets, _ in chunks}
        columns = sorted({(offsets[1], sizes[1]) for offsets, sizes in chunks})
        return cls(row_splits=len(rows), column_widths=tuple(width for _, width in columns))

    @property
    def sharding_type(self) -> str:
        """The sharding type that cuts a table this way ("" where several would)."""
        if len(self.column_widths) > 1:
            return "column_wise" if self.row_splits == 1 else ""
        return "row_wise" if self.row_splits > 1 else "table_wise"

    def describe(self) -> str:
        parts = [f"rows in {self.row_splits} shards"] if self.row_splits > 1 else []
        widths = sorted(set(self.column_widths))
        if len(self.column_widths) > 1:
            of = str(widths[0]) if len(widths) == 1 else str(list(self.column_widths))
            parts.append(f"columns in {len(self.column_widths)} shards of {of}")
        return ", ".join(parts) or "one shard"


def _saved_layout(metadata: Metadata, name: str) -> Layout | None:
    entry = metadata.state_dict_metadata.get(name)
    if not isinstance(entry, TensorStorageMetadata) or len(entry.size) != 2:
        return None
    return Layout.of_chunks([(chunk.offsets, chunk.sizes) for chunk in entry.chunks])


def _live_layout(weight: ShardedTensor) -> Layout:
    return Layout.of_chunks([(s.shard_offsets, s.shard_sizes) for s in weight.metadata().shards_metadata])


@dataclasses.dataclass
class _Table:
    name: str
    fqn: str  # the weight's key in dmp.state_dict() and in the fused optimizer's state
    rows: int
    sharding_type: str  # this run's plan
    saved: Layout
    live: Layout
    states: dict[str, tuple[str, ShardedTensor]]  # this rank's accumulators: state name -> (flat name, tensor)

    def change(self) -> str:
        return (f"{self.name}: {self.saved.sharding_type or 'saved'} ({self.saved.describe()}) -> "
                f"{self.sharding_type} ({self.live.describe()})")


def _flat_names(tree: Any, prefix: str) -> dict[int, str]:
    """id(tensor) -> the name the checkpoint stores it under (common.checkpoint.payload's scheme)."""
    flat: dict[str, torch.Tensor] = {}
    encode_tree(tree, fqn=prefix, tensors=flat)
    return {id(tensor): name for name, tensor in flat.items()}


def _module_and_table(fqn: str) -> tuple[str, str] | None:
    """("<module path>", "<table>") of an EmbeddingCollection weight "<module path>.embeddings.<table>.weight"."""
    parts = fqn.split(".")
    if len(parts) < 3 or parts[-1] != "weight" or parts[-3] != "embeddings":
        return None
    return ".".join(parts[:-3]), parts[-2]


def _tables(dmp: DistributedModelParallel, app_state: Mapping[str, Any], metadata: Metadata, *, path: Path,
            model_key: str, optimizer_key: str) -> list[_Table]:
    weights = app_state[model_key]
    optimizer_state = app_state[optimizer_key].get("state", {})
    weight_names = _flat_names(weights, model_key)
    state_names = _flat_names(app_state[optimizer_key], optimizer_key)
    tables, resized = [], []
    embedding_weights = {fqn: (w, names) for fqn, w in sorted(weights.items())
                         if isinstance(w, ShardedTensor) and (names := _module_and_table(fqn)) is not None}
    unowned = sorted(set(optimizer_state) - set(embedding_weights))
    if unowned:  # a table this look skipped would meet DCP's size mismatch instead
        raise RuntimeError(f"recommendation_v4.parallel.resharding: no sharded embedding weight for optimizer state {unowned}")
    for fqn, (weight, (module, table)) in embedding_weights.items():
        saved_entry = metadata.state_dict_metadata.get(weight_names[id(weight)])
        saved = _saved_layout(metadata, weight_names[id(weight)])
        if saved is None:
            continue  # not in the checkpoint: the ordinary load names it
        if tuple(saved_entry.size) != tuple(weight.size()):
            resized.append(f"{table} {list(saved_entry.size)} -> {list(weight.size())}")
            continue
        spec = dmp.plan.plan.get(module, {}).get(table)  # type: ignore[union-attr]
        states = {name: (state_names[id(t)], t) for name, t in optimizer_state.get(fqn, {}).items()
                  if isinstance(t, ShardedTensor)}
        tables.append(_Table(name=table, fqn=fqn, rows=int(weight.size(0)), saved=saved, live=_live_layout(weight),
                             sharding_type=spec.sharding_type if spec is not None else "?", states=states))
    if resized:
        raise ReshardError(
            f"checkpoint {path} holds tables of other sizes than this run builds (rows x dim: {'; '.join(resized)}): "
            "another dataset, recommendation_v4.DataConfig.cross_table_rows or embedding_dim; resume with the "
            "configuration that wrote it or start from another CKPT_PATH"
        )
    return tables


def _misfits(table: _Table, metadata: Metadata) -> bool:
    """Whether an accumulator this rank holds has another shape or column cut than the saved one."""
    for flat, live in table.states.values():
        saved = metadata.state_dict_metadata.get(flat)
        if not isinstance(saved, TensorStorageMetadata):
            continue  # missing from the checkpoint: the ordinary load names it
        if tuple(saved.size) != tuple(live.size()):
            return True
        if len(table.live.column_widths) > 1 and table.saved.column_widths != table.live.column_widths:
            return True  # as many column shards, other columns in each
    return False


def adapt_sparse_optimizer_state(*, dmp: DistributedModelParallel, app_state: Mapping[str, Any], metadata: Metadata,
                                 path: Path, policy: str, model_key: str = "model",
                                 optimizer_key: str = "sparse_optim") -> AdaptedLoad:
    """What to load from checkpoint `path` under this plan (every rank calls it together)."""
    if policy not in RESHARD_POLICIES:
        raise ReshardError(f"{_POLICY_BINDING} must be one of {list(RESHARD_POLICIES)}, got {policy!r}")
    tables = _tables(dmp, app_state, metadata, path=path, model_key=model_key, optimizer_key=optimizer_key)
    # a rank sees only the accumulators it holds: the ranks agree on the set in one all_reduce
    flags = max_over_ranks([1.0 if _misfits(t, metadata) else 0.0 for t in tables])
    moved = [t for t, flag in zip(tables, flags) if flag > 0.5]
    if not moved:
        return AdaptedLoad(app_state=app_state)
    changes = "; ".join(t.change() for t in moved)
    if policy == "fail":
        back = {t.name: t.saved.sharding_type for t in moved if t.saved.sharding_type}
        raise ReshardError(
            f"checkpoint {path} cannot be resumed under this sharding plan: the RowWiseAdagrad state of "
            f"{', '.join(t.name for t in moved)} has another shape here (column-wise sharding keeps one accumulator "
            f"per row and column shard): {changes}; resume with the checkpoint's sharding ({_SHARDING_BINDING} = "
            f'{back}) or bind {_POLICY_BINDING} = "convert" (maps the accumulators: exact toward one per row, an '
            'estimate toward column shards) or "reset" (restarts them from zero)'
        )
    if policy == "reset":
        return _reset(app_state, moved, optimizer_key=optimizer_key, changes=changes)
    return _convert(app_state, moved, metadata, path=path, optimizer_key=optimizer_key)


def _with_states(app_state: Mapping[str, Any], optimizer_key: str,
                 replace: Mapping[tuple[str, str], torch.Tensor | None]) -> dict[str, Any]:
    """A copy of app_state whose optimizer entry has the given (fqn, state) tensors swapped or
    (None) left out; everything else is the live objects themselves, loaded in place as usual."""
    optimizer = dict(app_state[optimizer_key])
    state = dict(optimizer["state"])
    for (fqn, name), tensor in replace.items():
        per_param = dict(state[fqn])
        if tensor is None:
            del per_param[name]
        else:
            per_param[name] = tensor
        state[fqn] = per_param
    optimizer["state"] = state
    return {**app_state, optimizer_key: optimizer}


def _reset(app_state: Mapping[str, Any], moved: list[_Table], *, optimizer_key: str, changes: str) -> AdaptedLoad:
    held = [(t, name, live) for t in moved for name, (_, live) in t.states.items()]

    def zero() -> None:
        for _, _, live in held:
            for shard in live.local_shards():
                shard.tensor.zero_()
        if world_rank() == 0:
            logger.warning("[reshard] %s = \"reset\": RowWiseAdagrad state restarted from zero (weights loaded) for %s",
                           _POLICY_BINDING, changes)

    loaded = _with_states(app_state, optimizer_key, {(t.fqn, name): None for t, name, _ in held})
    return AdaptedLoad(app_state=loaded, after_load=zero)


def _convert(app_state: Mapping[str, Any], moved: list[_Table], metadata: Metadata, *, path: Path,
             optimizer_key: str) -> AdaptedLoad:
    for t in moved:
        widths = set(t.saved.column_widths)
        if len(widths) > 1:
            raise ReshardError(
                f'checkpoint {path}: {_POLICY_BINDING} = "convert" cannot map table {t.name}\'s accumulators: its saved '
                f"column shards have unequal widths {list(t.saved.column_widths)}; bind \"reset\" or resume with the "
                "checkpoint's sharding"
            )
    # each rank reads the whole saved accumulator of a table it holds a shard of (k x rows floats):
    # a column shard needs every row of it
    swaps: dict[tuple[str, str], torch.Tensor] = {}
    work: list[tuple[_Table, torch.Tensor, ShardedTensor]] = []
    for t in moved:
        for name, (flat, live) in t.states.items():
            saved = metadata.state_dict_metadata[flat]
            assert isinstance(saved, TensorStorageMetadata)
            size = tuple(saved.size)
            if len(size) != 1 or size[0] % t.rows or live.dim() != 1 or live.size(0) % t.rows:
                raise ReshardError(
                    f'checkpoint {path}: {_POLICY_BINDING} = "convert" maps row-wise accumulators only; table '
                    f"{t.name}'s {name} is {list(size)} saved and {list(live.size())} now; bind \"reset\" or resume "
                    "with the checkpoint's sharding"
                )
            buffer = torch.empty(size, dtype=saved.properties.dtype)
            swaps[(t.fqn, name)] = buffer
            work.append((t, buffer, live))

    def convert() -> None:
        for t, buffer, live in work:
            per_row = buffer.view(-1, t.rows).mean(dim=0)  # exact: equal-width shards' means
            for shard in live.local_shards():
                segment_row = shard.metadata.shard_offsets[0] % t.rows
                count = shard.metadata.shard_sizes[0]
                if segment_row + count > t.rows:  # a shard across two column segments: not a layout fbgemm makes
                    raise ReshardError(f"table {t.name}: an accumulator shard spans two column shards; cannot convert")
                shard.tensor.copy_(per_row[segment_row : segment_row + count].to(shard.tensor.dtype))
        if world_rank() == 0:
            for t in moved:
                how = ("exact (the mean of equal-width column shards' accumulators)" if len(t.live.column_widths) == 1
                       else "an ESTIMATE (each column shard starts from the row's accumulator)")
                logger.warning("[reshard] %s = \"convert\": RowWiseAdagrad state of %s: %s", _POLICY_BINDING,
                               t.change(), how)

    return AdaptedLoad(app_state=_with_states(app_state, optimizer_key, swaps), after_load=convert)


def checkpoint_adapter(dmp: DistributedModelParallel, *, policy: str) -> Callable[[Path, Metadata, Mapping[str, Any]], AdaptedLoad]:
    """`adapt` for CheckpointManager.load_latest, bound to a model and a policy."""
    return lambda path, metadata, app_state: adapt_sparse_optimizer_state(
        dmp=dmp, app_state=app_state, metadata=metadata, path=path, policy=policy)
