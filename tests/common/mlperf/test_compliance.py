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
    ]
    assert parse_messages(messages) == [
        ("train_samples", "v['value'] == s['train_samples']"),
        ("eval_accuracy", "v['value'] >= s['target_accuracy']"),
        ("run_stop", "required once"),
        ("eval_accuracy", "required at least once"),
        ("log", "Log lines had parsing errors."),
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
