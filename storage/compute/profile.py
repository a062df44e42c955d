"""A benchmark's compute profile: FLOPs per sample, memory and collectives per rank, roofline.

Counts run the benchmark's own step (its ComputeModel's build and loss) once forward and once
backward under storage.compute.tally, at `samples_per_call` samples; per-sample figures divide
by it and per-step ones multiply by the batch per rank. With activation checkpointing the
backward runs each block's forward again: those FLOPs are counted apart ("recompute") from the
model FLOPs (forward + backward), and the step's hardware FLOPs are their sum.

Activation memory is measured by torch's MemTracker (activations and temporaries at the step's
peak, eager, no allocator fragmentation) at 1x and 2x `samples_per_call` and extended linearly to
the batch per rank: exact when every activation is per-sample, as in these models. Where
MemTracker cannot follow a model, storage.compute.live_bytes measures the same; a model that knows
the generic measure would mislead gives its own estimate (ComputeModel.activations), labelled.
"""

from __future__ import annotations

from typing import Any

import torch

from storage.compute.accelerators import ACCELERATORS, roofline
from storage.compute.collectives import as_json, totals_by_kind
from storage.compute.live_bytes import dropping_gradients, step_peak
from storage.compute.model import ComputeModel
from storage.compute.tally import KINDS, OpTally


def count_step(model: ComputeModel, *, recompute: bool) -> OpTally:
    module = model.build(recompute)
    tally = OpTally()
    with tally:
        with tally.phase("forward"):
            loss = model.loss(module, model.samples_per_call)
        with tally.phase("backward"):
            loss.backward()
    return tally


def _frozen_as_buffers(module: torch.nn.Module) -> None:
    """MemTracker hooks every parameter's gradient; a frozen one (no gradient) becomes a buffer."""
    for owner in module.modules():
        for name, parameter in list(owner._parameters.items()):
            if parameter is not None and not parameter.requires_grad:
                del owner._parameters[name]
                owner.register_buffer(name, parameter.detach())


def activation_bytes(model: ComputeModel, samples: int) -> int:
    """Peak bytes beyond the parameters: activations, temporaries and gradients in flight. Each
    gradient is dropped as soon as it is accumulated, as FSDP and DDP hand it to their reduction
    (the state section counts the gradients a rank keeps)."""
    # imported here: half a second that a run's own compute section (no memory) need not pay
    from torch.distributed._tools.mem_tracker import MemTracker

    module = model.build(model.activation_checkpointing)
    _frozen_as_buffers(module)
    hooks = dropping_gradients(module)
    tracker = MemTracker()
    tracker.track_external(module)
    with tracker:
        loss = model.loss(module, samples)
        loss.backward()
    for hook in hooks:
        hook.remove()
    peak = 0
    for per_device in tracker.get_tracker_snapshot("peak").values():
        held = {str(kind).rsplit(".", 1)[-1]: int(value) for kind, value in per_device.items()}
        peak += held.get("Total", 0) - held.get("PARAM", 0) - held.get("BUFFER", 0)
    return peak


def live_activation_bytes(model: ComputeModel, samples: int) -> int:
    """The same measure by storage.compute.live_bytes, for models MemTracker cannot follow."""
    module = model.build(model.activation_checkpointing)
    return step_peak(module, lambda: model.loss(module, samples))


def _per_sample(value: float, samples: int) -> float:
    return value / samples


def flops_section(model: ComputeModel) -> dict[str, Any]:
    plain = count_step(model, recompute=False)
    forward, backward = plain.phases["forward"], plain.phases["backward"]
    n = model.samples_per_call
    recompute = 0.0
    if model.activation_checkpointing:
        with_ac = count_step(model, recompute=True)
        recompute = max(with_ac.phases["backward"].total() - backward.total(), 0) / n
    by_kind = {k: _per_sample(forward.by_kind()[k] + backward.by_kind()[k], n) for k in KINDS}
    # by module: the forward only; in the backward torch's ModuleTracker cannot always tell modules apart
    by_module = {m: _per_sample(v, n) for m, v in forward.by_module().items()}
    bytes_by_kind = {k: _per_sample(forward.bytes_by_kind.get(k, 0) + backward.bytes_by_kind.get(k, 0), n)
                     for k in KINDS}
    hardware = _per_sample(forward.total() + backward.total(), n) + recompute
    return {
        "forward": _per_sample(forward.total(), n),
        "backward": _per_sample(backward.total(), n),
        "model": _per_sample(forward.total() + backward.total(), n),
        "recompute": recompute,
        "hardware": hardware,
        "attention_needed": model.attention_needed,
        # what the step needs at least: the attention pairs its mask keeps (the roofline's compute bound)
        "least": hardware - (1.0 - model.attention_needed) * by_kind["attention"],
        "by_kind": by_kind,
        "by_module_forward": by_module,
        "unfused_tensor_bytes_by_kind": bytes_by_kind,
        "counted_at_samples": n,
    }


