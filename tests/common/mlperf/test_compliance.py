"""A run's self-check: the official checker's failures, each explained by a fact of the run or not."""

from __future__ import annotations

from common.mlperf.compliance import DATASET, RECIPE, TARGET, KnownRule, RunFacts, check_log, explain, parse_messages
from tests.common.mlperf.test_tracker import DLRMV4_EVAL_INTERVAL, DLRMV4_HYPERPARAMETERS, start_dlrmv4_run, train_blocks

RULES = (
    KnownRule("train_samples", "s['train_samples']", (DATASET,), "the reference train samples"),
    KnownRule("eval_accuracy", "s['target_accuracy']", (TARGET,), "the target"),
    KnownRule("opt_base_learning_rate", "", (RECIPE,), "the learning-rate band"),
)


def _facts(**changes) -> RunFacts:
    base = dict(reference_recipe=False, reference_data=False, reached_target=False, preempted=False,
                config_file="debug.gin", dataset="synthetic-tiny")
    return RunFacts(**{**base, **changes})


def test_the_checkers_three_message_forms_are_read():
    messages = [
        "CHECK for 'train_samples' failed in line 12:\n:::MLLOG {...}\nfailed test:  v['value'] == s['train_samples'] \ncurrent context[s]={}",
        "Failed checks for eval_accuracy : v['value'] >= s['target_accuracy']",
        "Required EXACTLY_ONE occurrence of 'run_stop' but found 0",
        "Required AT_LEAST_ONE occurrence of 'eval_accuracy' but found 0",
        "Log lines had parsing errors.",
        "Required AT_LEAST_ONE occurrence of 'eval_stop' or 'block_stop'",  # a set's order, any run's
        "Required AT_LEAST_ONE occurrence of 'block_stop' or 'eval_stop'",
    ]
    assert parse_messages(messages) == [
        ("train_samples", "v['value'] == s['train_samples']"),
        ("eval_accuracy", "v['value'] >= s['target_accuracy']"),
        ("run_stop", "required once"),
        ("eval_accuracy", "required at least once"),
        ("log", "Log lines had parsing errors."),
        ("block_stop or eval_stop", "required at least once"),
        ("block_stop or eval_stop", "required at least once"),
    ]


def test_a_reference_log_passes_and_a_small_run_is_explained_rule_by_rule(tmp_path):
    log = tmp_path / "mllog.log"
    tracker = start_dlrmv4_run(log)
    train_blocks(tracker, range(26), {25: 0.741, 26: 0.7512})
    tracker.run_stop(success=True, samples_count=26 * DLRMV4_EVAL_INTERVAL)
    tracker.close()
    assert check_log(log, ruleset="6.1.0") == []
    report = explain([], rules=RULES, facts=_facts(), ruleset="6.1.0", log="mllog.log")
    assert report.passed and "every rule passes" in report.summary_line()

    small = tmp_path / "small.log"
    tracker = start_dlrmv4_run(small, hyperparameters={**DLRMV4_HYPERPARAMETERS, "train_samples": 1000,
                                                      "learning_rate": 1e-3, "sparse_learning_rate": 1e-3,
                                                      "max_sequence_length": 2048})
    train_blocks(tracker, range(26), {25: 0.6, 26: 0.61})
    tracker.run_stop(success=False, samples_count=26 * DLRMV4_EVAL_INTERVAL)
    tracker.close()
    failures = check_log(small, ruleset="6.1.0")
    assert ("train_samples", "v['value'] == s['train_samples']") in failures
    assert ("eval_accuracy", "v['value'] >= s['target_accuracy']") in failures
    report = explain(failures, rules=RULES, facts=_facts(), ruleset="6.1.0", log="small.log")
    kinds = {f.key: f.kind for f in report.failures}
    assert kinds["train_samples"] == DATASET and kinds["opt_base_learning_rate"] == RECIPE
    assert kinds["eval_accuracy"] == TARGET
    # no rule of this test's list explains a changed sequence budget
    assert [f.key for f in report.unexpected] == ["max_sequence_length"]
    line = report.summary_line()
    assert "not the reference dataset: train_samples" in line and "UNEXPECTED" in line


def test_a_fact_of_the_run_withdraws_its_explanation():
    failures = [("train_samples", "v['value'] == s['train_samples']"), ("eval_accuracy", "v['value'] >= s['target_accuracy']"),
                ("opt_base_learning_rate", "s['lr_min'] <= v['value']"), ("run_stop", "required once")]
    loose = explain(failures, rules=RULES, facts=_facts(preempted=True), ruleset="6.1.0", log="l")
    assert [f.kind for f in loose.failures] == [DATASET, TARGET, RECIPE, "preempted"] and not loose.unexpected
    strict = explain(failures, rules=RULES, facts=_facts(reference_data=True, reference_recipe=True, reached_target=True),
                     ruleset="6.1.0", log="l")
    assert len(strict.unexpected) == 4  # on the reference data and recipe, none of these is excused


