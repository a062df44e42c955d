"""How a team runs an export with today's `mlpstorage`: the command lines, and what each mode lets it change.

The facts below are read from mlcommons/storage as of 2026 (mlpstorage_py/config.py, cli/training_args.py,
rules/run_checkers/training.py, benchmarks/dlio.py), not imported: mlpstorage is not installed here.

- The CLI is `mlpstorage <closed|open|whatif> training <model> <datasize|datagen|run> <file|object> ...`
  (`--loops` only under open and whatif).
- CLOSED and OPEN accept only some models (each spec's `storage.mlpstorage_modes` says which modes its
  model runs in), on b200 or mi355; every model runs under whatif, on h100, a100, b200 or mi355.
- A run reads `configs/dlio/workload/<model>_<accelerator>.yaml` from the mlcommons/storage checkout.
- `--params KEY=VALUE ...` overrides that file: CLOSED allows only CLOSED_ALLOWED_PARAMS, OPEN also
  OPEN_ALLOWED_PARAMS; anything else makes the run invalid for a submission (whatif takes any).
"""

from __future__ import annotations

from typing import Any

from common.spec import PublishedWorkload

ACCELERATORS = ("h100", "a100", "b200", "mi355")
ACCELERATORS_CLOSED = ("b200", "mi355")
CLOSED_ALLOWED_PARAMS = ("dataset.num_files_train", "dataset.num_subfolders_train", "dataset.data_folder",
                         "reader.read_threads", "reader.computation_threads", "reader.transfer_size", "reader.odirect",
                         "reader.prefetch_size", "checkpoint.checkpoint_folder", "storage.storage_type",
                         "storage.storage_root")
OPEN_ALLOWED_PARAMS = ("framework", "dataset.format", "dataset.num_samples_per_file", "reader.data_loader")
SOURCE = ("mlcommons/storage (2026): mlpstorage_py/config.py MODELS_CLOSED and ACCELERATORS_CLOSED, "
          "cli/training_args.py, rules/run_checkers/training.py CLOSED_ALLOWED_PARAMS and OPEN_ALLOWED_PARAMS")

# the measured figures a published workload file fixes, as (dotted key, the published file's value)
_FIXED = (("reader.batch_size", "batch_size"), ("dataset.record_length_bytes", "record_length_bytes"),
          ("train.computation_time", "computation_time"), ("dataset.num_samples_per_file", "num_samples_per_file"),
          ("dataset.format", "format"))


def _value(workload: dict[str, Any], dotted: str) -> Any:
    section, key = dotted.split(".", 1)
    return (workload.get(section) or {}).get(key)


def submission_params(workload: dict[str, Any], published: PublishedWorkload, mode: str) -> tuple[list[str], list[str]]:
    """(the `--params` a run in `mode` may carry from this workload, the measured differences it may not):
    each difference from the published file, sorted by whether the mode allows its key."""
    allowed = set(CLOSED_ALLOWED_PARAMS) | (set(OPEN_ALLOWED_PARAMS) if mode == "open" else set())
    params, refused = [], []
    measured_threads = _value(workload, "reader.read_threads")
    if measured_threads is not None and measured_threads != published.read_threads:
        params.append(f"reader.read_threads={measured_threads}")
    for dotted, field in _FIXED:
        mine, theirs = _value(workload, dotted), getattr(published, field)
        if mine is None or mine == theirs:
            continue
        text = f"{dotted}={mine}"
        (params if dotted in allowed else refused).append(text if dotted in allowed else
                                                          f"{text} (published {theirs})")
    return params, refused


def commands_text(*, model: str, workload_file: str, datagen_file: str, workload: dict[str, Any],
                  published: PublishedWorkload, accelerator: str | None, modes: tuple[str, ...] = ("whatif",)) -> str:
    """MLPSTORAGE.md: the exact command lines for this export, per mode the model may run in."""
    at = accelerator if accelerator in ACCELERATORS else "b200"
    name = f"{model}_{at}.yaml"
    copy_as = "" if workload_file == name else f" as `{name}` (the name `-at {at}` reads; `-at` takes only " \
                                               f"{', '.join(ACCELERATORS)})"
    lines = [f"# Running this export with mlpstorage: {model}", "",
             f"Facts: {SOURCE}. `N` accelerators, `M` GiB of memory per client host, `D` the data directory, "
             "`R` the results directory, `S` the system name; `<storage>` is a mlcommons/storage checkout.", "",
             "## whatif: the workload as measured", "",
             f"Every model runs under whatif, on {', '.join(ACCELERATORS)}. Copy `{workload_file}` into "
             f"`<storage>/configs/dlio/workload/`{copy_as}: it replaces the published file of that name, which is "
             f"the point. The measured data generation is `{datagen_file}`, a name that never replaces the "
             f"published `{model}_datagen.yaml` (which `mlpstorage ... datagen` reads).", "", "```bash",
             f"mlpstorage whatif training {model} datasize -ma N -at {at} -cm M -sn S",
             f"dlio_benchmark --config-dir <storage>/configs/dlio workload={datagen_file.removesuffix('.yaml')} "
             "++workload.dataset.data_folder=D",
             f"mlpstorage whatif training {model} run file -na N -at {at} -cm M -dd D -rd R -sn S", "```", ""]
    if "closed" not in modes and "open" not in modes:
        lines += ["## closed and open", "",
                  f"Not for {model}: the v3.0 edition accepts other models in CLOSED and OPEN; {model} runs under "
                  "whatif only.", ""]
        return "\n".join(lines)
    closed_at = at if at in ACCELERATORS_CLOSED else ACCELERATORS_CLOSED[0]
    for mode in (m for m in ("closed", "open") if m in modes):
        params, refused = submission_params(workload, published, mode)
        flag = f" --params {' '.join(params)}" if params else ""
        lines += [f"## {mode}", "",
                  f"The published `{model}_{closed_at}.yaml` as it is ({published.source}; {mode.upper()} runs on "
                  f"{' or '.join(ACCELERATORS_CLOSED)}), with the overrides {mode.upper()} allows from this "
                  "measurement:", "", "```bash",
                  f"mlpstorage {mode} training {model} datagen file -np N -dd D -sn S",
                  f"mlpstorage {mode} training {model} run file -na N -at {closed_at} -cm M -dd D -rd R -sn S{flag}",
                  "```", ""]
        if refused:
            lines += [f"What {mode.upper()} cannot carry (only whatif, with the measured file): "
                      + "; ".join(refused) + ".", ""]
    return "\n".join(lines)
