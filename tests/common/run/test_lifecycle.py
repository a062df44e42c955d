"""The run lifecycle in one process, with a toy benchmark: what it writes, that it closes
everything it opened on every path (success, an error in a step, a config error in the build), and
where an extension joins a run (common.run.extensions)."""

from __future__ import annotations

import json
import signal

import gin
import numpy as np
import pytest
import torch

from common.config.checks import ConfigError
from common.data.loader import StreamingLoader
from common.run import lifecycle
from common.run.benchmark import Benchmark, DataPlan, RunContext, TrainingPlan
from common.run.events import LoopObserver
from common.run.extensions import RunExtension
from common.run.learning_rate import LinearWarmup
from common.run.schedule import TrainingSchedule
from common.run.task import EvalOutput, StepOutput
from common.spec import BenchmarkSpec


class _Source:
    def get_batch(self, indices):
        return torch.as_tensor(np.asarray(indices), dtype=torch.float32)


class _Task:
    def __init__(self, fail_at_step: int | None, nan_at_step: int | None = None) -> None:
        self.fail_at_step, self.nan_at_step = fail_at_step, nan_at_step
        self.weight = torch.zeros(1)
        self.optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)

    def train_step(self, batch, step):
        if step.step == self.fail_at_step:
            raise RuntimeError("a step failed")
        self.weight += 0.1 * (batch.mean() - self.weight)
        if step.step == self.nan_at_step:
            return StepOutput(loss=torch.tensor(float("nan")), samples=len(batch))
        return StepOutput(loss=(batch.mean() - self.weight).abs(), samples=len(batch))

    def evaluate(self, at):
        return EvalOutput(metrics={"acc": 0.25 + at.step / 100}, quality=0.25 + at.step / 100, samples=4)

    def app_state(self):
        return {"w": {"weight": self.weight}}

    def scheduled_optimizers(self):
        return [self.optimizer]


class _Closeable:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _ToyBuild:
    def __init__(self, ctx: RunContext, *, task: _Task, build_error: bool, opened: dict, identity: dict) -> None:
        self.ctx, self.task, self.build_error, self.opened, self.identity = ctx, task, build_error, opened, identity

    def data(self) -> DataPlan:
        self.opened["ctx"] = self.ctx
        loader = StreamingLoader(source=_Source(), num_workers=0,
                                 build_window=lambda key: [np.arange(key * 10 + 2 * b, key * 10 + 2 * b + 2)
                                                           for b in range(3)])
        self.opened["loader"] = loader
        schedule = TrainingSchedule(windows=[0, 1], global_batch_size=2, local_batch_size=2, train_samples=12,
                                    description="[schedule] two windows of three batches", eval_every_steps=3,
                                    learning_rate=LinearWarmup(base_lr=0.1, warmup_steps=2))
        return DataPlan(loader=loader, schedule=schedule, dataset="toy", data_dirs=(), count_samples=len)

    def training(self, data: DataPlan) -> TrainingPlan:
        self.opened["eval_loader"] = _Closeable()
        if self.build_error:
            raise ConfigError("toy.TrainConfig.x must be positive, got -1")
        return TrainingPlan(
            data=data, task=self.task, hyperparameters={"global_batch_size": 2}, reference_data=False,
            summarize=lambda result, untrained: ({"toy": True}, f"[done] {result.progress.global_step} steps"),
            evaluate_untrained=True, closeables=[self.opened["eval_loader"]], identity=self.identity,
        )


TOY = BenchmarkSpec(package="toy", title="Toy", mlperf_name="dlrmv4")


def _benchmark(*, fail_at_step=None, nan_at_step=None, build_error=False, opened: dict, identity: dict | None = None,
               task: _Task | None = None):
    def build(ctx: RunContext) -> _ToyBuild:
        return _ToyBuild(ctx, task=task or _Task(fail_at_step, nan_at_step), build_error=build_error, opened=opened,
                         identity={"toy.TrainConfig.global_batch_size": 2} if identity is None else identity)

    return Benchmark(spec=TOY, ruleset="6.1.0", reference_config="toy_reference.gin", read_configs=lambda: None,
                     build=build)


@pytest.fixture
def gin_file(tmp_path):
    path = tmp_path / "toy.gin"
    path.write_text(f'common.RunConfig.output_root = "{tmp_path / "runs"}"\ncommon.RunConfig.log_every_steps = 1\n')
    yield path
    gin.clear_config()


