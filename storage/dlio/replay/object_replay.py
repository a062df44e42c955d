"""The export's object-storage workload run on DLIO 3.0.x's object mode, against the bucket the
run read: `mlperf_storage/<model>_measured_object.yaml` (storage.dlio.export.object_workload), with
s3dlio as DLIO's client, as `mlpstorage ... training <model> run object` runs it.

DLIO generates its own data under `<bucket>/<the export's data_folder><tag>/` (so its bytes go
through the same endpoint as the run's), trains on it with the run's world size, and its objects
are deleted afterwards. The endpoint and credentials reach DLIO through the environment
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), never through a file. PyPI's
DLIO 2.0.0 has no object mode that works (no client; its readers open `s3://` names as paths).

    WORK/config/workload/<name>.yaml, generate/, train/, generate.log, train.log (local)
    RUN_DIR/dlio/replay_object_result_dlio3.json
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from common.object_store import client
from common.object_store.location import ObjectPath
from storage.dlio.replay import generic as replay_module
from storage.dlio.environment.dlio_env import ensure_dlio3_env
from storage.dlio.export.workloads import EXPORT_DIR
from storage.dlio.export.object_workload import PLACEHOLDER_BUCKET, PLACEHOLDER_ENDPOINT
from storage.dlio.replay.storage_workload_replay import measured_workload

RESULT_FILE = "replay_object_result_dlio3.json"


def _object_workload(profile: dict) -> tuple[str, str, dict]:
    name, text, workload = measured_workload(profile, variant="_object", world=profile["world_size"])
    storage = workload["storage"]
    if storage["storage_root"] == PLACEHOLDER_BUCKET or storage["storage_options"]["endpoint_url"] == PLACEHOLDER_ENDPOINT:
        raise replay_module.ReplayError("the run read files, not an object store: DLIO's object mode needs a run whose "
                                        "data_root was s3://bucket/prefix")
    return name, text, workload


def _remove_prefix(prefix: ObjectPath) -> None:
    for path, _ in prefix.list():
        client.delete(path.endpoint, path.bucket, path.key)


def object_replay(run_dir: Path, *, work_dir: Path | None = None, tag: str = "replay", keep_data: bool = False,
                  timeout_s: float | None = None, mpi: replay_module.MpiHosts | None = None) -> replay_module.ReplayResult:
    """Generates and trains the run's object-storage workload with DLIO 3.0.x (s3dlio), prints measured
    vs replayed and writes RUN_DIR/dlio/replay_object_result_dlio3.json."""
    run_dir = Path(run_dir).resolve()
    profile = replay_module._read_profile(run_dir)
    world = profile["world_size"]
    try:
        name, text, workload = _object_workload(profile)
    except replay_module.ReplayError as error:
        raise replay_module.ReplayError(f"{run_dir}: {error}") from None
    dataset, storage = workload["dataset"], workload["storage"]
    files, per_file = int(dataset["num_files_train"]), int(dataset["num_samples_per_file"])
    python = ensure_dlio3_env()
    work = Path(work_dir).resolve() if work_dir is not None else run_dir / EXPORT_DIR / "replay-object-dlio3"
    config, gen_out, train_out = work / "config", work / "generate", work / "train"
    for stale in (config, gen_out, train_out):
        shutil.rmtree(stale, ignore_errors=True)
    (config / "workload").mkdir(parents=True)
    (config / "workload" / f"{name}.yaml").write_text(text)
    folder = f"{dataset['data_folder'].rstrip('/')}/{tag}"
    prefix = ObjectPath(f"s3://{storage['storage_root']}/{folder}")
    _remove_prefix(prefix)  # what an interrupted replay left would count as generated data
    env = replay_module.dlio3_env(workload)
    limits = (timeout_s, timeout_s) if timeout_s else (300.0 + files * per_file * dataset["record_length_bytes"] / 2e5,
                                                        300.0 + 5.0 * workload["train"]["total_training_steps"]
                                                        * workload["train"]["computation_time"])
    commands = {"generate": replay_module._dlio_command(python, world, config, name, folder, gen_out, True),
                "train": replay_module._dlio_command(python, world, config, name, folder, train_out, False, mpi)}
    # 3.0.x refuses more steps than one pass over its files holds: a run that read its data more than
    # once (short datasets, many ranks) gets as many more files as its steps need
    needed = -(-int(workload["train"]["total_training_steps"]) * int(workload["reader"]["batch_size"]) * world
               // per_file)
    if needed > files:
        print(f"[replay] {files} files hold fewer samples than the run's steps read: DLIO gets {needed}", flush=True)
        files = needed
        for command in commands.values():
            command.append(f"++workload.dataset.num_files_train={files}")
    seconds, io = {}, {}
    try:
        print(f"[replay] DLIO 3.0.x generates {name}'s {dataset['format']} data in {prefix} at "
              f"{storage['storage_options']['endpoint_url']} ({world} rank(s), s3dlio)", flush=True)
        seconds["generate"], io["generate"] = replay_module._run_dlio(
            commands["generate"], python=python, log=work / "generate.log", cwd=work, timeout_s=limits[0],
            what="data generation", extra_env=env)
        sizes = [size for path, size in (prefix / "train").list() if path.name.endswith(dataset["format"])]
        if not sizes:
            raise replay_module.ReplayError(f"{prefix}/train: DLIO generated no {dataset['format']} object")
        per_read = 1 if dataset["format"] in replay_module.WHOLE_FILE_FORMATS else per_file
        sample_bytes = sum(sizes) / (len(sizes) * per_read)
        print(f"[replay] DLIO 3.0.x runs {name} from {prefix} ({world} rank(s), s3dlio)", flush=True)
        seconds["train"], io["train"] = replay_module._run_dlio(
            commands["train"], python=python, log=work / "train.log", cwd=work, timeout_s=limits[1],
            what="training emulation", extra_env={**env, **dict(mpi.env if mpi else ())})
    finally:
        if not keep_data:
            _remove_prefix(prefix)
    result = replay_module.trained_result(
        profile=profile, workload=name, dataset_format=dataset["format"], world=world, train_out=train_out,
        batch=int(workload["reader"]["batch_size"]), sample_bytes=sample_bytes, io=io, seconds=seconds,
        commands=commands, result_path=run_dir / EXPORT_DIR / RESULT_FILE, dlio="3.0")
    saved = result.as_json()
    saved["reader"] = f"object: the export's object-storage workload, s3dlio, data under {prefix}"
    result.result_path.write_text(json.dumps(saved, indent=2) + "\n")
    print(result.table(), flush=True)
    print(f"[replay] {result.result_path}", flush=True)
    return result