def memory_section(model: ComputeModel) -> dict[str, Any]:
    n = model.samples_per_call
    state = model.state
    section: dict[str, Any] = {
        "parameters": state.parameters, "gradients": state.gradients, "optimizer": state.optimizer,
        "transient": state.transient, "transient_what": state.transient_what}
    if model.activations is not None:
        per_sample, how = model.activations()
        at_batch = int(round(per_sample * model.batch_per_rank))
        section.update(activations=at_batch, total=state.total + at_batch, activations_how=how)
        return section
    tool = "MemTracker"
    try:
        one, two = activation_bytes(model, n), activation_bytes(model, 2 * n)
    except Exception as error:  # noqa: BLE001 - e.g. TorchRec's JaggedTensor outputs defeat its module hooks
        tool = (f"storage.compute.live_bytes (torch's MemTracker failed on this model: {type(error).__name__}: "
                f"{str(error)[:80]})")
        one, two = live_activation_bytes(model, n), live_activation_bytes(model, 2 * n)
    slope = (two - one) / n
    at_batch = int(round(one + slope * (model.batch_per_rank - n)))
    section.update(
        activations=at_batch, total=state.total + at_batch,
        activations_how=(f"{tool}: peak beyond parameters (activations, temporaries, gradients in flight) at "
                         f"{n} and {2 * n} samples ({one:,} and {two:,} B), linear to {model.batch_per_rank}"
                         + (", with activation checkpointing" if model.activation_checkpointing else "")))
    return section


def build_profile(model: ComputeModel, *, with_memory: bool = True) -> dict[str, Any]:
    with torch.random.fork_rng(devices=[]):  # a run's own generator state stays as it was
        torch.manual_seed(0)
        flops = flops_section(model)
        memory = memory_section(model) if with_memory else None
        variants = {name: _variant(variant) for name, variant in model.variants.items()}
    step_flops = flops["hardware"] * model.batch_per_rank
    least_step_flops = flops["least"] * model.batch_per_rank
    state = model.state
    least_traffic = 2 * (state.parameters + state.gradients + state.optimizer) + model.extra_memory_traffic
    rooflines = {}
    for key, accelerator in ACCELERATORS.items():
        rooflines[key] = roofline(flops=least_step_flops, memory_bytes=least_traffic, collectives=model.collectives,
                                  accelerator=accelerator, ranks_per_node=model.ranks_per_node)
    return {
        "benchmark": model.benchmark, "flavor": model.flavor, "world_size": model.world_size,
        "ranks_per_node": model.ranks_per_node, "batch_per_rank": model.batch_per_rank,
        "global_batch": model.batch_per_rank * model.world_size, "parallelism": model.parallelism,
        "parameters": model.parameters, "activation_checkpointing": model.activation_checkpointing,
        "flops_per_sample": flops, "flops_per_rank_step": step_flops,
        "memory_per_rank": memory,
        "communication_per_rank_step": {"by_kind": totals_by_kind(model.collectives),
                                        "collectives": as_json(model.collectives)},
        "least_memory_traffic_per_rank_step": least_traffic,
        "roofline": rooflines,
        "notes": list(model.notes),
        "reference_cost": model.reference_cost,
        "variants": variants,
    }


def _variant(model: ComputeModel) -> dict[str, Any]:
    """A variant's FLOPs (its memory and collectives are the default's: only its compute differs)."""
    torch.manual_seed(0)
    flops = flops_section(model)
    return {"what": " ".join(model.notes), "flops_per_sample": flops,
            "flops_per_rank_step": flops["hardware"] * model.batch_per_rank,
            "least_flops_per_rank_step": flops["least"] * model.batch_per_rank}
