"""storage.compute_times.training_logs: compute-time rows from MLPerf Training result logs, on logs in the published
submissions' shapes (NeMo's train_step_time, the reference RetinaNet's epochs, a systems/ folder, a
:::SYSJSON line) and on the logs this project's own trainers write."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from common import registry
from storage.compute_times.tables import load
from storage.compute_times.training_logs import main, read_log, short_accelerator_name, table_rows
from tests.trainers.trainer_process import REPO

RETINANET_IMAGES = 1_170_301  # OpenImages' training set, as the reference logs its epochs against


def _mllog(key: str, value, time_ms: int, **metadata) -> str:
    record = {"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME", "key": key, "value": value,
              "metadata": {"file": "train.py", "lineno": 1, **metadata}}
    return ":::MLLOG " + json.dumps(record)


def _nemo_flux_log(step_times: list[float], *, global_batch: int = 1024, prefix: str = " 0: ") -> str:
    """A FLUX.1 log as NeMo's callbacks write it: a block of 256 steps, then its train_step_time."""
    t = 1_760_000_000_000
    lines = ["+ echo 'Beginning trial 1 of 6'", prefix + _mllog("submission_benchmark", "flux1", t),
             prefix + _mllog("submission_platform", "4xSUBMISSION_PLATFORM_PLACEHOLDER", t),
             prefix + _mllog("global_batch_size", global_batch, t)]
    for i, seconds in enumerate(step_times):
        lines.append(prefix + _mllog("block_start", None, t, samples_count=262144, step=256 * i))
        t += int(seconds * 256 * 1000)
        lines.append(prefix + _mllog("block_stop", None, t, samples_count=262144, step=256 * (i + 1)))
        lines.append(prefix + _mllog("tracked_stats", {"train_step_time": seconds}, t, samples_count=262144))
    return "\n".join(lines) + "\n"


def _reference_retinanet_log(epoch_seconds: list[float], *, global_batch: int = 256, throughput: float = 306.3,
                             sysjson: dict | None = None) -> str:
    """The reference RetinaNet's log: train_samples is its loader's length (steps), throughput per GPU
    in this submitter's code."""
    t = 1_745_000_000_000
    steps = -(-RETINANET_IMAGES // global_batch)
    lines = []
    if sysjson is not None:
        lines.append("+ echo ':::SYSJSON {\"submitter\":\"UNKNOWN\"'")  # the shell's echo of the command: not JSON
        lines.append(":::SYSJSON " + json.dumps(sysjson))
    lines += [_mllog("submission_benchmark", "retinanet", t), _mllog("global_batch_size", global_batch, t),
              _mllog("train_samples", steps, t)]
    for epoch, seconds in enumerate(epoch_seconds):
        lines.append(_mllog("epoch_start", epoch, t, epoch_num=epoch))
        t += int(seconds * 1000)
        lines.append(_mllog("epoch_stop", epoch, t, epoch_num=epoch))
        lines.append(_mllog("tracked_stats", {"throughput": throughput}, t, step=epoch + 1))
        t += 30_000  # the evaluation between epochs is not training
    return "\n".join(lines) + "\n"


def _submission(root: Path, *, round_name: str, org: str, system: str, benchmark: str, logs: dict[str, str],
                description: dict) -> Path:
    """<root>/training_results_<round>/<org>/{results/<system>/<benchmark>/<log>, systems/<system>.json}."""
    base = root / f"training_results_{round_name}" / org
    folder = base / "results" / system / benchmark
    folder.mkdir(parents=True)
    for name, text in logs.items():
        (folder / name).write_text(text)
    (base / "systems").mkdir(parents=True)
    (base / "systems" / f"{system}.json").write_text(json.dumps(description))
    return folder


B200_NODE = {"number_of_nodes": "4", "accelerators_per_node": "8", "system_name": "Four B200 nodes",
             "accelerator_model_name": "NVIDIA Blackwell GPU (B200-SXM-180GB)"}


def test_a_nemo_flux_submission_gives_its_median_step_time_per_accelerator(tmp_path):
    folder = _submission(tmp_path, round_name="v5.1", org="Org", system="b200_n4", benchmark="flux1",
                         logs={"result_01.txt": _nemo_flux_log([0.64, 0.62, 0.61])}, description=B200_NODE)
    row = read_log(folder / "result_01.txt")
    assert (row.benchmark, row.accelerator, row.accelerators, row.global_batch) == ("flux1", "b200", 32, 1024)
    assert row.batch_per_accelerator == 32 and row.seconds_per_step == pytest.approx(0.62)
    assert row.samples_per_second_per_accelerator == pytest.approx(32 / 0.62)
    assert row.method == "train_step_time (median of 3)"
    assert (row.system, row.round) == ("Four B200 nodes", "v5.1")


def test_the_reference_retinanet_epochs_count_steps_and_its_throughput_is_not_trusted(tmp_path):
    # 4,572 steps of 256 in 300 s: 0.0656 s per step; the logged throughput (306, per GPU here) would say 0.836 s
    log = tmp_path / "result_0.txt"
    log.write_text(_reference_retinanet_log([310.0, 300.0, 300.0, 301.0], sysjson={
        "number_of_nodes": "1", "accelerators_per_node": "8", "accelerator_model_name": "NVIDIA H200-SXM-141GB"}))
    row = read_log(log)
    assert (row.accelerator, row.accelerators, row.batch_per_accelerator) == ("h200", 8, 32)
    assert row.seconds_per_step == pytest.approx(300.5 / 4572, rel=1e-3)
    assert row.method == "epochs (median of 4)" and row.round == ""


def test_our_kind_of_log_counts_blocks_by_samples_and_a_wrong_dataset_size_is_read_as_samples(tmp_path):
    t = 1_790_000_000_000
    lines = [_mllog("submission_benchmark", "retinanet", t), _mllog("submission_platform", "cpu", t),
             _mllog("global_batch_size", 8, t), _mllog("train_samples", 32, t)]  # samples, as ours logs them
    for epoch in range(3):
        lines += [_mllog("epoch_start", None, t, epoch_num=epoch)]
        t += 400
        lines += [_mllog("epoch_stop", None, t, epoch_num=epoch)]
        t += 50
    log = tmp_path / "mllog.log"
    log.write_text("\n".join(lines) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"world_size": 2}))
    row = read_log(log)
    assert row.seconds_per_step == pytest.approx(0.1) and row.accelerators == 2 and row.batch_per_accelerator == 4
    blocks = [_mllog("submission_benchmark", "dlrm_v4", t), _mllog("global_batch_size", 128, t)]
    for start, seconds in ((0, 2.0), (1280, 1.0), (2560, 1.1)):
        blocks.append(_mllog("block_start", None, t, samples_count=start))
        t += int(seconds * 1000)
        blocks.append(_mllog("block_stop", None, t, samples_count=start + 1280))  # 10 steps each
    log.write_text("\n".join(blocks) + "\n")
    row = read_log(log, accelerator="mi350x")
    assert row.seconds_per_step == pytest.approx(0.11) and row.method == "blocks (median of 3)"
    assert row.accelerator == "mi350x" and row.batch_per_accelerator == 64


