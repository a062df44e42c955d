"""DLRM-HSTU as a whole: shapes, gradients reach every parameter, candidate/batch isolation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from recommendation_v4.data import features as F
from recommendation_v4.model.flavors import FLAVORS
from recommendation_v4.model import dlrm_hstu
from recommendation_v4.model.dlrm_hstu import DlrmHSTU, embedding_tables
from recommendation_v4.model.param_count import count_parameters
from recommendation_v4.model.stu import STULayer
from tests.recommendation_v4.conftest import TINY, open_tiny_dataset

CROSS_ROWS = {c.name: 97 for c in F.CROSS_FEATURES}


@pytest.fixture(scope="module")
def tiny_batch(tiny_data_root):
    ds = open_tiny_dataset(tiny_data_root / TINY, history_length=30, min_history=3, cross_table_rows=CROSS_ROWS)
    return ds, ds.get_batch(np.arange(0, 200, 25))


def _model(ds, **overrides) -> DlrmHSTU:
    torch.manual_seed(0)
    cfg = dataclasses.replace(FLAVORS["debug"], history_length=30, input_dropout=0.0, linear_dropout=0.0, **overrides)
    return DlrmHSTU(config=cfg, table_rows=ds.table_rows, embedding_device="cpu")


def _with_candidate(batch, sample: int, item: int):
    kjt = batch.features
    values = kjt.values().clone()
    offsets = kjt.offset_per_key()
    key = list(kjt.keys()).index(F.CAND_ITEM)
    values[offsets[key] + sample] = item
    new = type(kjt)(keys=kjt.keys(), values=values, lengths=kjt.lengths())
    return dataclasses.replace(batch, features=new)


def test_forward_backward_reaches_every_parameter(tiny_batch):
    ds, batch = tiny_batch
    model = _model(ds)
    logits = model(batch)
    assert logits.shape == (batch.batch_size, 1)
    loss = model.loss(logits, batch.labels)
    assert torch.isfinite(loss)
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.any(p.grad != 0)]
    # rows of tables not looked up have zero grads; every dense parameter must get a gradient
    assert [n for n in missing if not n.startswith("embedding_collection.")] == []


def test_candidate_change_only_moves_its_own_sample(tiny_batch):
    ds, batch = tiny_batch
    model = _model(ds).eval()
    with torch.no_grad():
        base = model(batch, max_seq_len=128)
        changed = model(_with_candidate(batch, 2, item=int(ds.id_rows["item_id"]) - 1), max_seq_len=128)
    moved = (base - changed).abs().squeeze(-1) > 1e-7
    assert moved.tolist() == [i == 2 for i in range(batch.batch_size)]


def test_history_is_used(tiny_batch):
    ds, batch = tiny_batch
    model = _model(ds).eval()
    actions = batch.action_weight.clone()
    first = int(batch.uih_lengths[0])  # sample 0's history rows come first
    actions[:first] = actions[:first] ^ 5  # swap listen+ and skip pools of sample 0
    with torch.no_grad():
        base = model(batch, max_seq_len=128)
        changed = model(dataclasses.replace(batch, action_weight=actions), max_seq_len=128)
    moved = (base - changed).abs().squeeze(-1) > 1e-7
    assert moved.tolist() == [i == 0 for i in range(batch.batch_size)]


def test_targets_do_not_see_each_other_and_history_is_causal():
    torch.manual_seed(0)
    layer = STULayer(embedding_dim=8, num_heads=2, attn_qk_dim=4, attn_linear_dim=4, dropout=0.0).double().eval()
    x = torch.randn(9, 8, dtype=torch.float64)  # one user: 6 history rows + 3 candidates
    offsets, targets = torch.tensor([0, 9]), torch.tensor([3])
    base = layer(x=x, seq_offsets=offsets, max_seq_len=9, num_targets=targets)
    x2 = x.clone()
    x2[7] += torch.randn(8, dtype=torch.float64)  # change candidate 2 (row 7); not a constant shift, LN would erase it
    out = layer(x=x2, seq_offsets=offsets, max_seq_len=9, num_targets=targets)
    unchanged = [i for i in range(9) if torch.equal(base[i], out[i])]
    assert unchanged == [0, 1, 2, 3, 4, 5, 6, 8]
    x3 = x.clone()
    x3[4] += torch.randn(8, dtype=torch.float64)  # change history row 4: rows 0..3 must not move, everything after does
    out = layer(x=x3, seq_offsets=offsets, max_seq_len=9, num_targets=targets)
    assert [i for i in range(9) if torch.equal(base[i], out[i])] == [0, 1, 2, 3]


def test_reference_parameter_count_is_pinned():
    counts = count_parameters("reference")
    assert len(counts.per_table) == 11
    assert counts.per_table["item_id"] == 9_390_624 * 512
    assert counts.embedding == 150_042_476_544  # ~293M rows x 512: ~600 GB in fp32
    assert counts.dense == 13_145_905
    assert counts.total == 150_055_622_449


def test_table_rows_must_name_exactly_the_tables():
    rows = {name: 10 for name in F.TABLE_FEATURES}
    rows.pop("uid")
    rows["user"] = 10
    with pytest.raises(ValueError, match=r"missing \['uid'\], unknown \['user'\]"):
        embedding_tables(table_rows=rows, embedding_dim=8)


def test_history_length_must_fit_max_seq_len():
    with pytest.raises(ValueError, match="history_length=4096 needs sequences of 4104 rows"):
        dataclasses.replace(FLAVORS["reference"], history_length=4096)


def test_last_layer_targets_only_gives_the_same_logits_and_declines_where_it_cannot(tiny_batch, caplog):
    """TrainConfig.last_layer_targets_only (the reference's TRITON_HSTU_LAST_LAYER_TARGETS_ONLY): the
    same logits in evaluation and, dropout off, the same gradients in training; with dropout on, or
    with targets_only_eval off in evaluation, the full layer runs and says why once."""
    ds, batch = tiny_batch
    full, only = _model(ds), _model(ds)
    only.last_layer_targets_only = True
    with torch.no_grad():
        torch.testing.assert_close(only.eval()(batch, max_seq_len=128), full.eval()(batch, max_seq_len=128))
    full.train().loss(full(batch), batch.labels).backward()
    only.train().loss(only(batch), batch.labels).backward()
    for (name, a), (_, b) in zip(full.named_parameters(), only.named_parameters()):
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert only._targets_only(torch.ones(3, dtype=torch.int64)) and not only._targets_only(torch.tensor([1, 2]))
    only.stu_layers[-1].dropout = 0.1
    dlrm_hstu._TARGETS_ONLY_DECLINED.clear()  # said once per process: this test's own line
    with caplog.at_level("WARNING"):
        assert not only._targets_only(torch.ones(3, dtype=torch.int64))
    assert "training with dropout" in caplog.text
    only.targets_only_eval = False
    assert not only.eval()._targets_only(torch.ones(3, dtype=torch.int64))
