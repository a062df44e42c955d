"""DLRM-HSTU model sizes as named flavors (dataclasses), from tiny CPU debug to the reference."""

from __future__ import annotations

import dataclasses

from recommendation_v4.data import features as F


@dataclasses.dataclass(frozen=True)
class HSTUFlavor:
    """Architecture of DLRM-HSTU. Table row counts live apart (they depend on the data)."""

    embedding_dim: int  # every embedding table's dim
    transducer_dim: int  # D, the width of the STU stack
    num_layers: int
    num_heads: int
    attn_qk_dim: int  # per head
    attn_linear_dim: int  # per head (v and u)
    history_length: int  # L: each of the 3 pools contributes L // 3 events
    max_seq_len: int  # positional table size; must cover history + contextual prefix + candidate
    preprocessor_hidden_dim: int = 256
    item_mlp_hidden_dim: int = 512
    head_hidden_dim: int = 512
    input_dropout: float = 0.2
    linear_dropout: float = 0.1
    action_embedding_dim: int = 8
    action_embedding_init_std: float = 0.1
    num_time_buckets: int = 2048
    layer_norm_eps: float = 1e-6
    bce_weight: float = 0.2  # the reference scales the (masked) BCE by this factor

    def __post_init__(self) -> None:
        needed = F.max_sequence_length(self.history_length)
        if needed > self.max_seq_len:
            raise ValueError(
                f"history_length={self.history_length} needs sequences of {needed} rows "
                f"(3*(L//3) history + {F.SEQUENCE_OVERHEAD}), more than max_seq_len={self.max_seq_len}"
            )
        for name in ("embedding_dim", "transducer_dim", "num_layers", "num_heads", "attn_qk_dim", "attn_linear_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"HSTUFlavor.{name} must be positive, got {getattr(self, name)}")


FLAVORS: dict[str, HSTUFlavor] = {
    # Trains in minutes on a 2-core CPU on the "small" synthetic dataset.
    "debug": HSTUFlavor(
        embedding_dim=32,
        transducer_dim=64,
        num_layers=2,
        num_heads=2,
        attn_qk_dim=32,
        attn_linear_dim=32,
        history_length=60,
        max_seq_len=128,
        preprocessor_hidden_dim=64,
        item_mlp_hidden_dim=64,
        head_hidden_dim=64,
    ),
    # MLPerf Training 6.1 DLRMv4 (PR #889 head): 3 STU layers, 4 heads, 128-dim qk/v, D=512,
    # 11 tables of dim 512; history 4086 = 3 pools x 1362 events, + 9 rows (uid, 7 crosses, the
    # candidate) = 4095 rows, within max_seq_len 4096.
    "reference": HSTUFlavor(
        embedding_dim=512,
        transducer_dim=512,
        num_layers=3,
        num_heads=4,
        attn_qk_dim=128,
        attn_linear_dim=128,
        history_length=4086,
        max_seq_len=4096,
    ),
}


def reference_table_rows() -> dict[str, int]:
    """Row counts of the 11 reference tables (entity counts of Yambda-5b + hashed cross sizes)."""
    rows = dict(F.REFERENCE_ENTITY_ROWS)
    rows.update({c.name: c.num_embeddings for c in F.CROSS_FEATURES})
    return rows


def get_flavor(name: str) -> HSTUFlavor:
    if name not in FLAVORS:
        raise KeyError(f"unknown DLRM-HSTU flavor {name!r}; known: {sorted(FLAVORS)}")
    return FLAVORS[name]
