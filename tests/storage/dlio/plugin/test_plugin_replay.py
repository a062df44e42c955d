"""replay(reader="plugin") up to DLIO: the plugin workload, its checks, the CLI and the result (fast)."""

from __future__ import annotations

import json

import pytest
import yaml

from storage.dlio.replay import generic as replay_module
from storage.dlio.replay import cli as replay_cli
from storage.dlio.replay import choice as replays_module
from storage.dlio.export.dlio2_workload import dlio_2_workload
from storage.dlio.plugin.plan import PLAN_FILE, ReadPlan, histogram_match
from storage.dlio.plugin.workload import (READER_CLASS, PluginReplayResult, dlio_data_wait, plugin_workload,
                                                 write_plugin_workload)
from storage.dlio.replay.generic import ReplayError, check_workload
from storage.dlio.replay.choice import replay
from storage.load_profile.session import write_profile
from tests.storage.load_profile.workload_profiles import BENCHMARKS, workload_profile


@pytest.fixture(autouse=True)
def no_dlio_env(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("the DLIO env was asked for")

    monkeypatch.setattr(replay_module, "ensure_dlio_env", refuse)


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_the_plugin_workload_is_the_generic_one_reading_through_the_plugin(benchmark, tmp_path):
    profile = workload_profile(benchmark, world_size=2)
    name, text, plan = plugin_workload(profile, seed=9)
    body, generic = yaml.safe_load(text), yaml.safe_load(dlio_2_workload(profile)[1])
    assert body["reader"].pop("reader_classname") == READER_CLASS
    # a trainer that streamed its shards is replayed file after file (DLIO's sampler unshuffled)
    assert body["reader"].pop("sample_shuffle") == ("off" if plan.in_file_order else "seed")
    assert plan.in_file_order == (benchmark == "flux")
    generic["reader"].pop("sample_shuffle")
    assert body["reader"] == generic["reader"] and body["train"] == dict(generic["train"], seed=9)
    dataset = body["dataset"]
    assert dataset["format"] == "indexed_binary"
    assert (dataset["num_files_train"], dataset["num_samples_per_file"]) == (plan.files, plan.samples_per_file)
    assert dataset["record_length"] == round(plan.profile["bytes_per_sample"])
    assert "file_prefix" not in dataset and name == body["model"]
    check_workload(tmp_path / "w.yaml", body, world_size=2)  # nothing DLIO 2.0.0 trips on
    assert plan.seed == 9 and f"layout {plan.layout}" in text and f"read by {plan.access}" in text
    assert "sample_shuffle: 'off'" in text or not plan.in_file_order  # quoted: a bare off is YAML's false


def test_write_plugin_workload_writes_yaml_and_plan(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, workload_profile("flux"))
    written = write_plugin_workload(run)
    assert written.yaml_path == run / "dlio" / "dlio-2.0.0-plugin" / "workload" / "flux_plugin.yaml"
    assert written.plan_path == run / "dlio" / "dlio-2.0.0-plugin" / PLAN_FILE
    assert ReadPlan.load(written.plan_path) == written.plan
    assert not list(run.rglob("*.tmp"))


def test_plugin_replay_fails_on_the_inputs_as_the_generic_one(tmp_path):
    with pytest.raises(ReplayError, match="not a directory"):
        replay(tmp_path / "nowhere", reader="plugin")
    run = tmp_path / "run"
    run.mkdir()
    profile = workload_profile("flux")
    del profile["totals"]["au"]
    write_profile(run, profile)
    with pytest.raises(ReplayError, match=r"totals\.au"):
        replay(run, reader="plugin")
    with pytest.raises(ReplayError, match="reader 'other' is not one of generic, plugin") as caught:
        replay(run, reader="other")
    assert "\n" not in str(caught.value)


def test_cli_passes_the_reader(monkeypatch, tmp_path):
    seen = {}

    def fake_replay(run_dir, **kwargs):
        seen.update(kwargs, run_dir=run_dir)

    monkeypatch.setattr(replays_module, "replay", fake_replay)
    assert replay_cli.main(["replay", str(tmp_path), "--reader", "plugin"]) == 0
    assert seen["reader"] == "plugin" and seen["run_dir"] == tmp_path
    assert replay_cli.main([str(tmp_path)]) == 0 and seen["reader"] == "generic"
    with pytest.raises(SystemExit):
        replay_cli.main([str(tmp_path), "--reader", "nope"])


def test_dlio_data_wait_leaves_out_the_warmup_steps(tmp_path):
    rank = {"1": {"load": {"block1": [5.0, 5.0, 5.0, 0.002, 0.004]}, "proc": {}}, "hostname": "h"}
    (tmp_path / "0_output.json").write_text(json.dumps(rank))
    (tmp_path / "1_output.json").write_text(json.dumps({"1": {"load": {"block1": [9, 9, 9, 0.006]}}}))
    assert dlio_data_wait(tmp_path) == pytest.approx(0.004)
    assert dlio_data_wait(tmp_path / "none") is None


def _result(tmp_path, generic):
    hist = [0] * 8 + [1, 0, 0, 0, 0, 3]
    reads = {"samples": 10, "reads_per_sample": 4.0, "mean_size": 6304.0, "bytes_per_sample": 25216.0,
             "sequential_fraction": 0.0, "files_opened": 3, "size_log2_histogram": hist}
    return PluginReplayResult(
        benchmark="flux", workload="flux_plugin", dataset_format="indexed_binary", world_size=1,
        measured={"samples_per_s": 100.0, "mb_per_s": 2.5, "au": 0.9},
        replayed={"samples_per_s": 95.0, "mb_per_s": 2.4, "au": 0.88}, bytes_per_sample=25216.0,
        read_per_sample=25216.0, process_reads={"train": None}, dlio_nominal_mib_per_s=2.3, replayed_steps=30, seconds={}, commands={}, result_path=tmp_path / "r.json",
        layout="shards", reads={"profile": reads, "plugin": reads, "histogram": histogram_match(hist, hist)},
        data_wait_s={"measured": 0.001, "replayed": None}, generic=generic)


def test_result_table_and_json(tmp_path):
    alone = _result(tmp_path, None).table()
    assert "within one bin per read" in alone and "[2^13, 2^14)" in alone and "n/a" in alone
    table = _result(tmp_path, {"samples_per_s": 97.0, "mb_per_s": 2.45, "au": 0.89, "data_wait_s": 0.002,
                               "bytes_per_sample": 25281, "dataset_format": "indexed_binary"}).table()
    assert "97.00" in table and "2.000" in table and "generic:" in table
    saved = json.loads(json.dumps(_result(tmp_path, None).as_json()))
    assert saved["reader"] == "plugin" and saved["reads"]["histogram"]["within_one_bin"]
    assert saved["ratio"]["samples_per_s"] == pytest.approx(0.95)
