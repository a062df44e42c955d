"""What the shared trainer test suite (tests/trainers/test_trainer_lifecycle.py, test_emulation.py)
needs to know about a benchmark: one `TrainerUnderTest` per registered benchmark, in
`tests/<package>/trainer_under_test.py` as `TRAINER`. The benchmarks come from the registry
(common.registry): a new benchmark joins the suite with that one file."""

from __future__ import annotations

import importlib

from common import registry
from tests.trainers.trainer_entry import COMMON_BAD_BINDINGS, TrainerUnderTest

__all__ = ["COMMON_BAD_BINDINGS", "TRAINERS", "TrainerUnderTest", "trainer_under_test"]


def trainer_under_test(package: str) -> TrainerUnderTest:
    module = f"tests.{package}.trainer_under_test"
    try:
        trainer = importlib.import_module(module).TRAINER
    except ModuleNotFoundError as error:
        if error.name != module:
            raise
        raise LookupError(f"benchmark {package!r} is registered but has no {module.replace('.', '/')}.py: the "
                          "shared trainer suite needs its TRAINER") from None
    assert trainer.package == package, (module, trainer.package)
    return trainer


TRAINERS = tuple(trainer_under_test(package) for package in registry.packages())
