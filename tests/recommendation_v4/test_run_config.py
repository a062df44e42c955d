"""DLRM-HSTU's settings checked against the device: bf16 is a GPU feature, refused on a CPU (as
RetinaNet refuses AMP there) rather than ignored while the mllog says bf16."""

from __future__ import annotations

import pytest
import torch

from common.config.checks import ConfigError
from recommendation_v4.run_config import TrainConfig
from tests.recommendation_v4.trainer_runs import tiny_bindings
from tests.trainers.trainer_process import REPO, run_command, trainer_command


def test_bf16_on_a_cpu_is_a_config_error_and_fp32_is_not():
    with pytest.raises(ConfigError, match=r"recommendation_v4.TrainConfig.bf16=True needs a GPU, but this run is on cpu"):
        TrainConfig(bf16=True).check_device(torch.device("cpu"))
    TrainConfig(bf16=False).check_device(torch.device("cpu"))
    TrainConfig(bf16=True).check_device(torch.device("cuda", 0))  # no device is touched: the check is the type


@pytest.mark.slow
def test_a_cpu_run_with_bf16_exits_2_in_one_line(tiny_data_root, tmp_path):
    bindings = tiny_bindings(data_root=tiny_data_root, output_root=tmp_path, run_name="bf16", max_steps=2) + [
        "recommendation_v4.TrainConfig.bf16 = True"]
    cmd = trainer_command(package="recommendation_v4", gin_file=REPO / "recommendation_v4" / "configs" / "debug.gin",
                          nproc=1, bindings=bindings)
    proc = run_command(cmd, timeout=300, expect_returncode=2)
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("config error: recommendation_v4.TrainConfig.bf16=True needs a GPU"), lines[-3:]
