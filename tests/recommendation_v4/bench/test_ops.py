"""The op benchmark runs end to end at a tiny size and reports every op."""

from __future__ import annotations

import json

from recommendation_v4.bench import ops as bench


def test_bench_reports_every_op_and_says_why_triton_is_skipped_on_cpu(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    argv = ["--batch-size", "3", "--batch-fraction", "1", "--max-seq-len", "24", "--heads", "2", "--attn-dim", "8",
            "--hidden-dim", "8", "--model-dim", "16", "--warmup", "0", "--reps", "1", "--json-out", str(out)]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["batch"] == 3 and record["max_seq_len"] == 24
    seen = {(r["op"], r["passes"], r["kernel"]) for r in record["results"]}
    assert seen == {(op, p, "PYTORCH") for op in bench.OPS for p in ("fwd", "fwd+bwd")}
    assert all(r["ms"] > 0 and r["rate"] > 0 for r in record["results"])
    assert "TRITON skipped" in printed


def test_attention_flops_count_only_visible_pairs() -> None:
    import torch

    shapes = bench.Shapes(
        batch=2, max_seq_len=4, heads=3, attn_dim=5, hidden_dim=7, model_dim=8, dtype=torch.float32,
        lengths=torch.tensor([4, 1]),
    )
    # causal pairs: 4*5/2 + 1 = 11; per pair 2 * (5 + 7) flops per head
    assert bench._attention_flops(shapes) == 2.0 * 3 * 11 * 12
