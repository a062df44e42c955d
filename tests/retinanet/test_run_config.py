"""Config errors are clear: they name the gin binding, file or directory at fault, at start-up."""

from __future__ import annotations

from pathlib import Path

import gin
import pytest
import torch

from common.config.checks import ConfigError

from common.config.gin_files import load_gin
from common.run.settings import RunConfig
from retinanet.run_config import DataConfig as RetinaNetDataConfig
from retinanet.run_config import TrainConfig as RetinaNetTrainConfig
from retinanet.train import main
from tests.retinanet.trainer_runs import DEBUG_GIN, REPO

REFERENCE_GIN = REPO / "retinanet" / "configs" / "reference.gin"


@pytest.fixture(autouse=True)
def _clear_gin():
    yield
    gin.clear_config()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"global_batch_size": 0}, "retinanet.TrainConfig.global_batch_size must be an int >= 1, got 0"),
        ({"epochs": 1.5}, "retinanet.TrainConfig.epochs must be an int >= 1"),
        ({"amp": "fp32"}, "retinanet.TrainConfig.amp must be one of"),
        ({"warmup_factor": 0.0}, r"retinanet.TrainConfig.warmup_factor must be in \(0, 1\]"),
        ({"target_map": 34.0}, "retinanet.TrainConfig.target_map must be in"),
    ],
)
def test_bad_train_settings_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RetinaNetTrainConfig(**kwargs)


def test_bad_data_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match="retinanet.DataConfig.num_workers must be an int >= 0, got -1"):
        RetinaNetDataConfig(num_workers=-1)
    with pytest.raises(ConfigError, match="retinanet.DataConfig.dataset must be a directory name"):
        RetinaNetDataConfig(dataset="a/b")


def test_both_configs_parse_and_build() -> None:
    load_gin([DEBUG_GIN])
    debug, run = RetinaNetTrainConfig(), RunConfig()
    assert (debug.flavor, run.device, debug.amp, run.num_threads) == ("tiny", "cpu", "", 1)
    load_gin([REFERENCE_GIN])
    cfg, data = RetinaNetTrainConfig(), RetinaNetDataConfig()
    flavor = cfg.model()
    assert (flavor.num_classes, flavor.image_size, cfg.global_batch_size) == (264, 800, 256)
    assert (cfg.learning_rate, cfg.warmup_epochs, cfg.warmup_factor, cfg.weight_decay) == (1e-4, 1.0, 1e-3, 0.0)
    assert (cfg.amp, cfg.channels_last, cfg.target_map) == ("fp16", True, 0.34)
    assert (data.dataset, data.generate_if_missing) == ("openimages-mlperf", False)


def test_a_missing_gin_file_fails_at_start(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--gin_config", str(tmp_path / "nope.gin")]) == 2
    assert f"gin config file not found: {tmp_path / 'nope.gin'}" in capsys.readouterr().err


def test_flavor_overrides_and_gpu_only_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"retinanet.TrainConfig.flavor must be one of \[.*\], got 'huge'"):
        RetinaNetTrainConfig(flavor="huge").model()
    with pytest.raises(ConfigError, match="model_overrides=.*no_such_field"):
        RetinaNetTrainConfig(model_overrides={"no_such_field": 1}).model()
    with pytest.raises(ConfigError, match="image_size must be a positive multiple of 32"):
        RetinaNetTrainConfig(model_overrides={"image_size": 100}).model()
    with pytest.raises(ConfigError, match="need a GPU, but this run is on cpu"):
        RetinaNetTrainConfig(amp="bf16").check_device(torch.device("cpu"))
    RetinaNetTrainConfig(amp="bf16", channels_last=True).check_device(torch.device("cuda", 0))


def test_class_count_mismatch_names_the_binding_to_fix(
    tiny_data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code = main(
        [
            "--gin_config", str(DEBUG_GIN),
            "--gin_bindings", f'retinanet.DataConfig.data_root = "{tiny_data_root}"',
            "--gin_bindings", 'retinanet.DataConfig.dataset = "synthetic-tiny-seed0"',
            "--gin_bindings", f'common.RunConfig.output_root = "{tmp_path}"',
            "--gin_bindings", "common.RunConfig.check_compliance = False",
        ]
    )  # debug.gin's model has the small dataset's 6 classes, the tiny one has 4
    assert code == 2
    err = capsys.readouterr().err
    assert "the model has 6 classes but" in err and "openimages-mlperf.json has 4" in err
    assert 'retinanet.TrainConfig.model_overrides = {"num_classes": 4}' in err