def _mllog_keys(run_dir) -> list[str]:
    return [json.loads(line.split(":::MLLOG ", 1)[1])["key"] for line in (run_dir / "mllog.log").read_text().splitlines()]


def test_a_finished_run_writes_its_directory_and_checks_its_log(gin_file, tmp_path, capsys):
    opened = {}
    assert lifecycle.main(_benchmark(opened=opened), ["--gin_config", str(gin_file)]) == 0
    run_dir = tmp_path / "runs" / "toy" / "toy"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["steps"], summary["samples"], summary["toy"]) == (6, 12, True)
    assert summary["untrained_quality"] == 0.25 and summary["final_quality"] == pytest.approx(0.31)
    assert summary["compliance"]["ruleset"] == "6.1.0" and summary["compliance"]["failures"]
    keys = _mllog_keys(run_dir)
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    assert {"config.gin", "operative_config.gin", "metrics.jsonl"} <= {p.name for p in run_dir.iterdir()}
    out = capsys.readouterr().out
    assert "[eval] untrained model: acc=0.2500" in out and "[compliance]" in out
    assert "[done] 6 steps in " in out and f"s -> {run_dir}" in out
    assert opened["eval_loader"].closed


def test_an_error_in_a_step_still_closes_everything(gin_file, tmp_path):
    opened = {}
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError, match="a step failed"):
        lifecycle.main(_benchmark(fail_at_step=4, opened=opened), ["--gin_config", str(gin_file)])
    assert opened["eval_loader"].closed and opened["loader"]._pool._shutdown
    assert signal.getsignal(signal.SIGTERM) == before  # the preemption handler is gone with the run
    run_dir = tmp_path / "runs" / "toy" / "toy"
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 4  # the lines before the failure are on disk
    assert "run_stop" not in _mllog_keys(run_dir) and not (run_dir / "summary.json").exists()


def test_a_config_error_in_the_build_exits_2_with_one_line(gin_file, tmp_path, capsys):
    before = signal.getsignal(signal.SIGTERM)
    assert lifecycle.main(_benchmark(build_error=True, opened={}), ["--gin_config", str(gin_file)]) == 2
    assert capsys.readouterr().err.strip() == "config error: toy.TrainConfig.x must be positive, got -1"
    assert signal.getsignal(signal.SIGTERM) == before
    assert (tmp_path / "runs" / "toy" / "toy" / "mllog.log").read_text().count("init_start") == 1


