"""The shared gin settings: the environment fills what a file leaves unset, each config checks itself
in one line naming the binding, and $CKPT_PATH is never silently ignored."""

from __future__ import annotations

import gin
import pytest

from common.checkpoint.policy import configured_checkpoint_policy
from common.config.gin_files import ConfigError, load_gin
from common.run.settings import RunConfig, Submission, read_run_config


@pytest.fixture(autouse=True)
def _clear_gin():
    yield
    gin.clear_config()


def _gin(tmp_path, text: str, name: str = "exp.gin"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_unset_per_launch_fields_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SEED", "9")
    monkeypatch.setenv("MLPERF_OUTPUT_ROOT", "/out")
    monkeypatch.delenv("RUN_NAME", raising=False)
    loaded = load_gin([_gin(tmp_path, "common.RunConfig.max_steps = 5\n")])
    run = read_run_config(loaded.env_macros)
    assert (run.seed, run.output_root, run.run_name, run.max_steps) == (9, "/out", "exp", 5)
    loaded = load_gin([_gin(tmp_path, "common.RunConfig.seed = 3\n")], ['common.RunConfig.run_name = "mine"'])
    run = read_run_config(loaded.env_macros)
    assert (run.seed, run.run_name) == (3, "mine")  # a binding wins over the environment


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_steps": -1}, "common.RunConfig.max_steps must be an int >= 0, got -1"),
        ({"log_every_steps": 0}, "common.RunConfig.log_every_steps must be an int >= 1, got 0"),
        ({"device": "tpu"}, "common.RunConfig.device must be one of ['auto', 'cpu', 'cuda'], got 'tpu'"),
        ({"process_group_timeout_s": 0}, "common.RunConfig.process_group_timeout_s must be a number > 0"),
    ],
)
def test_a_bad_run_setting_names_its_binding(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        RunConfig(**kwargs)


def test_submission_division_is_closed_or_open():
    with pytest.raises(ConfigError, match="common.Submission.division must be one of"):
        Submission(division="closd")


def test_checkpoint_path_follows_ckpt_path_unless_a_binding_names_another(tmp_path, monkeypatch):
    load_gin([_gin(tmp_path, "common.CheckpointPolicy.every_n_steps = 4\n")])
    policy = configured_checkpoint_policy(env_ckpt_path="/ckpt/a")
    assert (policy.path, policy.every_n_steps) == ("/ckpt/a", 4)  # no binding needed for $CKPT_PATH
    assert configured_checkpoint_policy(env_ckpt_path="").path == ""  # nothing set: off

    monkeypatch.setenv("CKPT_PATH", "/ckpt/a")
    loaded = load_gin([_gin(tmp_path, "common.CheckpointPolicy.path = %CKPT_PATH\n")])
    assert configured_checkpoint_policy(env_ckpt_path=loaded.env_macros["CKPT_PATH"]).path == "/ckpt/a"

    load_gin([_gin(tmp_path, 'common.CheckpointPolicy.path = "/ckpt/b"\n')])
    assert configured_checkpoint_policy(env_ckpt_path="").path == "/ckpt/b"
    with pytest.raises(ConfigError, match=r"common.CheckpointPolicy.path = '/ckpt/b' but \$CKPT_PATH='/ckpt/a'"):
        configured_checkpoint_policy(env_ckpt_path="/ckpt/a")


def test_a_bad_checkpoint_binding_is_a_config_error(tmp_path):
    load_gin([_gin(tmp_path, "common.CheckpointPolicy.keep_last_n = 0\n")])
    with pytest.raises(ConfigError, match="CheckpointPolicy.keep_last_n must be >= 1"):
        configured_checkpoint_policy(env_ckpt_path="")
