"""The export's MLPerf Storage workload itself, run on DLIO 3.0.x: `replay --dlio 3.0 --reader storage`.

The generic and plugin replays run a DLIO 2.0.0 workload (2.0.0 has no parquet, so FLUX's goes as
npy). DLIO 3.0.x, the DLIO mlpstorage runs, has the parquet generator and reader that FLUX's MLPerf
Storage workload uses: this replay runs `mlperf_storage/<model>_measured.yaml` as the export writes
it, the parquet columns as measured and DLIO reading whole row groups file by file, sized to this
run's data (the export's `--dataset-of-run`: the real training set would be thousands of files).

    RUN_DIR/dlio/replay-storage-dlio3/      config/workload/<model>_measured.yaml, data/ (deleted
                                            afterwards unless keep_data), generate/, train/, logs
    RUN_DIR/dlio/replay_storage_result_dlio3.json
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import yaml

from common.processes.guard import start_guard
from storage.dlio.replay import generic as replay_module
from storage.dlio.environment.dlio_env import ensure_dlio3_env
from storage.dlio.export.profile_reading import ExportError
from storage.dlio.export.workloads import EXPORT_DIR, mlperf_storage_workloads

RESULT_FILE = "replay_storage_result_dlio3.json"
WORK_DIR = "replay-storage-dlio3"


def measured_workload(profile: dict, *, variant: str = "", world: int) -> tuple[str, str, dict]:
    """(name, YAML text, parsed) of the run's measured MLPerf Storage workload at this run's data size;
    `variant` "_object" is its object-storage form. Refused where a rank would get no file."""
    try:
        texts = mlperf_storage_workloads(profile, accelerator=None, dataset_scale=None)
    except (ExportError, KeyError, TypeError, ZeroDivisionError) as error:
        raise replay_module.ReplayError(f"its MLPerf Storage workload cannot be written ({error})") from None
    suffix = f"_measured{variant}.yaml"
    name = next(n.removesuffix(".yaml") for n in texts if n.endswith(suffix) and "_datagen_" not in n)
    workload = yaml.safe_load(texts[f"{name}.yaml"])
    files = int(workload["dataset"]["num_files_train"])
    if files < world:
        raise replay_module.ReplayError(f"{name}.yaml: {files} files for {world} ranks (3.0.x gives each rank whole "
                                        "files): nothing to read on some ranks")
    return name, texts[f"{name}.yaml"], workload


def storage_workload_replay(run_dir: Path, *, work_dir: Path | None = None, keep_data: bool = False,
                            timeout_s: float | None = None,
                            before_train: Callable[[Path], None] | None = None) -> replay_module.ReplayResult:
    """Generates and trains the run's MLPerf Storage workload (at this run's data size) with DLIO 3.0.x,
    prints measured vs replayed and writes RUN_DIR/dlio/replay_storage_result_dlio3.json."""
    run_dir = Path(run_dir).resolve()
    profile = replay_module._read_profile(run_dir)
    world = profile["world_size"]
    try:
        name, text, workload = measured_workload(profile, world=world)
    except replay_module.ReplayError as error:
        raise replay_module.ReplayError(f"{run_dir}: {error}") from None
    dataset = workload["dataset"]
    files, per_file = int(dataset["num_files_train"]), int(dataset["num_samples_per_file"])

    python = ensure_dlio3_env()
    work = Path(work_dir).resolve() if work_dir is not None else run_dir / EXPORT_DIR / WORK_DIR
    config, data, gen_out, train_out = work / "config", work / "data", work / "generate", work / "train"
    for stale in (config, data, gen_out, train_out):
        shutil.rmtree(stale, ignore_errors=True)
    (config / "workload").mkdir(parents=True)
    (config / "workload" / f"{name}.yaml").write_text(text)
    env = replay_module.dlio3_env(workload)
    limits = (timeout_s, timeout_s) if timeout_s else (300.0 + files * per_file * dataset["record_length_bytes"] / 2e5,
                                                        300.0 + 5.0 * workload["train"]["total_training_steps"]
                                                        * workload["train"]["computation_time"])
    commands = {"generate": replay_module._dlio_command(python, world, config, name, data, gen_out, True),
                "train": replay_module._dlio_command(python, world, config, name, data, train_out, False)}
    seconds, io = {}, {}
    guard = None if keep_data else start_guard(remove=data)  # DLIO's data goes after a SIGKILL too
    try:
        print(f"[replay] DLIO 3.0.x generates {name}'s {dataset['format']} data in {data} ({world} rank(s))",
              flush=True)
        seconds["generate"], io["generate"] = replay_module._run_dlio(
            commands["generate"], python=python, log=work / "generate.log", cwd=work, timeout_s=limits[0],
            what="data generation", extra_env=env)
        sample_bytes, _ = replay_module.bytes_per_sample(data / "train", dataset["format"], per_file)
        if before_train is not None:
            before_train(data)
        print(f"[replay] DLIO 3.0.x runs {name} ({world} rank(s))", flush=True)
        seconds["train"], io["train"] = replay_module._run_dlio(
            commands["train"], python=python, log=work / "train.log", cwd=work, timeout_s=limits[1],
            what="training emulation", extra_env=env,
            reads_dir=train_out / replay_module.TRAINING_READS_DIR, ranks=world)
    finally:
        if not keep_data:
            shutil.rmtree(data, ignore_errors=True)
        if guard is not None:
            guard.kill()
            guard.wait()
    result = replay_module.trained_result(
        profile=profile, workload=name, dataset_format=dataset["format"], world=world, train_out=train_out,
        batch=int(workload["reader"]["batch_size"]), sample_bytes=sample_bytes, io=io, seconds=seconds,
        commands=commands, result_path=run_dir / EXPORT_DIR / RESULT_FILE, dlio="3.0")
    saved = result.as_json()
    saved["reader"] = "storage: the export's MLPerf Storage workload (mlperf_storage/), at this run's data size"
    result.result_path.write_text(json.dumps(saved, indent=2) + "\n")
    print(result.table(), flush=True)
    print(f"[replay] {result.result_path}", flush=True)
    return result
