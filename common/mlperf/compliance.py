"""Every run checks itself: the official MLPerf compliance checker on the run's own mllog.

`check_log` runs `mlperf_logging`'s checker in-process on a log and returns each failed rule as
(key, check). `explain` matches them against what the run knows about itself: a recipe other
than the reference breaks the hyperparameters the closed rules pin, a dataset other than the
reference breaks the pinned sample counts (and the eval grid laid over them), a run that did not
reach the target fails the target rule, a preempted run has no run_stop yet, a run that stopped
(max_steps) before its first evaluation has no eval_accuracy and no block_stop (the log says so:
`check_log` hands what it read of the run with the failures, `LogFacts`). What is left is
unexpected, and means the log could not be submitted for a reason the recipe does not explain.

    report = explain(check_log(log, ruleset="6.1.0"), rules=benchmark_rules, facts=RunFacts(...))
    print(report.summary_line())
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Iterator, Sequence

# Rule kinds and when a failure of that kind is expected.
DATASET = "dataset"  # pins the reference dataset: expected unless the run uses it
TARGET = "target"  # the quality target: expected unless the run reached it
RECIPE = "recipe"  # a pinned hyperparameter: expected unless the run uses the reference recipe
PREEMPTED = "preempted"  # an event the run logs only when it finishes
NO_EVALUATION = "no_evaluation"  # the run stopped before its first evaluation: nothing of one is logged
# what a run that stops before its first evaluation never logs: the evaluation's result and end, and
# the end of the block (or epoch) of training that the evaluation closes
_LOGGED_AT_EVALUATION = frozenset({"eval_accuracy", "eval_stop", "block_stop", "epoch_stop"})


@dataclasses.dataclass(frozen=True)
class KnownRule:
    """A rule of the benchmark's ruleset, matched by its key and a piece of its failed check."""

    key: str
    check_contains: str  # "" matches any failed check of the key
    kinds: tuple[str, ...]  # DATASET / TARGET / RECIPE: the first that applies explains a failure
    about: str  # what the rule pins, in a few words


@dataclasses.dataclass(frozen=True)
class RunFacts:
    reference_recipe: bool  # the run's gin file is the benchmark's reference recipe
    reference_data: bool  # the run trained on the reference dataset
    reached_target: bool
    preempted: bool
    config_file: str
    dataset: str


@dataclasses.dataclass(frozen=True)
class RuleFailure:
    key: str
    check: str
    kind: str | None  # which fact of the run explains it; None: unexpected
    reason: str | None  # the rule and the fact, in words


_KIND_HEADINGS = {
    DATASET: "not the reference dataset",
    RECIPE: "not the reference recipe",
    TARGET: "target not reached",
    PREEMPTED: "preempted, goes on after a relaunch",
    NO_EVALUATION: "stopped before its first evaluation",
}


@dataclasses.dataclass(frozen=True)
class LogFacts:
    """What a log shows of its run, beside the checker's rules."""

    run_stopped: bool  # run_stop is logged: the run ended (it was not preempted)
    evaluations: int  # eval_start events: evaluations the run began
    stop_samples: int | None  # run_stop's samples_count, where logged

    @property
    def stopped_before_first_evaluation(self) -> bool:
        return self.run_stopped and self.evaluations == 0


class LogFailures(list):
    """check_log's failed rules, (key, check) each, with what the log shows of the run (`log_facts`)."""

    def __init__(self, failures=(), *, log_facts: LogFacts | None = None) -> None:
        super().__init__(failures)
        self.log_facts = log_facts


def read_log_facts(log: Path) -> LogFacts:
    """LogFacts of an mllog file (lines `:::MLLOG {json}`; other lines and unreadable ones skipped)."""
    stopped, evaluations, samples = False, 0, None
    for line in Path(log).read_text(errors="replace").splitlines():
        _, marker, payload = line.partition(":::MLLOG ")
        if not marker:
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            continue
        key = event.get("key") if isinstance(event, dict) else None
        if key == "eval_start":
            evaluations += 1
        elif key == "run_stop":
            stopped = True
            count = (event.get("metadata") or {}).get("samples_count")
            samples = count if isinstance(count, int) else samples
    return LogFacts(run_stopped=stopped, evaluations=evaluations, stop_samples=samples)


@dataclasses.dataclass(frozen=True)
class ComplianceReport:
    ruleset: str
    log: str
    failures: tuple[RuleFailure, ...]

    @property
    def unexpected(self) -> tuple[RuleFailure, ...]:
        return tuple(f for f in self.failures if f.reason is None)

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary_line(self) -> str:
        """One line: pass, or the failed rules grouped by the fact that explains them."""
        head = f"[compliance] mlperf_logging checker, training {self.ruleset}, {self.log}:"
        if self.passed:
            return f"{head} every rule passes, this log could be submitted"
        groups: dict[str, list[str]] = {}
        for failure in self.failures:
            groups.setdefault(failure.kind or "", []).append(failure.key)
        parts = [f"{_KIND_HEADINGS[kind]}: {', '.join(keys)}" for kind, keys in groups.items() if kind]
        if "" in groups:
            unexpected = "; ".join(f"{f.key}: {f.check}" for f in self.unexpected)
            parts.append(f"UNEXPECTED (not explained by this run): {unexpected}")
        verdict = "could not be submitted as it is" if not self.unexpected else "has a problem to fix"
        return f"{head} {len(self.failures)} rule(s) fail, this log {verdict} ({'; '.join(parts)})"

    def to_json(self) -> dict:
        return {
            "ruleset": self.ruleset,
            "passed": self.passed,
            "failures": [dataclasses.asdict(f) for f in self.failures],
            "unexpected": len(self.unexpected),
        }


