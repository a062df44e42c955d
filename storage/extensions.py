"""The storage layer's part of every trainer's run (common.run.extensions): the load profile, and
the emulated accelerators when `common.RunConfig.emulate` names one. A trainer's entry point passes
them to the run:

    run_main(BENCHMARK, argv, extensions=run_extensions())
"""

from __future__ import annotations

from common.run.extensions import RunExtension
from storage.emulation.extension import EmulationExtension
from storage.load_profile.extension import LoadProfileExtension


def run_extensions() -> list[RunExtension]:
    profile = LoadProfileExtension()
    return [profile, EmulationExtension(profile)]
