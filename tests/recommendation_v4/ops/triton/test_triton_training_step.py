"""A DLRM-HSTU training step with TRITON kernels (interpreted) matches the PYTORCH step.

Debug flavor at a short history (sequences of at most 12 + 9 rows), dropout off: the two
paths draw dropout randomness differently (Philox in the kernel vs torch's RNG), so equal
losses need deterministic layers; dropout parity itself is covered by the shared-mask tests.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from recommendation_v4.data import features as F
from recommendation_v4.data.dataset import YambdaDataset
from recommendation_v4.model.flavors import FLAVORS
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.ops import HammerKernel
from recommendation_v4.ops.triton import hstu_attention, jagged, layer_norm, ln_mul_dropout
from tests.recommendation_v4.conftest import TINY, open_tiny_dataset
from tests.recommendation_v4.ops.hstu_ops_testing import kernel_test_device

DEVICE = kernel_test_device()

HISTORY = 12


def _step(kernel: HammerKernel, dataset: YambdaDataset, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    config = dataclasses.replace(FLAVORS["debug"], history_length=HISTORY, input_dropout=0.0, linear_dropout=0.0)
    model = DlrmHSTU(config=config, table_rows=dataset.table_rows, embedding_device="cpu", kernel=kernel)
    model = model.to(DEVICE).train()
    batch = batch.to(DEVICE)
    loss = model.loss(model(batch), batch.labels)
    loss.backward()
    grads = {name: p.grad.to_dense() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def _count_calls(monkeypatch, module, name: str, counts: dict[str, int]) -> None:
    original = getattr(module, name)

    def counted(**kwargs):
        counts[name] = counts.get(name, 0) + 1
        return original(**kwargs)

    monkeypatch.setattr(module, name, counted)


def test_training_step_loss_and_gradients_match(tiny_data_root, monkeypatch) -> None:
    counts: dict[str, int] = {}
    for module, name in (
        (hstu_attention, "triton_hstu_mha"),
        (jagged, "triton_concat_2d_jagged"),
        (jagged, "triton_split_2d_jagged"),
        (layer_norm, "triton_layer_norm"),
        (ln_mul_dropout, "triton_ln_mul_dropout"),
    ):
        _count_calls(monkeypatch, module, name, counts)
    dataset = open_tiny_dataset(tiny_data_root / TINY, history_length=HISTORY, min_history=3,
                                cross_table_rows={c.name: 97 for c in F.CROSS_FEATURES})
    batch = dataset.get_batch(np.arange(0, 160, 20))
    assert int(batch.uih_lengths.max()) > int(batch.uih_lengths.min())  # a genuinely jagged batch
    loss_pt, grads_pt = _step(HammerKernel.PYTORCH, dataset, batch)
    assert counts == {}
    loss_tr, grads_tr = _step(HammerKernel.TRITON, dataset, batch)
    layers = FLAVORS["debug"].num_layers
    assert counts["triton_hstu_mha"] == layers and counts["triton_ln_mul_dropout"] == layers
    assert counts["triton_concat_2d_jagged"] >= 3 and counts["triton_split_2d_jagged"] == 1
    assert counts["triton_layer_norm"] >= layers  # the STU input norms (plus the model's own)
    torch.testing.assert_close(loss_tr, loss_pt, rtol=1e-5, atol=1e-6)
    assert grads_tr.keys() == grads_pt.keys()
    stu_params = [n for n in grads_pt if n.startswith("stu_layers.")]
    assert stu_params, "the STU layers must receive gradients"
    for name in grads_pt:
        torch.testing.assert_close(grads_tr[name], grads_pt[name], rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
