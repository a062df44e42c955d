"""Each workload's reads replayed by DLIO 2.0.0 through the reader plugin (its own env, .venv-dlio).

Issue 22: the plugin replay's read-size histogram equals the profile's within one histogram bin
per read, for each workload; its reads per sample, bytes and files follow the profile too. The
profiles are workload_profiles' (the trainers' read shapes through the real profiler), short
(12 steps of 20 ms) so each DLIO run is mostly its start-up: 4-7 s each on a 2-core machine.
CI (MLPERF_REQUIRE_DLIO=1) fails when the DLIO env cannot be built; elsewhere that skips.
"""

from __future__ import annotations

import json

import pytest

from storage.dlio.replay.choice import replay
from storage.load_profile.session import write_profile
from tests.storage.load_profile.workload_profiles import BENCHMARKS, STEPS, workload_profile

pytestmark = [pytest.mark.slow, pytest.mark.over_budget(
    reason="a measured trainer run, then its replay through the DLIO plugin")]
RANKS = {"retinanet": 2, "flux": 1, "recommendation_v4": 1}  # one run under mpiexec, as a multi-GPU profile


@pytest.mark.parametrize("benchmark,jpeg_reads", [*((b, "whole") for b in BENCHMARKS), ("retinanet", "pil")])
def test_the_plugin_replay_reads_what_the_profile_recorded(dlio_env, tmp_path, benchmark, jpeg_reads):
    """jpeg_reads "pil": RetinaNet's reference reads, each JPEG in PIL's read() calls, replayed in them."""
    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, workload_profile(benchmark, world_size=RANKS[benchmark], jpeg_reads=jpeg_reads))

    result = replay(run, reader="plugin")

    table = result.table()
    recorded, replayed = result.reads["profile"], result.reads["plugin"]
    assert result.reads["histogram"]["within_one_bin"], table
    assert result.reads["histogram"]["total_variation"] <= 0.05, table
    assert replayed["reads_per_sample"] == pytest.approx(recorded["reads_per_sample"], rel=0.02), table
    assert replayed["mean_size"] == pytest.approx(recorded["mean_size"], rel=0.05), table
    assert replayed["bytes"] == replayed["requested_bytes"]
    # DLIO read at least the trained samples, in its loader workers (one per rank here), through the plugin
    assert replayed["samples"] >= STEPS * 8 * RANKS[benchmark] and replayed["processes"] == RANKS[benchmark]
    assert result.replayed_steps == STEPS and result.replayed["samples_per_s"] > 0
    assert result.bytes_per_sample == pytest.approx(recorded["bytes_per_sample"], rel=0.05)
    saved = json.loads((run / "dlio" / "replay_plugin_result.json").read_text())
    assert saved["reader"] == "plugin" and saved["reads"]["histogram"] == result.reads["histogram"]
    assert not (run / "dlio" / "replay-plugin" / "data").exists()  # the plan's data is removed
