"""Full autotune under the interpreter: every op searched, winners printed in the table format."""

from __future__ import annotations

import json

import pytest

from recommendation_v4.ops.kernel import interpreter_enabled
from recommendation_v4.ops.triton import autotune_winners, tuning
from recommendation_v4.ops.triton.arch import INTERPRETER

from tests.environment import accelerator_skipif


@accelerator_skipif(not interpreter_enabled(), reason="searches the tiny interpreter space; on a GPU run the command itself")
def test_search_prints_a_table_fragment_that_pins_back_to_the_winners(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setenv("TRITON_FULL_AUTOTUNE", "0")
    monkeypatch.setattr(tuning, "_winners", {})
    table_file = tmp_path / "table.json"
    table_file.write_text(json.dumps({"format": 1, "archs": {}}))
    argv = ["--batch-size", "2", "--max-seq-len", "20", "--heads", "1", "--attn-dim", "16", "--hidden-dim", "16",
            "--model-dim", "16", "--dtype", "float32", "--merge-into", str(table_file)]
    assert autotune_winners.main(argv) == 0
    fragment = json.loads(capsys.readouterr().out)["archs"]
    assert set(fragment) == {"interpreter"}
    assert set(fragment["interpreter"]) == set(tuning.OPS)
    for op, per_key in fragment["interpreter"].items():
        space = tuning.search_space(facts=INTERPRETER, op=op)
        assert all(cfg in space for cfg in per_key.values()), op

    # The merge says where the winners were timed, when, and with what.
    measured = json.loads(table_file.read_text())["measured"]["interpreter"]
    assert measured["device"] == "the Triton interpreter on a CPU" and measured["shapes"]["max_seq_len"] == 20
    assert measured["date"] and measured["torch"] and measured["triton"]

    # The merged file now pins exactly what the search chose.
    monkeypatch.setenv("TRITON_FULL_AUTOTUNE", "0")
    monkeypatch.setenv("HSTU_AUTOTUNE_TABLE", str(table_file))
    tuning._load_table.cache_clear()
    for op, per_key in fragment["interpreter"].items():
        for key, cfg in per_key.items():
            assert tuning.pinned_config(facts=INTERPRETER, op=op, key=key) == cfg
    tuning._load_table.cache_clear()