def test_short_accelerator_names():
    assert short_accelerator_name("NVIDIA Blackwell GPU (B200-SXM-180GB)") == "b200"
    assert short_accelerator_name("NVIDIA GB200") == "gb200"
    assert short_accelerator_name("AMD Instinct MI355X") == "mi355"
    assert short_accelerator_name("NVIDIA H100-SXM5-80GB") == "h100"
    assert short_accelerator_name("NVIDIA GeForce RTX 4090") == "rtx4090"
    assert short_accelerator_name("Some New Chip 9") == "some-new-chip-9"


def test_the_table_keeps_per_accelerator_the_system_that_asks_most_and_loads_as_a_compute_time_table(tmp_path):
    _submission(tmp_path, round_name="v5.1", org="A", system="n4", benchmark="flux1", description=B200_NODE,
                logs={f"result_0{i}.txt": _nemo_flux_log([0.62 + i / 100]) for i in range(3)})
    big = {**B200_NODE, "number_of_nodes": "16", "system_name": "Sixteen"}
    _submission(tmp_path, round_name="v5.1", org="B", system="n16", benchmark="flux1", description=big,
                logs={"result_01.txt": _nemo_flux_log([0.40], global_batch=2048)})  # 16 per GPU: 40/s, less
    table = tmp_path / "table.csv"
    assert main([str(tmp_path), "--benchmark", "flux1", "--table", str(table), "--sources-relative-to",
                 str(tmp_path), "--origin", "test logs"]) == 0
    rows = load(registry.find("flux"), table)
    assert list(rows) == ["b200"]
    b200 = rows["b200"]
    assert b200.seconds_per_step == pytest.approx(0.63) and b200.batch_per_accelerator == 32  # the median of 3
    assert "v5.1 Four B200 nodes, 32x b200" in b200.source and "training_results_v5.1/A/results/n4/flux1" in b200.source
    assert b200.au_threshold == registry.find("flux").storage.au_threshold
    assert "# logs: test logs" in table.read_text()
    assert [line["accelerator"] for line in table_rows([])] == []


