"""Compute profiles as text: one profile in full, or the reference table of several (Markdown)."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from storage.compute.collectives import KINDS as COLLECTIVE_KINDS
from storage.compute.tally import KINDS as OPERATOR_KINDS


def resolve_builder(path: str) -> Callable[..., Any]:
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


def _g(value: float) -> str:
    return f"{value / 1e9:,.1f}"


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:,.2f}"


def render_profile(p: dict[str, Any]) -> str:
    f = p["flops_per_sample"]
    lines = [
        f"{p['benchmark']} {p['flavor']}: {p['world_size']} ranks ({p['ranks_per_node']} per node), "
        f"{p['batch_per_rank']} samples per rank (global {p['global_batch']}), {p['parallelism']}; "
        f"{p['parameters']:,} parameters",
        f"GFLOP per sample: forward {_g(f['forward'])}, backward {_g(f['backward'])}, model {_g(f['model'])}"
        + (f", recompute {_g(f['recompute'])} (activation checkpointing)" if f["recompute"] else "")
        + f"; per rank and step {p['flops_per_rank_step'] / 1e12:,.2f} TFLOP"
        + (f"; the mask needs {f['attention_needed']:.1%} of the attention's: {_g(f['least'])} per sample at least"
           if f["attention_needed"] < 1 else ""),
        "  by kind: " + ", ".join(f"{k} {_g(f['by_kind'][k])}" for k in OPERATOR_KINDS if f["by_kind"][k]),
        "  forward by module: " + ", ".join(f"{m} {_g(v)}" for m, v in f["by_module_forward"].items() if v >= 1e6),
    ]
    m = p["memory_per_rank"]
    if m is not None:
        lines.append(f"GB per rank: parameters {_gb(m['parameters'])}, gradients {_gb(m['gradients'])}, optimizer "
                     f"{_gb(m['optimizer'])}, transient {_gb(m['transient'])}, activations {_gb(m['activations'])}; "
                     f"total {_gb(m['total'])}")
        lines.append(f"  activations: {m['activations_how']}")
        if m["transient_what"]:
            lines.append(f"  transient: {m['transient_what']}")
    lines.append("GB per rank and step, sent / received (ring), by collective:")
    for kind, row in p["communication_per_rank_step"]["by_kind"].items():
        lines.append(f"  {kind:<15} {int(row['calls']):>5} calls  {_gb(row['sent_bytes']):>9} / "
                     f"{_gb(row['received_bytes']):<9} (handed in {row['in_bytes']:,} B, out {row['out_bytes']:,} B)")
    lines.append("Roofline lower bound per step (s): compute / memory / network -> bound")
    for key, r in p["roofline"].items():
        net = "unknown" if r["network_s"] is None else f"{r['network_s']:.4f}"
        lines.append(f"  {key:<7} {r['compute_s']:.4f} / {r['memory_s']:.4f} / {net} -> {r['step_s']:.4f} ({r['bound_by']})")
    lines.extend(f"note: {n}" for n in p["notes"])
    for name, v in p.get("variants", {}).items():
        vf = v["flops_per_sample"]
        lines.append(f"with {name}: GFLOP per sample {_g(vf['model'])} (forward {_g(vf['forward'])}, backward "
                     f"{_g(vf['backward'])}; attention {_g(vf['by_kind']['attention'])}), {_g(vf['least'])} at least; "
                     f"per rank and step {v['flops_per_rank_step'] / 1e12:,.2f} TFLOP "
                     f"({v['flops_per_rank_step'] / p['flops_per_rank_step'] - 1:+.1%}): {v['what']}")
    if p.get("reference_cost"):
        lines.append(f"reference's own cost: {p['reference_cost']}")
    return "\n".join(lines)


def _comm(p: dict[str, Any], kind: str) -> str:
    row = p["communication_per_rank_step"]["by_kind"].get(kind)
    return "-" if row is None else _gb(row["sent_bytes"])


def render_table(profiles: list[dict[str, Any]]) -> str:
    head = ("| benchmark | ranks | batch/rank | GFLOP/sample (model) | recompute | TFLOP/rank/step | "
            "params+grads+optim GB/rank | activations GB/rank | "
            + " | ".join(f"{k} GB sent/rank/step" for k in COLLECTIVE_KINDS if k != "broadcast")
            + " | roofline B200 s | roofline MI350X s |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for p in profiles:
        f, m = p["flops_per_sample"], p["memory_per_rank"]
        state = "-" if m is None else _gb(m["parameters"] + m["gradients"] + m["optimizer"])
        acts = "-" if m is None or m["activations"] is None else _gb(m["activations"])
        comm = " | ".join(_comm(p, k) for k in COLLECTIVE_KINDS if k != "broadcast")
        roof = p["roofline"]
        rows.append(f"| {p['benchmark']} {p['flavor']} | {p['world_size']} | {p['batch_per_rank']} | {_g(f['model'])} | "
                    f"{_g(f['recompute'])} | {p['flops_per_rank_step'] / 1e12:,.2f} | {state} | {acts} | {comm} | "
                    f"{roof['b200']['step_s']:.3f} ({roof['b200']['bound_by']}) | "
                    f"{roof['mi350x']['step_s']:.3f} ({roof['mi350x']['bound_by']}) |")
    return "\n".join(rows)