def _flux_reference_log(path, *, evaluations_begun: int = 0, stopped: bool = True):
    """A FLUX.1 log at its reference config (flux_schnell.gin, 8 ranks) of a run that trains 2 steps and
    stops on max_steps, long before its first evaluation at ceil(262144 / GBS) steps."""
    import gin

    from common.config.gin_files import load_gin
    from common.mlperf.tracker import MLPerfTracker
    from common.run import settings  # noqa: F401  (registers common.RunConfig, which the gin file binds)
    from common.run.schedule import TrainingSchedule
    from flux.mllog_recipe import mllog_hyperparameters
    from flux.run_config import TrainConfig
    from flux.schedule import eval_interval_steps
    from tests.trainers.trainer_process import REPO

    gin_file = REPO / "flux" / "configs" / "flux_schnell.gin"
    load_gin([gin_file])
    try:
        cfg = TrainConfig()
    finally:
        gin.clear_config()
    gbs = cfg.global_batch_size
    tracker = MLPerfTracker(benchmark="flux1", log_path=path, resume=False)
    tracker.cache_clear()
    tracker.init_start()
    tracker.submission(org="reference", platform="8xB200", division="closed", status="onprem")
    schedule = TrainingSchedule(windows=[0], global_batch_size=gbs, local_batch_size=gbs // 8, train_samples=1_099_776,
                                description="", eval_every_steps=eval_interval_steps(cfg))
    tracker.hyperparameters(mllog_hyperparameters(cfg=cfg, schedule=schedule, eval_samples=29_696, seed=1,
                                                  config_file=gin_file.name))
    tracker.run_start()
    tracker.block_start(samples_count=0)
    for _ in range(evaluations_begun):  # an evaluation that began and logged no result
        tracker.eval_start(samples_count=2 * gbs)
    if stopped:
        tracker.run_stop(success=False, samples_count=2 * gbs)
    tracker.close()
    return path


def test_a_run_stopped_before_its_first_evaluation_is_explained(tmp_path):
    from common.mlperf.compliance import NO_EVALUATION, PREEMPTED, LogFacts
    from flux.mllog_recipe import COMPLIANCE_RULES

    facts = _facts(reference_recipe=True, config_file="flux_schnell.gin")
    failures = check_log(_flux_reference_log(tmp_path / "early.log"), ruleset="6.1.0")
    # what the checker says of it (and of the reference's own log of such a run): its alternatives in one order
    assert sorted(failures) == [("block_stop or epoch_stop", "required at least once"),
                                ("block_stop or eval_stop", "required at least once"),
                                ("eval_accuracy", "required at least once")]
    assert failures.log_facts == LogFacts(run_stopped=True, evaluations=0, stop_samples=1024)
    report = explain(failures, rules=COMPLIANCE_RULES, facts=facts, ruleset="6.1.0", log="early.log")
    assert not report.unexpected and {f.kind for f in report.failures} == {NO_EVALUATION}
    assert all("a run stopped before its first evaluation has no eval_accuracy and no block_stop" in f.reason
               for f in report.failures)
    line = report.summary_line()
    assert "stopped before its first evaluation: " in line and "UNEXPECTED" not in line, line
    # not explained: an evaluation that began and logged no result, a log read without its facts
    begun = check_log(_flux_reference_log(tmp_path / "begun.log", evaluations_begun=1), ruleset="6.1.0")
    assert ("eval_accuracy", "required at least once") in begun
    assert [f.key for f in explain(begun, rules=COMPLIANCE_RULES, facts=facts, ruleset="6.1.0",
                                   log="begun.log").unexpected] == [k for k, _ in begun]
    assert len(explain(list(failures), rules=COMPLIANCE_RULES, facts=facts, ruleset="6.1.0", log="l").unexpected) == 3
    stop = explain([("run_stop", "required once")], rules=COMPLIANCE_RULES, facts=facts, ruleset="6.1.0", log="l",
                   log_facts=failures.log_facts)
    assert [f.key for f in stop.unexpected] == ["run_stop"]  # not an event an evaluation would have logged
    # a run preempted before its first evaluation (no run_stop yet) is explained by the preemption
    cut = check_log(_flux_reference_log(tmp_path / "cut.log", stopped=False), ruleset="6.1.0")
    kinds = {f.key: f.kind for f in explain(cut, rules=COMPLIANCE_RULES, facts=_facts(preempted=True), ruleset="6.1.0",
                                            log="cut.log").failures}
    assert set(kinds.values()) == {PREEMPTED} and "run_stop" in kinds and "eval_accuracy" in kinds
