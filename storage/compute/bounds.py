"""The roofline beside the compute-time tables (storage.compute_times): for each row, the least
time a step of that batch can take on that accelerator at the benchmark's reference flavor and
first reference world, so a published or copied figure that no measurement here backs is at
least bounded from below (a row under its bound did not run this benchmark's model)."""

from __future__ import annotations

from typing import Any

from common.spec import BenchmarkSpec
from storage.compute.accelerators import get_accelerator, roofline
from storage.compute.profile import flops_section
from storage.compute.report import resolve_builder
from storage.compute_times.tables import load


def compute_time_bounds(spec: BenchmarkSpec) -> list[dict[str, Any]]:
    if spec.compute is None or spec.storage is None:
        return []
    compute = spec.compute
    builder = resolve_builder(compute.model_builder)
    world = compute.reference_world_sizes[0]
    per_sample = None
    rows = []
    for row in load(spec).values():
        model = builder(compute.reference_flavor, world, compute.ranks_per_node, row.batch_per_accelerator)
        if per_sample is None:
            per_sample = flops_section(model)["least"]
        try:
            accelerator = get_accelerator(row.accelerator)
        except KeyError:
            rows.append({"row": row, "bound": None})
            continue
        state = model.state
        bound = roofline(flops=per_sample * row.batch_per_accelerator,
                         memory_bytes=2 * (state.parameters + state.gradients + state.optimizer) + model.extra_memory_traffic,
                         collectives=model.collectives, accelerator=accelerator, ranks_per_node=compute.ranks_per_node)
        rows.append({"row": row, "bound": bound, "world": world})
    return rows


def render_bounds(spec: BenchmarkSpec, rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for entry in rows:
        row, bound = entry["row"], entry["bound"]
        if bound is None:
            lines.append(f"{spec.package:<18}{row.accelerator:<8}{row.seconds_per_step:>10} s/step  batch "
                         f"{row.batch_per_accelerator:>6}  roofline: accelerator not in the table")
            continue
        ratio = row.seconds_per_step / bound["step_s"]
        lines.append(f"{spec.package:<18}{row.accelerator:<8}{row.seconds_per_step:>10} s/step  batch "
                     f"{row.batch_per_accelerator:>6}  roofline >= {bound['step_s']:.5f} s ({bound['bound_by']}, "
                     f"{entry['world']} ranks)  table/bound {ratio:,.2f}" + ("  BELOW THE BOUND" if ratio < 1 else ""))
    return lines
