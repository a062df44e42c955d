"""Launch configs: pinned per (architecture, op, shape key) by default, searched on request.

Pinned configs make cold starts deterministic (no timing-dependent choice, no search time).
`TRITON_FULL_AUTOTUNE=1` times every config of the op's search space once per shape key
and keeps the fastest; `autotune_winners.py` prints what was found in the table's format.
`HSTU_AUTOTUNE_TABLE=/path.json` points at another table (same format).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

from recommendation_v4.ops.triton.arch import DeviceFacts

logger = logging.getLogger(__name__)

DEFAULT_TABLE_PATH = Path(__file__).with_name("autotune_configs.json")
KernelConfig = dict[str, Any]

OPS = (
    "hstu_attn_fwd",
    "hstu_attn_bwd_dq",
    "hstu_attn_bwd_dkdv",
    "jagged_concat_split",
    "layer_norm_fwd",
    "layer_norm_bwd",
    "ln_mul_dropout_fwd",
    "ln_mul_dropout_bwd",
)


def full_autotune_enabled() -> bool:
    return os.environ.get("TRITON_FULL_AUTOTUNE", "0").strip().lower() in ("1", "true", "yes", "on")


def table_path() -> Path:
    return Path(os.environ.get("HSTU_AUTOTUNE_TABLE", str(DEFAULT_TABLE_PATH)))


@functools.lru_cache(maxsize=4)
def _load_table(path: str) -> dict[str, Any]:
    try:
        table = json.loads(Path(path).read_text())
    except FileNotFoundError as err:
        raise FileNotFoundError(f"autotune table {path} does not exist (HSTU_AUTOTUNE_TABLE?)") from err
    except json.JSONDecodeError as err:
        raise ValueError(f"autotune table {path} is not valid JSON: {err}") from err
    if table.get("format") != 1 or not isinstance(table.get("archs"), dict):
        raise ValueError(f"autotune table {path} must have \"format\": 1 and an \"archs\" object")
    return table


def shape_key(**parts: Any) -> str:
    """Canonical shape key, e.g. shape_key(d=128, n=4096) -> "d=128,n=4096"."""
    return ",".join(f"{name}={value}" for name, value in parts.items())


def pinned_config(*, facts: DeviceFacts, op: str, key: str) -> KernelConfig:
    """The pinned config: exact arch, then backend, then "default"; exact shape key, then op default."""
    if op not in OPS:
        raise KeyError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    path = table_path()
    archs = _load_table(str(path))["archs"]
    for arch_key in dict.fromkeys((facts.table_key, facts.backend, "default")):
        per_op = archs.get(arch_key, {}).get(op)
        if not per_op:
            continue
        if key in per_op:
            return dict(per_op[key])
        if "default" in per_op:
            return dict(per_op["default"])
    raise KeyError(f"autotune table {path} has no config for op {op!r} on {facts.table_key} (nor a default)")


def search_space(*, facts: DeviceFacts, op: str) -> list[KernelConfig]:
    """Every config `TRITON_FULL_AUTOTUNE=1` tries for `op` on this backend."""
    if facts.backend == "interpreter":
        # Tiny on purpose: the search machinery is tested under the interpreter.
        if op.startswith("hstu_attn"):
            return [{"BLOCK_M": 16, "BLOCK_N": 16}, {"BLOCK_M": 32, "BLOCK_N": 16}]
        if op == "jagged_concat_split":
            return [{"BLOCK_N": 2, "BLOCK_D": 16}, {"BLOCK_N": 4, "BLOCK_D": 32}]
        return [{"BLOCK_N": 1}, {"BLOCK_N": 4}]
    hip = facts.backend == "hip"
    configs: list[KernelConfig] = []
    if op.startswith("hstu_attn"):
        stages = (1, 2) if hip else (1, 2, 3)
        for bm, bn, warps, st in itertools.product((32, 64, 128), (32, 64, 128), (4, 8), stages):
            if bm * bn > 128 * 64:
                continue
            cfg: KernelConfig = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": st}
            if hip:
                for nonk, waves in itertools.product((16, 32), (0, 1, 2)):
                    configs.append({**cfg, "matrix_instr_nonkdim": nonk, "waves_per_eu": waves})
            else:
                configs.append(cfg)
        return configs
    if op == "jagged_concat_split":
        return [
            {"BLOCK_N": bn, "BLOCK_D": bd, "num_warps": w}
            for bn, bd, w in itertools.product((1, 2, 4, 8, 16), (64, 128, 256), (1, 2, 4, 8))
        ]
    return [{"BLOCK_N": bn, "num_warps": w} for bn, w in itertools.product((1, 2, 4, 8, 16), (1, 2, 4, 8))]


# (arch table key, op, shape key) -> the config a full search picked in this process.
_winners: dict[tuple[str, str, str], KernelConfig] = {}


def winners_table() -> dict[str, dict[str, dict[str, KernelConfig]]]:
    """This process's search winners as an "archs" fragment of the table."""
    table: dict[str, dict[str, dict[str, KernelConfig]]] = {}
    for (arch, op, key), cfg in sorted(_winners.items()):
        table.setdefault(arch, {}).setdefault(op, {})[key] = dict(cfg)
    return table


def _time_ms(facts: DeviceFacts, run: Callable[[], None]) -> float:
    if facts.backend == "interpreter":
        start = time.perf_counter()
        run()
        return (time.perf_counter() - start) * 1e3
    from triton.testing import do_bench

    return float(do_bench(run, warmup=5, rep=25))


def choose_config(*, facts: DeviceFacts, op: str, key: str, run: Callable[[KernelConfig], None]) -> KernelConfig:
    """The config to launch `op` with; `run(cfg)` launches it (it must be safe to repeat)."""
    if not full_autotune_enabled():
        return pinned_config(facts=facts, op=op, key=key)
    cache_key = (facts.table_key, op, key)
    if cache_key in _winners:
        return _winners[cache_key]
    timings: list[tuple[float, int, KernelConfig]] = []
    for index, cfg in enumerate(search_space(facts=facts, op=op)):
        try:
            run(cfg)  # compile and warm up outside the timing
            timings.append((_time_ms(facts, lambda cfg=cfg: run(cfg)), index, cfg))
        except Exception as err:  # noqa: BLE001 - a config that cannot compile is skipped
            logger.info("autotune %s %s: config %s skipped: %s", op, key, cfg, err)
    if not timings:
        raise RuntimeError(f"autotune for {op} at {key} on {facts.table_key}: no config in the search space ran")
    best = min(timings)[2]
    _winners[cache_key] = best
    logger.info("autotune %s %s on %s: %s (%.3f ms)", op, key, facts.table_key, best, min(timings)[0])
    if facts.backend != "interpreter":
        torch.cuda.synchronize()
    return best
