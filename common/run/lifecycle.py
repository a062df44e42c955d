"""The run lifecycle every trainer shares, written once.

A benchmark describes itself with a `Benchmark` (common.run.benchmark: its spec, its configs, its
MLPerf rules and its build). `main(benchmark, extensions=...)` does everything around the build, in
this order:

    parse --gin_config/--gin_bindings -> the preemption handler (a signal from now on stops the run
    at its first step boundary, with a checkpoint) -> read the configs and configure the extensions
    (exit 2 on a config error) -> process group -> seed, run directory, MLPerf tracker (init,
    submission), config snapshot -> the build's data -> the plan (the extensions', by default the
    build's model and task) -> resume from the newest checkpoint (weights, optimizer, random
    streams, data position, mllog state) -> hyperparameters, RUN_START -> the loop's observers
    (metrics, console, MLPerf log, sample audit log, tracer, then the extensions') -> the training
    loop -> close everything (on every path: success, preemption, error) -> the extensions' finish
    -> the official compliance check of the run's own mllog -> summary.json and the last line

Extensions (common.run.extensions) are how a layer above the runtime joins a run; the entry point
chooses them (the trainers take the storage layer's: the load profile, emulated accelerators).

Exit status: 0 (finished or preempted after saving), 2 (a config error: one line naming the
binding), 3 (a data error: one line naming the file), 4 (a NaN or infinite loss: one line naming
the step), 5 (a checkpoint could not be written: one line saying why, e.g. no space left), 1
(anything else, with its traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from common.checkpoint.manager import CheckpointManager, CheckpointWriteError
from common.checkpoint.progress import TrainingProgress
from common.config.checks import ConfigError
from common.config.gin_files import load_gin, write_config_snapshot
from common.distributed.collectives import barrier
from common.distributed.launch import write_rank_status
from common.distributed.setup import DistInfo, destroy, init_distributed
from common.mlperf.compliance import ComplianceReport, RunFacts, check_log, explain
from common.mlperf.tracker import MLPerfTracker
from common.randomness.streams import RandomStreams, resolve_seed, seed_everything
from common.run.benchmark import Benchmark, DataPlan, RunContext, TrainingPlan
from common.run.events import Observers
from common.run.extensions import Extensions, RunExtension
from common.run.identity import SEED, TRAIN_SAMPLES, WORLD_SIZE, check_identity, resumed_seed
from common.run.logs import MetricsLog, SampleAuditLog
from common.run.loop import LoopCheckpoints, LoopResult, NonFiniteLoss, TrainLoop
from common.run.observers import ConsoleLines, MLPerfEvents, TracedSteps
from common.run.preemption import PreemptionHandler
from common.run.rundir import make_run_dir
from common.run.schedule import TrainingSchedule
from common.run.settings import CommonConfigs, RunConfig
from common.run.arguments import parse_args
from common.run.task import CheckpointAdaptingTask, EvalPoint
from common.run.warnings_filter import quiet_known_library_noise
from common.tracing.capture import StepTracer

EXIT_CONFIG_ERROR = 2
EXIT_DATA_ERROR = 3
EXIT_NON_FINITE_LOSS = 4
EXIT_CHECKPOINT_WRITE_ERROR = 5


def _first_line(error: BaseException) -> str:
    # gin appends "In call to configurable ..." lines; a loader worker's error carries its traceback
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[-1].strip() if "Traceback" in lines[0] else lines[0].strip()


def main(benchmark: Benchmark, argv: Sequence[str] | None = None, *, doc: str | None = None,
         extensions: Sequence[RunExtension] = ()) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet_known_library_noise()
    args = parse_args(argv, doc=doc)
    # from here on a preemption signal is a flag the first step boundary answers with a checkpoint,
    # whatever the run is doing when it comes (reading configs, preparing data, building, evaluating)
    preemption = PreemptionHandler().install()
    code = 1  # what an exception leaves
    try:
        code = _launch(benchmark, args, preemption, Extensions(extensions))
        return code
    finally:
        # the status first: once this rank fails, the launcher's agent may SIGTERM the others, and a
        # rank that it kills after uninstalling has still said why it stopped
        write_rank_status(code)  # for common.distributed.launch, when it started this rank
        preemption.uninstall()


def _launch(benchmark: Benchmark, args: argparse.Namespace, preemption: PreemptionHandler,
            extensions: Extensions) -> int:
    try:
        loaded = load_gin(args.gin_config, args.gin_bindings)
        configs = benchmark.read_configs()
        common = CommonConfigs.read(loaded.env_macros)
        extensions.configure(common.run, benchmark)
        if common.run.emulate and extensions.trains_model():
            raise ConfigError(f"common.RunConfig.emulate={common.run.emulate!r}: no extension of this entry point "
                              "emulates an accelerator (the trainers' own entry points take the storage layer's)")
    except ConfigError as error:
        _say(f"config error: {_first_line(error)}")
        return EXIT_CONFIG_ERROR
    run_cfg = common.run
    info = init_distributed(device=run_cfg.device, timeout_s=run_cfg.process_group_timeout_s,
                            preparation_timeout_s=run_cfg.data_preparation_timeout_s)
    try:
        _Run(benchmark, configs=configs, common=common, info=info, config_file=Path(args.gin_config[-1]).name,
             preemption=preemption, extensions=extensions).execute()
    except ConfigError as error:
        _say(f"config error: {_first_line(error)}")
        return EXIT_CONFIG_ERROR
    except benchmark.data_errors as error:
        _say(f"data error: {_first_line(error)}")
        return EXIT_DATA_ERROR
    except NonFiniteLoss as error:
        _say(f"training error: {error}")
        return EXIT_NON_FINITE_LOSS
    except CheckpointWriteError as error:
        _say(f"checkpoint error: {error}")
        return EXIT_CHECKPOINT_WRITE_ERROR
    finally:
        destroy()
    return 0


def _say(line: str) -> None:
    # one write per line: ranks started together share one stderr pipe, and print() writes the text
    # and its newline separately, so two ranks' messages could otherwise run into one line
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class _Run:
    """One launch of a trainer: the steps of the module docstring, each a method."""

    def __init__(self, benchmark: Benchmark, *, configs: object, common: CommonConfigs, info: DistInfo,
                 config_file: str, preemption: PreemptionHandler, extensions: Extensions) -> None:
        self.benchmark, self.configs, self.common, self.info, self.config_file = benchmark, configs, common, info, config_file
        self.preemption, self.extensions = preemption, extensions
        self.run_cfg: RunConfig = common.run
        self.started = time.perf_counter()
        self.loop_started = self.started
        self._closing = contextlib.ExitStack()
        self.trains_model = extensions.trains_model()
        # a run that trains no model has no state worth saving: a stopped one is started again
        self.checkpoints = CheckpointManager.from_policy(common.checkpoint) if self.trains_model else None
        self.resuming = self.checkpoints is not None and self.checkpoints.has_checkpoint()
        latest = self.checkpoints.latest_metadata() if self.resuming else None
        self.saved_where = latest["path"] if latest else str(common.checkpoint.path)
        user = latest["user"] if latest else {}
        self.saved_identity: dict = (user.get("identity") if isinstance(user, dict) else None) or {}
        self.tracker: MLPerfTracker | None = None  # opened with the run directory

    def say(self, message: str) -> None:
        if self.info.is_main:
            print(message, flush=True)

    def execute(self) -> dict:
        with self._closing:
            ctx = self._start()
            build = self.benchmark.build(ctx)
            data: DataPlan = build.data()
            self._closing.callback(data.loader.close)
            plan = self.extensions.plan(ctx, data, build.training)
            for closeable in plan.closeables:
                self._closing.callback(closeable.close)
            schedule = plan.data.schedule.with_budget(self.run_cfg.max_steps)
            identity = self._identity(plan, ctx)
            progress = self._resume(plan, ctx)
            progress.identity = identity  # every checkpoint of this launch records it
            result = self._train(plan, schedule, ctx, progress)
        return self._finish(plan, ctx, result)

    # ------------------------------------------------------------------ start
    def _start(self) -> RunContext:
        if self.run_cfg.num_threads:
            torch.set_num_threads(self.run_cfg.num_threads)
        if self.resuming:  # the checkpoint's seed, before anything draws from it
            seed, line = resumed_seed(self.saved_identity, requested=self.run_cfg.seed, given=self.common.seed_given,
                                      where=self.saved_where, resolve=resolve_seed)
            self.say(line)
        else:
            seed = resolve_seed(self.run_cfg.seed)
        seed_everything(seed)
        run_dir = make_run_dir(self.run_cfg.output_root, self.benchmark.package, self.run_cfg.run_name, is_main=self.info.is_main)
        self.tracker = MLPerfTracker(benchmark=self.benchmark.mlperf_name, log_path=run_dir / "mllog.log", resume=self.resuming)
        self._closing.callback(self.tracker.close)
        self.tracker.cache_clear()
        self.tracker.init_start()
        s = self.common.submission
        self.tracker.submission(org=s.org, platform=s.platform, division=s.division, status=s.status)
        if self.info.is_main:
            write_config_snapshot(run_dir, operative=False)
        streams = RandomStreams(seed=seed, rank=self.info.rank, device=self.info.device)
        world_size = self.info.world_size
        return RunContext(configs=self.configs, run=self.run_cfg, info=self.info, seed=seed, run_dir=run_dir,
                          streams=streams, config_file=self.config_file, trains_model=self.trains_model,
                          global_batch_size=lambda configured: self.extensions.global_batch_size(configured, world_size))

    # ----------------------------------------------------------------- resume
    def _identity(self, plan: TrainingPlan, ctx: RunContext) -> dict:
        """What this launch trains; checked against the checkpoint a resume would load (a ConfigError)."""
        identity = {SEED: ctx.seed, WORLD_SIZE: self.info.world_size, TRAIN_SAMPLES: plan.data.schedule.train_samples,
                    **json.loads(json.dumps(dict(plan.identity)))}
        if self.resuming and self.saved_identity:
            for line in check_identity(self.saved_identity, identity, where=self.saved_where,
                                       adapts_world_size=isinstance(plan.task, CheckpointAdaptingTask)):
                self.say(line)
        return identity

    def _resume(self, plan: TrainingPlan, ctx: RunContext) -> TrainingProgress:
        if not self.resuming:
            return TrainingProgress()
        adapt = plan.task.adapt_checkpoint if isinstance(plan.task, CheckpointAdaptingTask) else None
        metadata = self.checkpoints.load_latest(plan.task.app_state(), generators=ctx.streams.generators(), adapt=adapt)
        progress = TrainingProgress.from_json(metadata, source=str(self.checkpoints.loaded_path))
        self.tracker.load_state_dict(progress.mlperf)
        where = ", ".join(f"{k} {v}" for k, v in plan.data.schedule.mllog_position(progress).items())
        self.say(f"[resume] {self.checkpoints.loaded_path}: step {progress.global_step}, window {progress.window_key} "
                 f"batch {progress.batch_idx_in_window} ({where})")
        return progress

    # ------------------------------------------------------------------ train
    def _train(self, plan: TrainingPlan, schedule: TrainingSchedule, ctx: RunContext,
               progress: TrainingProgress) -> LoopResult:
        self.tracker.hyperparameters(plan.hyperparameters)
        self.tracker.run_start()
        resume_step = progress.global_step if self.resuming else None
        metrics = MetricsLog(ctx.run_dir / "metrics.jsonl", enabled=self.info.is_main, truncate=not self.resuming,
                             keep_through_step=resume_step)
        observers = self._observers(plan, schedule, ctx, progress, metrics)
        if self.info.is_main:
            write_config_snapshot(ctx.run_dir, operative=True)
        self.say(schedule.description)
        if plan.evaluate_untrained and not self.resuming:
            if self.preemption.stop_requested(distributed=True):  # a collective: every rank decides alike
                self.say("[preempt] stop requested before training: the untrained evaluation is skipped")
            else:
                self._evaluate_untrained(plan, ctx, metrics, progress)
        checkpoints = LoopCheckpoints(policy=self.common.checkpoint, manager=self.checkpoints,
                                      generators=ctx.streams.generators, mlperf_state=self.tracker.state_dict)
        loop = TrainLoop(task=plan.task, schedule=schedule, loader=plan.data.loader, progress=progress,
                         checkpoints=checkpoints, observers=observers, preemption=self.preemption, streams=ctx.streams)
        self.loop_started = time.perf_counter()
        return loop.run()

    def _observers(self, plan: TrainingPlan, schedule: TrainingSchedule, ctx: RunContext, progress: TrainingProgress,
                   metrics: MetricsLog) -> Observers:
        """Everything that watches the loop, closed (an open trace window written) on every way out."""
        resume_step = progress.global_step if self.resuming else None
        observers = Observers([metrics])
        self._closing.callback(observers.close)
        if self.info.is_main:
            observers.add(ConsoleLines(log_every_steps=self.run_cfg.log_every_steps, max_steps=schedule.max_steps))
        observers.add(MLPerfEvents(self.tracker, position=schedule.mllog_position,
                                   train_loss_every_steps=self.run_cfg.mllog_train_loss_every_steps))
        if self.run_cfg.log_sample_ids:
            observers.add(SampleAuditLog(ctx.run_dir / f"sample_ids_rank{self.info.rank}.jsonl", resume_step=resume_step))
        observers.add(TracedSteps(StepTracer(self.common.trace, run_dir=ctx.run_dir, rank=self.info.rank,
                                             device=self.info.device)))
        for observer in self.extensions.observers(ctx, plan, progress):
            observers.add(observer)
        return observers

    def _evaluate_untrained(self, plan: TrainingPlan, ctx: RunContext, metrics: MetricsLog,
                            progress: TrainingProgress) -> None:
        """The fresh model's quality, kept in the progress so a resumed run still reports it."""
        t0 = time.perf_counter()
        with ctx.streams.evaluating():
            result = plan.task.evaluate(EvalPoint(step=0, samples_seen=0, window_key=None, next_window_key=None))
        metrics.write({"step": 0, "samples": 0, "baseline": True, "eval_samples": result.samples, **result.metrics})
        progress.metrics["untrained_quality"] = result.quality
        shown = " ".join(f"{k}={v:.4f}" for k, v in result.metrics.items() if result.shown is None or k in result.shown)
        self.say(f"[eval] untrained model: {shown} ({result.samples} samples, {time.perf_counter() - t0:.1f}s)")

    # ----------------------------------------------------------------- finish
    def _finish(self, plan: TrainingPlan, ctx: RunContext, result: LoopResult) -> dict:
        """After everything is closed: the extensions' finish (the load profile), the compliance check,
        summary.json and the closing line."""
        self.extensions.finish(ctx, plan, result)
        untrained = result.progress.metrics.get("untrained_quality")
        extra, done_line = plan.summarize(result, untrained)
        last = result.last_eval.quality if result.last_eval else result.progress.metrics.get("last_quality")
        summary = {
            "benchmark": self.benchmark.package,
            "run_dir": str(ctx.run_dir),
            "world_size": self.info.world_size,
            "seed": ctx.seed,
            "steps": result.progress.global_step,
            "samples": result.progress.samples_seen,
            "final_quality": last,
            "best_quality": result.progress.metrics.get("best_quality"),
            "untrained_quality": untrained,
            "reached_target": result.reached_target,
            "preempted": result.preempted,
            **extra,
            "loop_s": round(time.perf_counter() - self.loop_started, 1),
            "wall_s": round(time.perf_counter() - self.started, 1),
        }
        if self.info.is_main:
            if self.run_cfg.check_compliance and self.trains_model:  # a log of no model's training is no MLPerf run
                report = self._check_compliance(plan, ctx, result)
                summary["compliance"] = report.to_json()
                print(report.summary_line(), flush=True)
            (ctx.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            if result.preempted:
                print(f"[done] preempted at step {result.progress.global_step}; resume by relaunching the same command",
                      flush=True)
            elif done_line is not None:
                print(f"{done_line} in {summary['wall_s']}s -> {ctx.run_dir}", flush=True)
        barrier()
        return summary

    def _check_compliance(self, plan: TrainingPlan, ctx: RunContext, result: LoopResult) -> ComplianceReport:
        log = ctx.run_dir / "mllog.log"
        facts = RunFacts(
            reference_recipe=self.config_file == self.benchmark.reference_config,
            reference_data=plan.reference_data,
            reached_target=result.reached_target,
            preempted=result.preempted,
            config_file=self.config_file,
            dataset=plan.data.dataset,
        )
        failures = check_log(log, ruleset=self.benchmark.ruleset)
        return explain(failures, rules=self.benchmark.rules, facts=facts, ruleset=self.benchmark.ruleset, log=log.name)
