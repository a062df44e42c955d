"""The compute section of a run's load profile: the benchmark's compute model for the run being
trained (its gin config, world, batch per rank), profiled without the activation measurement
(`python -m storage.compute` adds it), on rank 0 when the run ends."""

from __future__ import annotations

import dataclasses
from typing import Any

from common.spec import BenchmarkSpec


def compute_section(spec: BenchmarkSpec, plan: Any, info: Any) -> dict[str, Any] | None:
    if spec.compute is None:
        return None
    # imported here, on rank 0 at the end: the other ranks of every run need not load the counters
    from storage.compute.profile import build_profile
    from storage.compute.report import resolve_builder

    # the run's own step only: a variant's second count (python -m storage.compute prints it) is not paid here
    model = dataclasses.replace(resolve_builder(spec.compute.run_builder)(plan, info), variants={})
    profile = build_profile(model, with_memory=False)
    profile["how"] = ("storage.compute at this run's flavor, world and batch per rank; activations: "
                      f"python -m storage.compute --benchmark {spec.package} --flavor {model.flavor} "
                      f"--world-size {model.world_size} --batch-per-rank {model.batch_per_rank}")
    return profile
