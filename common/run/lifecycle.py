"""The run lifecycle every trainer shares, written once.

A benchmark describes itself with a `Benchmark` (its names, its configs, its MLPerf rules) and
a `build(ctx) -> TrainingPlan` that reads as its build: data -> model -> parallelism ->
optimizer -> task. `main(benchmark)` does everything around it, in this order:

    parse --gin_config/--gin_bindings -> read the configs (exit 2 on a config error)
    -> process group -> seed, run directory, MLPerf tracker (init, submission), config snapshot
    -> build -> resume from the newest checkpoint (weights, optimizer, random streams, data
       position, mllog state) -> hyperparameters, RUN_START -> metrics and sample logs
    -> the training loop -> close everything (on every path: success, preemption, error)
    -> the official compliance check of the run's own mllog -> summary.json and the last line

Exit status: 0 (finished or preempted after saving), 2 (a config error: one line naming the
binding), 3 (a data error: one line naming the file), 1 (anything else, with its traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from common.checkpoint.manager import CheckpointManager, TrainingProgress
from common.checkpoint.policy import configured_checkpoint_policy
from common.distributed.collectives import barrier
from common.mlperf.compliance import ComplianceReport, KnownRule, RunFacts, check_log, explain
from common.config.gin_files import ConfigError, load_gin, write_config_snapshot
from common.distributed.setup import DistInfo, destroy, init_distributed
from common.load_profile.session import ProfileSession
from common.run.loop import BenchmarkTask, EvalPoint, LoopConfig, LoopResult, SampleAuditLog, TrainLoop
from common.run.logs import MetricsLog
from common.mlperf.tracker import MLPerfTracker
from common.run.preemption import PreemptionHandler
from common.randomness.streams import RandomStreams, resolve_seed, seed_everything
from common.run.settings import RunConfig, Submission, read_run_config
from common.run.rundir import make_run_dir
from common.run.learning_rate import LearningRateSchedule
from common.data.loader import StreamingLoader
from common.tracing import StepTracer, TraceConfig, configured_trace_config
from common.run.warnings_filter import quiet_known_library_noise

EXIT_CONFIG_ERROR = 2
EXIT_DATA_ERROR = 3


@dataclasses.dataclass(frozen=True)
class Benchmark:
    package: str  # the Python package; names the run directory and the gin module
    mlperf_name: str  # submission_benchmark in the mllog
    ruleset: str  # the mlperf_logging ruleset the log is checked against
    reference_config: str  # the gin file of the reference recipe the closed rules are written for
    read_configs: Callable[[], Any]  # the benchmark's gin-configured settings
    build: Callable[["RunContext"], "TrainingPlan"]
    data_errors: tuple[type[BaseException], ...] = ()  # exit 3, one line naming the file
    rules: Sequence[KnownRule] = ()  # the ruleset's rules a recipe or a dataset may break


@dataclasses.dataclass
class RunContext:
    """What a build gets from the lifecycle."""

    configs: Any
    run: RunConfig
    info: DistInfo
    seed: int
    run_dir: Path
    streams: RandomStreams
    config_file: str

    def say(self, message: str) -> None:
        if self.info.is_main:
            print(message, flush=True)

    def seed_shared(self) -> None:
        """The shared seed again, right before building the model: identical weights on every rank."""
        seed_everything(self.seed)


@dataclasses.dataclass
class TrainingPlan:
    """What a build hands to the lifecycle."""

    task: BenchmarkTask
    loader: StreamingLoader
    windows: Sequence[int]
    loop: LoopConfig  # max_steps and log_every_steps come from common.RunConfig
    hyperparameters: Mapping[str, Any]  # logged before RUN_START (friendly names of common.mlperf.tracker)
    lr_schedule: LearningRateSchedule | None
    dataset: str  # for the summary and the compliance explanation
    reference_data: bool  # whether this is the dataset the closed rules pin
    schedule_line: str  # printed before training starts
    # the benchmark's summary fields and its [done] line, from the loop's result and the untrained quality
    summarize: Callable[[LoopResult, float | None], tuple[dict[str, Any], str | None]]
    eval_after_window: Callable[[int], bool] = lambda key: False
    mllog_position: Callable[[TrainingProgress], Mapping[str, int]] | None = None
    evaluate_untrained: bool = False  # score the fresh model first: a baseline for the summary, not an MLPerf eval
    closeables: Sequence[Any] = ()  # anything else with close() (evaluation loaders)


def parse_args(argv: Sequence[str] | None, *, doc: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gin_config", action="append", required=True, help="gin file (repeatable)")
    parser.add_argument("--gin_bindings", action="append", default=[], help="extra gin binding (repeatable)")
    return parser.parse_args(argv)


def _first_line(error: BaseException) -> str:
    # gin appends "In call to configurable ..." lines; a loader worker's error carries its traceback
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[-1].strip() if "Traceback" in lines[0] else lines[0].strip()


def main(benchmark: Benchmark, argv: Sequence[str] | None = None, *, doc: str | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet_known_library_noise()
    args = parse_args(argv, doc=doc)
    try:
        loaded = load_gin(args.gin_config, args.gin_bindings)
        configs = benchmark.read_configs()
        run_cfg = read_run_config(loaded.env_macros)
        submission = Submission()
        policy = configured_checkpoint_policy(env_ckpt_path=str(loaded.env_macros["CKPT_PATH"]))
        trace = configured_trace_config()
    except ConfigError as error:
        print(f"config error: {_first_line(error)}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    info = init_distributed(device=run_cfg.device, timeout_s=run_cfg.process_group_timeout_s,
                            preparation_timeout_s=run_cfg.data_preparation_timeout_s)
    try:
        _Run(benchmark, configs=configs, run_cfg=run_cfg, submission=submission, policy=policy, info=info,
             config_file=Path(args.gin_config[-1]).name, trace=trace).execute()
    except ConfigError as error:
        print(f"config error: {_first_line(error)}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except benchmark.data_errors as error:
        print(f"data error: {_first_line(error)}", file=sys.stderr)
        return EXIT_DATA_ERROR
    finally:
        destroy()
    return 0


class _Run:
    """One launch of a trainer: the steps of the module docstring, each a method."""

    def __init__(self, benchmark: Benchmark, *, configs: Any, run_cfg: RunConfig, submission: Submission, policy,
                 info: DistInfo, config_file: str, trace: TraceConfig = TraceConfig()) -> None:
        self.benchmark, self.configs, self.run_cfg, self.trace = benchmark, configs, run_cfg, trace
        self.submission, self.policy, self.info, self.config_file = submission, policy, info, config_file
        self.started = time.perf_counter()
        self._closing = contextlib.ExitStack()

    def say(self, message: str) -> None:
        if self.info.is_main:
            print(message, flush=True)

    def execute(self) -> dict:
        with self._closing:
            ctx = self._start()
            plan = self.benchmark.build(ctx)
            for closeable in (plan.loader, *plan.closeables):
                self._closing.callback(closeable.close)
            progress = self._resume(plan, ctx)
            result = self._train(plan, ctx, progress)
        return self._finish(plan, ctx, result)

    # ------------------------------------------------------------------ start
    def _start(self) -> RunContext:
        if self.run_cfg.num_threads:
            torch.set_num_threads(self.run_cfg.num_threads)
        seed = resolve_seed(self.run_cfg.seed)
        seed_everything(seed)
        run_dir = make_run_dir(self.run_cfg.output_root, self.benchmark.package, self.run_cfg.run_name, is_main=self.info.is_main)
        self.checkpoints = CheckpointManager.from_policy(self.policy)
        self.resuming = self.checkpoints is not None and self.checkpoints.has_checkpoint()
        self.tracker = MLPerfTracker(benchmark=self.benchmark.mlperf_name, log_path=run_dir / "mllog.log", resume=self.resuming)
        self._closing.callback(self.tracker.close)
        self.tracker.cache_clear()
        self.tracker.init_start()
        s = self.submission
        self.tracker.submission(org=s.org, platform=s.platform, division=s.division, status=s.status)
        if self.info.is_main:
            write_config_snapshot(run_dir, operative=False)
        streams = RandomStreams(seed=seed, rank=self.info.rank, device=self.info.device)
        return RunContext(configs=self.configs, run=self.run_cfg, info=self.info, seed=seed, run_dir=run_dir,
                          streams=streams, config_file=self.config_file)

    # ----------------------------------------------------------------- resume
    def _resume(self, plan: TrainingPlan, ctx: RunContext) -> TrainingProgress:
        if not self.resuming:
            return TrainingProgress()
        # a task may check (and adapt its state to) each candidate before it loads: `adapt_checkpoint`
        metadata = self.checkpoints.load_latest(plan.task.app_state(), generators=ctx.streams.generators(),
                                                adapt=getattr(plan.task, "adapt_checkpoint", None))
        progress = TrainingProgress.from_json(metadata, source=str(self.checkpoints.loaded_path))
        self.tracker.load_state_dict(progress.mlperf)
        where = ", ".join(f"{k} {v}" for k, v in self._position(plan, progress).items())
        self.say(f"[resume] {self.checkpoints.loaded_path}: step {progress.global_step}, window {progress.window_key} "
                 f"batch {progress.batch_idx_in_window} ({where})")
        return progress

    @staticmethod
    def _position(plan: TrainingPlan, progress: TrainingProgress) -> Mapping[str, int]:
        return plan.mllog_position(progress) if plan.mllog_position else {"samples_count": progress.samples_seen}

    # ------------------------------------------------------------------ train
    def _train(self, plan: TrainingPlan, ctx: RunContext, progress: TrainingProgress) -> LoopResult:
        self.tracker.hyperparameters(plan.hyperparameters)
        self.tracker.run_start()
        resume_step = progress.global_step if self.resuming else None
        metrics = MetricsLog(ctx.run_dir / "metrics.jsonl", enabled=self.info.is_main, truncate=not self.resuming,
                             keep_through_step=resume_step)
        self._closing.callback(metrics.close)
        sample_log = None
        if self.run_cfg.log_sample_ids:
            sample_log = SampleAuditLog(ctx.run_dir / f"sample_ids_rank{self.info.rank}.jsonl", resume_step=resume_step)
            self._closing.callback(sample_log.close)
        if self.info.is_main:
            write_config_snapshot(ctx.run_dir, operative=True)
        self.say(plan.schedule_line)
        if plan.evaluate_untrained and not self.resuming:
            self._evaluate_untrained(plan, ctx, metrics, progress)
        preemption = PreemptionHandler().install()
        self._closing.callback(preemption.uninstall)
        # closed (an open window written) on every way out: the end, preemption, an error
        tracer = StepTracer(self.trace, run_dir=ctx.run_dir, rank=self.info.rank, device=self.info.device)
        self._closing.callback(tracer.close)
        self.load_profile = None
        if self.run_cfg.load_profile:
            self.load_profile = ProfileSession(run_dir=ctx.run_dir, benchmark=self.benchmark.package,
                                               config_file=self.config_file, rank=self.info.rank,
                                               world_size=self.info.world_size, device=str(self.info.device),
                                               loader=plan.loader, hyperparameters=plan.hyperparameters,
                                               start_step=progress.global_step)
        loop = TrainLoop(
            task=plan.task,
            config=dataclasses.replace(plan.loop, max_steps=self.run_cfg.max_steps, log_every_steps=self.run_cfg.log_every_steps,
                                       mllog_train_loss_every_steps=self.run_cfg.mllog_train_loss_every_steps),
            loader=plan.loader,
            windows=plan.windows,
            metrics=metrics,
            is_main=self.info.is_main,
            progress=progress,
            lr_schedule=plan.lr_schedule,
            streams=ctx.streams,
            eval_after_window=plan.eval_after_window,
            checkpoints=self.checkpoints,
            policy=self.policy,
            tracker=self.tracker,
            mllog_position=plan.mllog_position,
            preemption=preemption,
            sample_log=sample_log,
            tracer=tracer,
            load_profile=self.load_profile.profiler if self.load_profile is not None else None,
        )
        self.loop_started = time.perf_counter()
        return loop.run()

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
        """After everything is closed: the load profile, the compliance check, summary.json and the closing line."""
        if getattr(self, "load_profile", None) is not None:
            self.load_profile.finish()
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
            if self.run_cfg.check_compliance:
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
            dataset=plan.dataset,
        )
        failures = check_log(log, ruleset=self.benchmark.ruleset)
        return explain(failures, rules=self.benchmark.rules, facts=facts, ruleset=self.benchmark.ruleset, log=log.name)
