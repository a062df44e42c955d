"""DLRM-HSTU: one unpooled EmbeddingCollection lookup, an item tower, and a user tower made of a
contextual preprocessor, position/time encodings and a stack of STU layers; the candidate's
user-side embedding times its item embedding feeds the multitask head."""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import torch
from torch.profiler import record_function
from torchrec.modules.embedding_configs import EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingCollection

from recommendation_v4.data import features as F
from recommendation_v4.data.batch import HSTUBatch
from recommendation_v4.model.flavors import HSTUFlavor
from recommendation_v4.model.encoders import PositionTimeEncoder, TimestampPostprocessor
from recommendation_v4.model.jagged_index import offsets_from_lengths
from recommendation_v4.model.layers import KernelModule, gated_mlp, set_kernel
from recommendation_v4.model.preprocessor import ContextualPreprocessor
from recommendation_v4.model.stu import STULayer
from recommendation_v4.ops import HammerKernel, concat_2d_jagged, split_2d_jagged

logger = logging.getLogger(__name__)
# why a forward asked for the last layer on the candidate rows alone took the full layer: each said once
_TARGETS_ONLY_DECLINED: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Task:
    """A binary task: its label is bit `bit` of the label bitmask."""

    name: str
    bit: int
    weight: float = 1.0


LISTEN_PLUS = Task(name="listen_plus", bit=1)


def _dense_logits(model: "DlrmHSTU", batch: HSTUBatch, looked_up: dict, max_seq_len: int | None) -> torch.Tensor:
    return model.dense_forward(batch, looked_up, max_seq_len)


# The dense part reads lengths on the host (`.item()`) and branches on them, which symbolic tracing
# cannot follow; wrapped, FX records it as one opaque call and the rest of forward stays traceable.
torch.fx.wrap("_dense_logits")


def embedding_tables(*, table_rows: dict[str, int], embedding_dim: int) -> list[EmbeddingConfig]:
    """The 11 tables in a fixed order; `table_rows` must name exactly those tables."""
    expected = set(F.TABLE_FEATURES)
    if set(table_rows) != expected:
        missing, extra = sorted(expected - set(table_rows)), sorted(set(table_rows) - expected)
        raise ValueError(f"table_rows must name the tables {sorted(expected)}; missing {missing}, unknown {extra}")
    return [
        EmbeddingConfig(
            name=name,
            embedding_dim=embedding_dim,
            num_embeddings=int(table_rows[name]),
            feature_names=list(F.TABLE_FEATURES[name]),
        )
        for name in F.TABLE_FEATURES
    ]