def test_a_non_finite_loss_stops_the_run_in_one_line_before_it_saves(gin_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CKPT_PATH", str(tmp_path / "ckpt"))
    gin_file.write_text(gin_file.read_text() + "common.CheckpointPolicy.every_n_steps = 1\n")
    opened = {}
    assert lifecycle.main(_benchmark(nan_at_step=3, opened=opened), ["--gin_config", str(gin_file)]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["training error: step 4 (window 1, batch 0): the loss is nan; nothing after the last checkpoint "
                   "was saved"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [f"step_{s:09d}" for s in (2, 3)]  # keep_last_n 2
    run_dir = tmp_path / "runs" / "toy" / "toy"
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in steps if "loss" in r][-1] == "nan"  # the step that diverged is on record
    assert opened["eval_loader"].closed and opened["loader"]._pool._shutdown


class _Steps(LoopObserver):
    def __init__(self, events: list) -> None:
        self.events = events

    def step_ends(self, step) -> None:
        self.events.append(("step", step.progress.global_step))


class _Extension(RunExtension):
    """Records when each hook is called; with `replaces_training` it trains its own task on the data."""

    def __init__(self, *, replaces_training: bool) -> None:
        self.replaces_training, self.events = replaces_training, []

    def configure(self, run, benchmark) -> None:
        self.events.append(("configure", benchmark.package))

    def trains_model(self) -> bool:
        return not self.replaces_training

    def global_batch_size(self, configured: int, world_size: int) -> int:
        return configured * 3

    def plan(self, ctx, data, training) -> TrainingPlan:
        self.events.append("plan")
        if not self.replaces_training:
            return training(data)
        return TrainingPlan(data=data, task=_Task(None), hyperparameters={}, reference_data=False,
                            summarize=lambda result, untrained: ({"replaced": True}, None))

    def observers(self, ctx, plan, progress):
        return [_Steps(self.events)]

    def finish(self, ctx, plan, result) -> None:
        self.events.append(("finish", result.progress.global_step, (ctx.run_dir / "summary.json").exists()))


def test_an_extension_joins_the_run_at_each_hook(gin_file, tmp_path):
    opened, extension = {}, _Extension(replaces_training=False)
    assert lifecycle.main(_benchmark(opened=opened), ["--gin_config", str(gin_file)], extensions=[extension]) == 0
    assert extension.events[:2] == [("configure", "toy"), "plan"]
    assert [e for e in extension.events if e[0] == "step"] == [("step", s) for s in range(1, 7)]
    assert extension.events[-1] == ("finish", 6, False)  # before the summary is written
    assert opened["ctx"].global_batch_size(2) == 6 and opened["ctx"].trains_model
    assert "eval_loader" in opened  # the model's part of the build ran


def test_an_extension_that_replaces_training_builds_no_model_saves_nothing_and_checks_no_compliance(
        gin_file, tmp_path, monkeypatch):
    monkeypatch.setenv("CKPT_PATH", str(tmp_path / "ckpt"))
    gin_file.write_text(gin_file.read_text() + "common.CheckpointPolicy.every_n_steps = 1\n")
    opened, extension = {}, _Extension(replaces_training=True)
    assert lifecycle.main(_benchmark(opened=opened), ["--gin_config", str(gin_file)], extensions=[extension]) == 0
    assert "eval_loader" not in opened and not opened["ctx"].trains_model
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").iterdir())
    summary = json.loads((tmp_path / "runs" / "toy" / "toy" / "summary.json").read_text())
    assert summary["replaced"] and summary["steps"] == 6 and "compliance" not in summary
    assert opened["loader"]._pool._shutdown


def test_emulate_without_an_extension_that_emulates_is_a_config_error(gin_file, capsys):
    code = lifecycle.main(_benchmark(opened={}), ["--gin_config", str(gin_file), "--gin_bindings",
                                                 'common.RunConfig.emulate = "b200"'])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("config error: common.RunConfig.emulate='b200': no extension")


def test_a_config_error_in_the_models_build_closes_the_data_loader(gin_file):
    opened = {}
    assert lifecycle.main(_benchmark(build_error=True, opened=opened), ["--gin_config", str(gin_file)]) == 2
    assert opened["loader"]._pool._shutdown


# ------------------------------------------------------------------------ resuming what was checkpointed
class _AdaptingTask(_Task):
    """A task that adapts a checkpoint to this run (as DLRM-HSTU reshards): a world size may change."""

    def adapt_checkpoint(self, path, metadata, app_state):
        from common.checkpoint.manager import AdaptedLoad

        return AdaptedLoad(app_state=app_state, after_load=None)


def _checkpointed(gin_file, tmp_path, monkeypatch, *, seed: str, steps: int = 2):
    """A first launch that saves every step and stops after `steps`; the checkpoint directory."""
    monkeypatch.setenv("CKPT_PATH", str(tmp_path / "ckpt"))
    monkeypatch.setenv("SEED", seed)
    gin_file.write_text(gin_file.read_text() + "common.CheckpointPolicy.every_n_steps = 1\n")
    argv = ["--gin_config", str(gin_file), "--gin_bindings", f"common.RunConfig.max_steps = {steps}"]
    assert lifecycle.main(_benchmark(opened={}), argv) == 0
    return tmp_path / "ckpt" / f"step_{steps:09d}"


def _relaunch(gin_file, capsys, **benchmark) -> tuple[int, list[str], list[str]]:
    capsys.readouterr()
    code = lifecycle.main(_benchmark(opened={}, **benchmark), ["--gin_config", str(gin_file), "--gin_bindings",
                                                               "common.RunConfig.max_steps = 4"])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err.strip().splitlines()


def _summary(tmp_path) -> dict:
    return json.loads((tmp_path / "runs" / "toy" / "toy" / "summary.json").read_text())


def test_a_resume_with_another_seed_is_refused_naming_both(gin_file, tmp_path, monkeypatch, capsys):
    checkpoint = _checkpointed(gin_file, tmp_path, monkeypatch, seed="5")
    assert json.loads((checkpoint / "metadata.json").read_text())["user"]["identity"] == {
        "common.RunConfig.seed": 5, "world size (ranks)": 1, "training samples (the dataset's)": 12,
        "toy.TrainConfig.global_batch_size": 2}
    monkeypatch.setenv("SEED", "7")
    code, out, err = _relaunch(gin_file, capsys)
    assert code == 2 and err == [f"config error: common.RunConfig.seed (SEED): {checkpoint} was trained with 5, this "
                                 "launch has 7; a resume trains what the checkpointed run would: relaunch with its "
                                 "setting, or give another CKPT_PATH"]


@pytest.mark.parametrize("seed, how", [("", "SEED not given"), ("-1", "SEED=-1 would draw a new one"),
                                       ("5", "as given")])
def test_a_resume_takes_the_checkpoints_seed_and_says_so(gin_file, tmp_path, monkeypatch, capsys, seed, how):
    checkpoint = _checkpointed(gin_file, tmp_path, monkeypatch, seed="5")
    monkeypatch.setenv("SEED", seed)
    code, out, _ = _relaunch(gin_file, capsys)
    assert code == 0 and f"[identity] seed 5 from {checkpoint} ({how})" in out
    assert _summary(tmp_path)["seed"] == 5 and _summary(tmp_path)["steps"] == 4


def test_a_resume_that_would_train_something_else_is_refused(gin_file, tmp_path, monkeypatch, capsys):
    checkpoint = _checkpointed(gin_file, tmp_path, monkeypatch, seed="1")
    code, _, err = _relaunch(gin_file, capsys, identity={"toy.TrainConfig.global_batch_size": 4})
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"config error: toy.TrainConfig.global_batch_size: {checkpoint} was trained with 2, "
                             "this launch has 4;")


def _recorded(checkpoint, **changes) -> None:
    """Every checkpoint's recorded identity with `changes` (None: the identity removed), as another run
    would have written it (the marker's size and checksum of the file follow, so the checkpoints stay whole)."""
    from common.checkpoint.files import file_crc32

    for directory in checkpoint.parent.glob("step_*"):
        path = directory / "metadata.json"
        payload = json.loads(path.read_text())
        if changes.get("identity", ...) is None:
            del payload["user"]["identity"]
        else:
            payload["user"]["identity"].update(changes)
        path.write_text(json.dumps(payload))
        marker = json.loads((directory / "COMPLETE.json").read_text())
        marker["files"]["metadata.json"] = path.stat().st_size
        if "checksums" in marker:
            marker["checksums"]["metadata.json"] = file_crc32(path)
        (directory / "COMPLETE.json").write_text(json.dumps(marker))


def test_another_world_size_is_refused_unless_the_task_adapts_its_checkpoint(gin_file, tmp_path, monkeypatch, capsys):
    checkpoint = _checkpointed(gin_file, tmp_path, monkeypatch, seed="1")
    _recorded(checkpoint, **{"world size (ranks)": 2})
    code, _, err = _relaunch(gin_file, capsys)
    assert code == 2 and err[0].startswith(f"config error: world size (ranks): {checkpoint} was trained with 2, this "
                                           "launch has 1;")
    code, out, _ = _relaunch(gin_file, capsys, task=_AdaptingTask(None))
    assert code == 0 and "[identity] world size 2 -> 1: the task adapts the checkpoint to this world size (its sharded " \
                         "state is resharded on load)" in out


def test_a_checkpoint_from_before_identities_resumes_saying_nothing_was_checked(gin_file, tmp_path, monkeypatch,
                                                                                 capsys):
    checkpoint = _checkpointed(gin_file, tmp_path, monkeypatch, seed="3")
    _recorded(checkpoint, identity=None)
    monkeypatch.setenv("SEED", "9")
    code, out, _ = _relaunch(gin_file, capsys)
    assert code == 0 and any(line.startswith(f"[identity] {checkpoint} records no run identity") for line in out)
    assert _summary(tmp_path)["seed"] == 9


@pytest.mark.parametrize("name", ["..", ".", "a/b", "../escape", "", "sp ace"])
def test_a_run_name_that_is_not_one_directory_exits_2_and_writes_nothing(gin_file, tmp_path, monkeypatch, capsys, name):
    monkeypatch.setenv("RUN_NAME", name)
    gin_file.write_text(gin_file.read_text() + (f'common.RunConfig.run_name = "{name}"\n' if not name else ""))
    code = lifecycle.main(_benchmark(opened={}), ["--gin_config", str(gin_file)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("config error: common.RunConfig.run_name (RUN_NAME) must be one directory name")
    assert not (tmp_path / "runs").exists()  # nothing in the output root, nor beside it