_CHECK = re.compile(r"CHECK for '(\w+)' failed in line \d+:.*?failed test:\s*(.+?)\s*$", re.S | re.M)
_FAILED_CHECKS = re.compile(r"Failed checks for (\w+) : (.+?)\s*$", re.M)
# one event, or alternatives ("'block_stop' or 'eval_stop'", listed in a set's order that changes from run to run)
_REQUIRED = re.compile(r"Required (EXACTLY_ONE|AT_LEAST_ONE) occurrence of ('\w+'(?: or '\w+')*)")


def parse_messages(messages: Sequence[str]) -> list[tuple[str, str]]:
    """(key, check) for each message of the checker; a message it cannot read is kept whole."""
    failures: list[tuple[str, str]] = []
    for message in messages:
        if match := _CHECK.search(message):
            failures.append((match[1], match[2].strip()))
        elif match := _FAILED_CHECKS.search(message):
            failures.append((match[1], match[2].strip()))
        elif match := _REQUIRED.search(message):
            key = " or ".join(sorted(re.findall(r"'(\w+)'", match[2])))  # alternatives in one order, every run
            failures.append((key, "required once" if match[1] == "EXACTLY_ONE" else "required at least once"))
        else:
            failures.append(("log", message.strip().splitlines()[0] if message.strip() else "unreadable"))
    return failures


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """The checker reports through the root logger; the run reports its findings itself."""
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def check_log(log: Path, *, ruleset: str, usage: str = "training") -> LogFailures:
    """Runs the official checker on `log`; the failed rules as (key, check), empty when it passes, with
    what the log shows of the run (LogFailures.log_facts), which `explain` reads."""
    from mlperf_logging.compliance_checker import mlp_compliance

    checker = mlp_compliance.make_checker(usage, ruleset, False, False)
    with _quiet_root_logger():
        checker.check_file(str(log), f"{usage}_{ruleset}/common.yaml")
    messages = [*checker.overwritable.values(), *checker.not_overwritable]
    try:
        facts = read_log_facts(log)
    except OSError:
        facts = None
    # the checker lists one set of alternatives once per event that names it, each in its set's order, which
    # varies with the hash seed (one entry some runs, two others): once in one order, as in every run
    unique = list(dict.fromkeys(parse_messages(messages)))
    return LogFailures(unique, log_facts=facts)


def explain(
    failures: Sequence[tuple[str, str]], *, rules: Sequence[KnownRule], facts: RunFacts, ruleset: str, log: str,
    log_facts: LogFacts | None = None,
) -> ComplianceReport:
    """`log_facts`: what the log shows of the run; by default what check_log read with the failures."""
    if log_facts is None:
        log_facts = getattr(failures, "log_facts", None)
    explained = []
    for key, check in failures:
        kind, reason = _reason(key, check, rules, facts, log_facts)
        explained.append(RuleFailure(key=key, check=check, kind=kind, reason=reason))
    return ComplianceReport(ruleset=ruleset, log=log, failures=tuple(explained))


def _reason(key: str, check: str, rules: Sequence[KnownRule], facts: RunFacts,
            log_facts: LogFacts | None = None) -> tuple[str | None, str | None]:
    if check.startswith("required") and facts.preempted:
        return PREEMPTED, "the run logs it when it goes on after a relaunch"
    if check.startswith("required") and set(key.split(" or ")) <= _LOGGED_AT_EVALUATION and log_facts is not None \
            and log_facts.stopped_before_first_evaluation and not facts.reached_target:
        at = "" if log_facts.stop_samples is None else f" (at {log_facts.stop_samples:,} samples)"
        return NO_EVALUATION, (f"the run stopped{at} before its first evaluation: a run stopped before its first "
                               "evaluation has no eval_accuracy and no block_stop (its first block ends at that "
                               "evaluation); the reference's log of such a run lacks them too")
    for rule in rules:
        if rule.key != key or rule.check_contains not in check:
            continue
        for kind in rule.kinds:
            if kind == DATASET and not facts.reference_data:
                return kind, f"{rule.about}; this run's dataset is {facts.dataset}"
            if kind == TARGET and not facts.reached_target:
                return kind, f"{rule.about}, not reached"
            if kind == RECIPE and not facts.reference_recipe:
                return kind, f"{rule.about}; {facts.config_file} is not the reference recipe"
    return None, None