class DlrmHSTU(KernelModule):
    def __init__(
        self,
        *,
        config: HSTUFlavor,
        table_rows: dict[str, int],
        tasks: tuple[Task, ...] = (LISTEN_PLUS,),
        kernel: HammerKernel = HammerKernel.PYTORCH,
        bf16: bool = False,
        embedding_device: torch.device | str = "meta",
        last_layer_targets_only: bool = False,
        targets_only_eval: bool = True,
    ) -> None:
        super().__init__()
        self.config = config
        # the reference's TRITON_HSTU_LAST_LAYER_TARGETS_ONLY (off) and TRITON_HSTU_TARGETS_ONLY_EVAL (on:
        # evaluation too, when the first is on): the last STU layer computes the candidate rows only
        self.last_layer_targets_only = last_layer_targets_only
        self.targets_only_eval = targets_only_eval
        self.tasks = tasks
        self.bf16 = bf16
        self.num_contextual = len(F.CONTEXTUAL_FEATURES)
        E, D = config.embedding_dim, config.transducer_dim
        # on meta by default: DistributedModelParallel materialises only each rank's shards
        self.embedding_collection = EmbeddingCollection(
            tables=embedding_tables(table_rows=table_rows, embedding_dim=E),
            need_indices=False,
            device=torch.device(embedding_device),
        )
        self.preprocessor = ContextualPreprocessor(
            embedding_dim=E,
            hidden_dim=config.preprocessor_hidden_dim,
            output_dim=D,
            num_contextual=self.num_contextual,
            num_additional=len(F.UIH_ID_FEATURES) - 1,
            action_weights=F.ACTION_WEIGHTS,
            action_embedding_dim=config.action_embedding_dim,
            action_init_std=config.action_embedding_init_std,
        )
        self.position_time = PositionTimeEncoder(
            max_seq_len=config.max_seq_len,
            num_time_buckets=config.num_time_buckets,
            embedding_dim=D,
            num_contextual=self.num_contextual,
        )
        self.stu_layers = torch.nn.ModuleList(
            STULayer(
                embedding_dim=D,
                num_heads=config.num_heads,
                attn_qk_dim=config.attn_qk_dim,
                attn_linear_dim=config.attn_linear_dim,
                dropout=config.linear_dropout,
                eps=config.layer_norm_eps,
            )
            for _ in range(config.num_layers)
        )
        self.postprocessor = TimestampPostprocessor(embedding_dim=D)
        self.item_mlp = gated_mlp(
            in_dim=E * len(F.CANDIDATE_ID_FEATURES), hidden_dim=config.item_mlp_hidden_dim, out_dim=D, final_norm=True
        )
        self.head = gated_mlp(in_dim=D, hidden_dim=config.head_hidden_dim, out_dim=len(tasks), final_norm=False)
        set_kernel(self, kernel)

    def forward(self, batch: HSTUBatch, max_seq_len: int | None = None) -> torch.Tensor:
        """Logits [B, num_tasks]. `max_seq_len` is the attention normaliser N; by default this
        batch's longest sequence (a multi-rank trainer passes the global batch's).

        The lookup reads `batch.features` as it is and everything after it goes through
        `_dense_logits`, which FX does not trace into: that is what lets TorchRec's
        TrainPipelineSparseDist trace this forward and start the lookup's input all-to-all for the
        next batch ahead of time (recommendation_v4/train_pipeline.py)."""
        with record_function("## embedding_lookup ##"):
            looked_up = self.embedding_collection(batch.features)
        return _dense_logits(self, batch, looked_up, max_seq_len)

    def dense_forward(self, batch: HSTUBatch, looked_up: dict, max_seq_len: int | None) -> torch.Tensor:
        """Everything after the embedding lookup: item and user towers, the multitask head."""
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16)
            if self.bf16 and batch.uih_lengths.is_cuda
            else contextlib.nullcontext()
        )
        with autocast:
            with record_function("## item_forward ##"):
                item_embedding = self.item_mlp(
                    torch.cat([looked_up[name].values() for name in F.CANDIDATE_ID_FEATURES], dim=-1)
                )
            with record_function("## user_forward ##"):
                user_embedding = self._user_forward(batch, looked_up, max_seq_len)
            with record_function("## multitask_head ##"):
                logits = self.head(user_embedding * item_embedding)
        return logits.float()

    def _user_forward(self, batch: HSTUBatch, looked_up: dict, max_seq_len: int | None) -> torch.Tensor:
        history_lengths = batch.uih_lengths.to(torch.int64)
        num_candidates = batch.num_candidates.to(torch.int64)
        history_offsets = offsets_from_lengths(history_lengths)
        candidate_offsets = offsets_from_lengths(num_candidates)
        max_history = int(history_lengths.max().item()) if history_lengths.numel() else 0
        max_candidates = int(num_candidates.max().item()) if num_candidates.numel() else 0

        def merged(history_key: str, candidate_key: str) -> torch.Tensor:
            return concat_2d_jagged(
                max_seq_len=max_history + max_candidates,
                values_left=looked_up[history_key].values(),
                values_right=looked_up[candidate_key].values(),
                max_len_left=max_history,
                max_len_right=max_candidates,
                offsets_left=history_offsets,
                offsets_right=candidate_offsets,
                kernel=self.kernel,
            )

        item_rows = merged(F.UIH_ITEM, F.CAND_ITEM)
        additional_rows = torch.cat([merged(F.UIH_ARTIST, F.CAND_ARTIST), merged(F.UIH_ALBUM, F.CAND_ALBUM)], dim=-1)
        contextual = torch.stack([looked_up[name].values() for name in F.CONTEXTUAL_FEATURES], dim=1)
        merged_lengths = history_lengths + num_candidates
        merged_offsets = offsets_from_lengths(merged_lengths)
        x = self.preprocessor(
            item_embeddings=item_rows,
            additional_embeddings=additional_rows,
            history_actions=batch.action_weight,
            history_offsets=history_offsets,
            max_history_len=max_history,
            candidate_offsets=candidate_offsets,
            max_candidates=max_candidates,
            seq_offsets=merged_offsets,
            contextual_embeddings=contextual,
        )
        C = self.num_contextual
        seq_lengths = merged_lengths + C
        seq_offsets = offsets_from_lengths(seq_lengths)
        row_timestamps = concat_2d_jagged(
            max_seq_len=C + max_history + max_candidates,
            values_left=torch.zeros(history_lengths.numel() * C, 1, dtype=torch.int64, device=x.device),
            values_right=concat_2d_jagged(
                max_seq_len=max_history + max_candidates,
                values_left=batch.action_timestamp.unsqueeze(-1),
                values_right=batch.query_time.repeat_interleave(num_candidates).unsqueeze(-1),
                max_len_left=max_history,
                max_len_right=max_candidates,
                offsets_left=history_offsets,
                offsets_right=candidate_offsets,
                kernel=HammerKernel.PYTORCH,  # integer payload: the reference path is exact
            ),
            max_len_left=C,
            max_len_right=max_history + max_candidates,
            offsets_left=None,
            offsets_right=merged_offsets,
            kernel=HammerKernel.PYTORCH,
        ).squeeze(-1)
        x = self.position_time(
            x=x,
            seq_lengths=seq_lengths,
            seq_offsets=seq_offsets,
            num_targets=num_candidates,
            row_timestamps=row_timestamps,
            query_time=batch.query_time,
        )
        x = torch.nn.functional.dropout(x, p=self.config.input_dropout, training=self.training)
        longest = C + max_history + max_candidates
        attn_len = longest if max_seq_len is None else max(int(max_seq_len), longest)
        last = len(self.stu_layers) - 1 if self._targets_only(num_candidates) else -1
        with record_function("## stu_stack ##"):
            for index, layer in enumerate(self.stu_layers):
                if index == last:
                    x = layer.forward_targets_only(x=x, seq_offsets=seq_offsets, max_seq_len=attn_len)
                else:
                    x = layer(x=x, seq_offsets=seq_offsets, max_seq_len=attn_len, num_targets=num_candidates)
        _, candidates = split_2d_jagged(
            max_seq_len=longest,
            values=x,
            total_len_left=int(seq_lengths.sum().item()) - int(num_candidates.sum().item()),
            total_len_right=int(num_candidates.sum().item()),
            max_len_left=C + max_history,
            max_len_right=max_candidates,
            offsets_left=offsets_from_lengths(seq_lengths - num_candidates),
            offsets_right=candidate_offsets,
            kernel=self.kernel,
        )
        return self.postprocessor(
            embeddings=candidates, timestamps=batch.query_time.repeat_interleave(num_candidates)
        )

    def _targets_only(self, num_candidates: torch.Tensor) -> bool:
        """Whether this forward's last STU layer takes the candidate rows only: asked for, and possible
        for this batch. Otherwise the full layer, said once per reason, as the reference falls back:
        in evaluation with targets_only_eval off; in training with dropout on (the compact rows cannot
        draw the full layer's dropout mask; the reference needs a separated-RNG dropout kernel for
        that, which these kernels do not have); a batch without exactly one target per sequence."""
        if not self.last_layer_targets_only:
            return False
        if not self.training and not self.targets_only_eval:
            reason = "evaluation (targets_only_eval=False)"
        elif self.training and self.stu_layers[-1].dropout > 0:
            reason = "training with dropout: these kernels cannot draw the full layer's mask for the candidate rows"
        elif num_candidates.numel() == 0 or bool((num_candidates != 1).any()):
            reason = "not exactly one target per sequence"
        else:
            return True
        if reason not in _TARGETS_ONLY_DECLINED:
            _TARGETS_ONLY_DECLINED.add(reason)
            logger.warning("last STU layer: the full layer for this batch (%s)", reason)
        return False

    def sequence_lengths(self, batch: HSTUBatch) -> torch.Tensor:
        """Per-sample STU sequence lengths (contextual prefix + history + candidates)."""
        return batch.uih_lengths + batch.num_candidates + self.num_contextual

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Weighted BCE over tasks, scaled by the reference's multitask weight (0.2)."""
        if labels.dim() == 1:
            labels = labels.unsqueeze(-1)
        per_task = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, labels.to(logits.dtype).expand_as(logits), reduction="none"
        ).mean(dim=0)
        weights = torch.tensor([t.weight for t in self.tasks], dtype=per_task.dtype, device=per_task.device)
        return self.config.bce_weight * (per_task * weights).sum()
