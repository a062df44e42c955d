"""MLPSTORAGE.md, written by every export: today's mlpstorage command lines for it, and for RetinaNet in
CLOSED and OPEN only the --params those modes allow."""

from __future__ import annotations

import re

from common import registry
from storage.dlio.export.workloads import export
from storage.dlio.export.mlpstorage_commands import (CLOSED_ALLOWED_PARAMS, OPEN_ALLOWED_PARAMS, commands_text,
                                              submission_params)
from storage.load_profile.session import write_profile
from tests.storage.load_profile.profiles import known_profile

RETINANET = registry.find("retinanet").storage.workload
FLUX = registry.find("flux").storage.workload
RETINANET_MODES = registry.find("retinanet").storage.mlpstorage_modes


def _workload(**changes) -> dict:
    workload = {"dataset": {"format": RETINANET.format, "record_length_bytes": RETINANET.record_length_bytes,
                            "num_samples_per_file": RETINANET.num_samples_per_file},
                "reader": {"batch_size": RETINANET.batch_size, "read_threads": RETINANET.read_threads},
                "train": {"computation_time": RETINANET.computation_time}}
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        workload[section][key] = value
    return workload


def _params(text: str, mode: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"mlpstorage {mode} training retinanet run"))
    return line.split(" --params ")[1].split() if " --params " in line else []


def test_closed_carries_only_its_allowed_params_and_names_what_it_cannot():
    workload = _workload(reader__read_threads=3, reader__batch_size=16, dataset__record_length_bytes=290_000,
                         train__computation_time=0.1)
    params, refused = submission_params(workload, RETINANET, "closed")
    assert params == ["reader.read_threads=3"]
    assert refused == ["reader.batch_size=16 (published 24)", "dataset.record_length_bytes=290000 (published 322957)",
                       "train.computation_time=0.1 (published 0.04755)"]
    assert all(p.split("=")[0] in CLOSED_ALLOWED_PARAMS for p in params)
    # OPEN may also change the samples per file and the format; batch, record size and compute stay whatif's
    open_params, open_refused = submission_params(_workload(dataset__num_samples_per_file=4), RETINANET, "open")
    assert open_params == ["dataset.num_samples_per_file=4"] and open_refused == []
    assert "dataset.num_samples_per_file" in OPEN_ALLOWED_PARAMS
    closed_params, closed_refused = submission_params(_workload(dataset__num_samples_per_file=4), RETINANET, "closed")
    assert closed_params == [] and closed_refused == ["dataset.num_samples_per_file=4 (published 1)"]


def test_only_retinanet_runs_in_closed_and_open_as_the_v3_edition_says():
    assert RETINANET_MODES == ("closed", "open", "whatif")
    assert {spec.package: spec.storage.mlpstorage_modes for spec in registry.specs() if spec.storage is not None
            and spec.package != "retinanet"} == {"flux": ("whatif",), "recommendation_v4": ("whatif",)}


def test_the_text_per_model_and_accelerator():
    text = commands_text(model="retinanet", workload_file="retinanet_measured.yaml",
                         datagen_file="retinanet_datagen_measured.yaml", workload=_workload(reader__read_threads=3),
                         published=RETINANET, accelerator=None, modes=RETINANET_MODES)
    assert "mlpstorage whatif training retinanet run file -na N -at b200 -cm M -dd D -rd R -sn S" in text
    assert "Copy `retinanet_measured.yaml` into `<storage>/configs/dlio/workload/` as `retinanet_b200.yaml`" in text
    assert _params(text, "closed") == ["reader.read_threads=3"] and _params(text, "open") == ["reader.read_threads=3"]
    flux = commands_text(model="flux", workload_file="flux_b200.yaml", datagen_file="flux_datagen_measured.yaml",
                         workload={}, published=FLUX, accelerator="b200",
                         modes=registry.find("flux").storage.mlpstorage_modes)
    assert "mlpstorage whatif training flux run file -na N -at b200" in flux and "as `flux_b200.yaml`" not in flux
    assert "flux runs under whatif only" in flux and "mlpstorage closed" not in flux
    dlrm = commands_text(model="dlrm", workload_file="dlrm_mi350x.yaml", datagen_file="dlrm_datagen_measured.yaml",
                         workload={}, published=registry.find("recommendation_v4").storage.workload, accelerator="mi350x")
    assert "as `dlrm_b200.yaml` (the name `-at b200` reads; `-at` takes only h100, a100, b200, mi355)" in dlrm


def test_every_export_writes_it_beside_the_workloads(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, known_profile(world_size=1))
    export(run, accelerator="mi355", dataset_scale=None)
    text = (run / "dlio" / "mlperf_storage" / "MLPSTORAGE.md").read_text()
    assert "mlpstorage closed training retinanet run file -na N -at mi355 -cm M -dd D -rd R -sn S" in text
    for mode in ("closed", "open"):
        allowed = CLOSED_ALLOWED_PARAMS + (OPEN_ALLOWED_PARAMS if mode == "open" else ())
        assert all(re.match(r"[a-z_.]+=", p) and p.split("=")[0] in allowed for p in _params(text, mode))