@pytest.mark.parametrize(("text", "message"), [
    ("just a training log\n", "no :::MLLOG lines"),
    (_mllog("global_batch_size", 8, 1) + "\n:::MLLOG {not json\n", ":2: an MLLOG line that is not JSON"),
    (_mllog("submission_benchmark", "flux1", 1) + "\n", "no global_batch_size"),
    (_mllog("global_batch_size", 8, 1) + "\n", "no step time"),
    (_nemo_flux_log([0.6]), "how many accelerators ran it"),
])
def test_a_log_it_cannot_read_exits_3_naming_the_file(tmp_path, capsys, text, message):
    log = tmp_path / "result_0.txt"
    log.write_text(text)
    assert main([str(log)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"data error: {log}") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("time_ms", ['"12:00:01"', "null", "true", "1e999"])
def test_a_time_ms_that_is_not_a_number_exits_3_naming_the_line(tmp_path, capsys, time_ms):
    log = tmp_path / "result_0.txt"
    log.write_text(_nemo_flux_log([0.6]) + ':::MLLOG {"key": "run_stop", "value": null, "time_ms": ' + time_ms + "}\n")
    line = len(log.read_text().splitlines())
    assert main([str(log), "--accelerators", "8", "--accelerator", "b200"]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"data error: {log}:{line}: time_ms ") and "is not a number" in err and err.count("\n") == 1


def test_a_foreign_file_among_the_logs_is_skipped_with_a_note_and_other_benchmarks_are_passed_over(tmp_path, capsys):
    folder = _submission(tmp_path, round_name="v5.0", org="Org", system="four_b200", benchmark="flux1",
                         logs={"result_0.txt": _nemo_flux_log([0.6]), "result_1.txt": "a shell transcript\n",
                               # another benchmark's log without what this reader needs: not read with --benchmark
                               "result_2.txt": _mllog("submission_benchmark", "llama31_8b", 1) + "\n"},
                         description=B200_NODE)
    assert main([str(tmp_path), "--benchmark", "flux1", "--csv", str(tmp_path / "rows.csv")]) == 0
    out, err = capsys.readouterr()
    assert err == f"note: skipped {folder / 'result_1.txt'}: no :::MLLOG lines (not an MLPerf Training log)\n"
    assert len((tmp_path / "rows.csv").read_text().splitlines()) == 2 and "1 rows -> " in out
    assert main([str(tmp_path), "--benchmark", "retinanet"]) == 3
    assert capsys.readouterr().err == (f"data error: no MLPerf Training log of --benchmark retinanet found under "
                                       f"{tmp_path} (1 file(s) skipped: no :::MLLOG lines)\n")


def test_an_output_that_cannot_be_written_is_one_line_with_status_2(tmp_path, capsys):
    log = tmp_path / "result_0.txt"
    log.write_text(_nemo_flux_log([0.6]))
    given = [str(log), "--accelerators", "8", "--accelerator", "b200"]
    assert main([*given, "--csv", str(tmp_path / "absent" / "rows.csv")]) == 2
    assert capsys.readouterr() == ("", f"error: --csv {tmp_path / 'absent' / 'rows.csv'}: its folder "
                                       f"{tmp_path / 'absent'} does not exist\n")
    assert main([*given, "--table", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: --table {tmp_path}: is a folder\n"
    dangling = tmp_path / "rows.csv"
    dangling.symlink_to(tmp_path / "absent" / "target.csv")  # its folder is there; the write fails
    assert main([*given, "--csv", str(dangling)]) == 2
    assert capsys.readouterr().err == f"error: --csv {dangling}: cannot be written (No such file or directory)\n"


def test_flags_and_usage(tmp_path, capsys):
    log = tmp_path / "result_0.txt"
    log.write_text(_nemo_flux_log([0.6]))
    assert main([str(log), "--accelerators", "8"]) == 3  # the accelerator's name is still unknown
    assert "pass --accelerator" in capsys.readouterr().err
    assert main([str(log), "--accelerators", "8", "--accelerator", "B200", "--round", "v9.9",
                 "--csv", str(tmp_path / "rows.csv")]) == 0
    csv_text = (tmp_path / "rows.csv").read_text().splitlines()
    assert csv_text[0].startswith("benchmark,accelerator,accelerators,batch_per_accelerator,seconds_per_step")
    assert csv_text[1].startswith("flux1,b200,8,128,0.6,213.33,train_step_time (median of 1),")
    assert ",v9.9," in csv_text[1]
    assert main([str(log), "--accelerators", "0"]) == 2
    assert main([str(tmp_path / "absent")]) == 3 and "no such file or folder" in capsys.readouterr().err
    other = tmp_path / "result_1.txt"
    other.write_text(_reference_retinanet_log([300.0]))
    assert main([str(tmp_path), "--accelerators", "8", "--accelerator", "b200", "--table", str(tmp_path / "t.csv")]) == 2
    assert "add --benchmark" in capsys.readouterr().err


@pytest.mark.multiprocess
@pytest.mark.over_budget(reason="a 2-rank RetinaNet run whose logs it reads")
def test_the_logs_of_our_own_two_rank_retinanet_run(tmp_path):
    """A real run of this project's RetinaNet trainer on 2 gloo ranks: the row holds its world size, its
    per-rank batch and the step time its epochs took, which its metrics log's steps agree with."""
    from retinanet.data.synthetic import SYNTHETIC_SIZES, generate_synthetic_dataset
    from tests.retinanet.trainer_runs import DEBUG_GIN, TINY_DATASET, tiny_bindings
    from tests.trainers.trainer_process import run_command, trainer_command

    generate_synthetic_dataset(tmp_path / "data" / "retinanet" / TINY_DATASET, size=SYNTHETIC_SIZES["tiny"], seed=0,
                               progress=False)
    bindings = tiny_bindings(data_root=tmp_path / "data", output_root=tmp_path / "runs", run_name="r", epochs=3)
    run_command(trainer_command(package="retinanet", gin_file=DEBUG_GIN, nproc=2, bindings=bindings), timeout=600)
    run = tmp_path / "runs" / "retinanet" / "r"
    proc = subprocess.run([sys.executable, "-m", "storage.compute_times.training_logs", str(tmp_path / "runs")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    row = read_log(run / "mllog.log")
    assert (row.benchmark, row.accelerator, row.accelerators, row.global_batch) == ("retinanet", "cpu", 2, 8)
    assert row.batch_per_accelerator == 4 and row.method == "epochs (median of 3)"
    # 32 images, 8 per step: 4 steps per epoch; the metrics log's steps, each its data wait and compute
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "compute_s" in r]  # not the evaluations' lines
    assert len(steps) == 12
    per_epoch = [sum(s["data_wait_s"] + s["compute_s"] for s in steps[i:i + 4]) / 4 for i in (0, 4, 8)]
    expected = statistics.median(per_epoch)
    assert abs(row.seconds_per_step - expected) <= 0.3 * expected + 0.02, (row.seconds_per_step, per_epoch)
    assert f"{row.seconds_per_step:.4f}" in proc.stdout


def _rcp_log(platform: str, block_seconds: list[float], *, global_batch: int = 8192) -> str:
    """A DLRMv4 RCP log as the reference writes it: its platform and nothing else about the system, blocks
    between evaluations counted in samples."""
    t, samples = 1_790_000_000_000, 0
    lines = [_mllog("submission_benchmark", "dlrmv4", t), _mllog("submission_platform", platform, t),
             _mllog("global_batch_size", global_batch, t)]
    for seconds in block_seconds:
        lines.append(_mllog("block_start", None, t, samples_count=samples))
        samples += 280 * global_batch
        t += int(seconds * 1000)
        lines.append(_mllog("block_stop", None, t, samples_count=samples))
    return "\n".join(lines) + "\n"


def test_a_reference_rcp_log_names_its_accelerator_by_its_platform_but_not_its_count(tmp_path, capsys):
    (tmp_path / "gb300.log").write_text(_rcp_log("GB300", [280 * 0.51] * 3))
    (tmp_path / "mi350.log").write_text(_rcp_log("MI350", [280 * 0.74] * 3))
    assert main([str(tmp_path / "gb300.log")]) == 3
    assert "pass --accelerators" in capsys.readouterr().err
    gb300, mi350 = (read_log(tmp_path / f"{name}.log", accelerators=8) for name in ("gb300", "mi350"))
    assert (gb300.accelerator, gb300.batch_per_accelerator, round(gb300.seconds_per_step, 3)) == ("gb300", 1024, 0.51)
    assert (mi350.accelerator, round(mi350.seconds_per_step, 3)) == ("mi350x", 0.74)  # the compute tables' name
    assert read_log(tmp_path / "gb300.log", accelerators=8, accelerator="b300").accelerator == "b300"
    (tmp_path / "old.log").write_text(_rcp_log("MI350", [280 * 0.74] * 3).replace('"dlrmv4"', '"hstu"'))
    table = tmp_path / "table.csv"
    assert main([str(tmp_path / "gb300.log"), str(tmp_path / "old.log"), "--accelerators", "8", "--table", str(table)]) == 2
    assert "add --benchmark" in capsys.readouterr().err  # two names: the table holds one benchmark
    assert main([str(tmp_path / "gb300.log"), str(tmp_path / "old.log"), "--accelerators", "8", "--rename",
                 "hstu=dlrmv4", "--table", str(table)]) == 0
    assert [line.split(",")[0] for line in table.read_text().splitlines()[2:]] == ["gb300", "mi350x"]
