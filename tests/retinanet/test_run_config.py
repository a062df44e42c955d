"""Config errors are clear: they name the gin binding, file or directory at fault, at start-up."""

from __future__ import annotations

from pathlib import Path

import gin
import pytest
import torch

from common.config import ConfigError, load_gin
from retinanet.run_config import RetinaNetDataConfig, RetinaNetTrainConfig
from retinanet.train import check_device_settings, main, model_flavor
from tests.retinanet.trainer_runs import DEBUG_GIN, REPO

REFERENCE_GIN = REPO / "retinanet" / "configs" / "reference.gin"


@pytest.fixture(autouse=True)
def _clear_gin():
    yield
    gin.clear_config()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"global_batch_size": 0}, "RetinaNetTrainConfig.global_batch_size must be an int >= 1, got 0"),
        ({"epochs": 1.5}, "RetinaNetTrainConfig.epochs must be an int >= 1"),
        ({"amp": "fp32"}, "RetinaNetTrainConfig.amp must be one of"),
        ({"warmup_factor": 0.0}, r"RetinaNetTrainConfig.warmup_factor must be in \(0, 1\]"),
        ({"target_map": 34.0}, "RetinaNetTrainConfig.target_map must be in"),
        ({"num_threads": -1}, "RetinaNetTrainConfig.num_threads must be an int >= 0"),
    ],
)
def test_bad_train_settings_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RetinaNetTrainConfig(**kwargs)


def test_bad_data_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match="RetinaNetDataConfig.num_workers must be an int >= 0, got -1"):
        RetinaNetDataConfig(num_workers=-1)
    with pytest.raises(ConfigError, match="RetinaNetDataConfig.dataset must be a directory name"):
        RetinaNetDataConfig(dataset="a/b")


def test_both_configs_parse_and_build() -> None:
    load_gin([DEBUG_GIN])
    debug = RetinaNetTrainConfig()
    assert (debug.flavor, debug.device, debug.amp, debug.num_threads) == ("tiny", "cpu", "", 1)
    load_gin([REFERENCE_GIN])
    cfg, data = RetinaNetTrainConfig(), RetinaNetDataConfig()
    flavor = model_flavor(cfg)
    assert (flavor.num_classes, flavor.image_size, cfg.global_batch_size) == (264, 800, 256)
    assert (cfg.learning_rate, cfg.warmup_epochs, cfg.warmup_factor, cfg.weight_decay) == (1e-4, 1.0, 1e-3, 0.0)
    assert (cfg.amp, cfg.channels_last, cfg.target_map) == ("fp16", True, 0.34)
    assert (data.dataset, data.generate_if_missing) == ("openimages-mlperf", False)


def test_unknown_binding_and_missing_file_fail_at_start(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ConfigError, match="RetinaNetTrainConfig.learning_rat"):
        load_gin([DEBUG_GIN], ["RetinaNetTrainConfig.learning_rat = 0.1"])
    assert main(["--gin_config", str(tmp_path / "nope.gin")]) == 2
    assert f"gin config file not found: {tmp_path / 'nope.gin'}" in capsys.readouterr().err
    assert main(["--gin_config", str(DEBUG_GIN), "--gin_bindings", "RetinaNetTrainConfig.epochs = 0"]) == 2
    assert "RetinaNetTrainConfig.epochs must be an int >= 1, got 0" in capsys.readouterr().err


def test_flavor_overrides_and_gpu_only_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="flavor='huge' is not one of"):
        model_flavor(RetinaNetTrainConfig(flavor="huge"))
    with pytest.raises(ConfigError, match="model_overrides=.*no_such_field"):
        model_flavor(RetinaNetTrainConfig(model_overrides={"no_such_field": 1}))
    with pytest.raises(ConfigError, match="image_size must be a positive multiple of 32"):
        model_flavor(RetinaNetTrainConfig(model_overrides={"image_size": 100}))
    with pytest.raises(ConfigError, match="need a GPU, but this run is on cpu"):
        check_device_settings(RetinaNetTrainConfig(amp="bf16"), torch.device("cpu"))
    check_device_settings(RetinaNetTrainConfig(amp="bf16", channels_last=True), torch.device("cuda", 0))


def test_class_count_mismatch_names_the_binding_to_fix(
    tiny_data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code = main(
        [
            "--gin_config", str(DEBUG_GIN),
            "--gin_bindings", f'RetinaNetDataConfig.data_root = "{tiny_data_root}"',
            "--gin_bindings", 'RetinaNetDataConfig.dataset = "synthetic-tiny-seed0"',
            "--gin_bindings", f'RetinaNetTrainConfig.output_root = "{tmp_path}"',
        ]
    )  # debug.gin's model has the small dataset's 6 classes, the tiny one has 4
    assert code == 2
    err = capsys.readouterr().err
    assert "the model has 6 classes but" in err and "openimages-mlperf.json has 4" in err
    assert 'RetinaNetTrainConfig.model_overrides = {"num_classes": 4}' in err
