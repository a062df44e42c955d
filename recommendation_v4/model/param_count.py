"""Parameter counts of a DLRM-HSTU flavor, built entirely on the meta device (no memory)."""

from __future__ import annotations

import dataclasses

import torch

from recommendation_v4.model.flavors import FLAVORS, reference_table_rows
from recommendation_v4.model.dlrm_hstu import DlrmHSTU


@dataclasses.dataclass(frozen=True)
class ParamCount:
    embedding: int
    dense: int
    per_table: dict[str, int]

    @property
    def total(self) -> int:
        return self.embedding + self.dense


def count_parameters(flavor: str, table_rows: dict[str, int] | None = None) -> ParamCount:
    with torch.device("meta"):
        model = DlrmHSTU(config=FLAVORS[flavor], table_rows=table_rows or reference_table_rows())
    per_table = {
        cfg.name: cfg.num_embeddings * cfg.embedding_dim for cfg in model.embedding_collection.embedding_configs()
    }
    dense = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("embedding_collection."))
    return ParamCount(embedding=sum(per_table.values()), dense=dense, per_table=per_table)
