"""The shared gin settings: the environment fills what a file leaves unset, each config checks itself
in one line naming the binding, and $CKPT_PATH is never silently ignored."""

from __future__ import annotations

import gin
import pytest

from common.config.checks import ConfigError
from common.config.gin_files import load_gin
from common.run.settings import CommonConfigs, RunConfig, Submission


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
    run = CommonConfigs.read(loaded.env_macros).run
    assert (run.seed, run.output_root, run.run_name, run.max_steps) == (9, "/out", "exp", 5)
    loaded = load_gin([_gin(tmp_path, "common.RunConfig.seed = 3\n")], ['common.RunConfig.run_name = "mine"'])
    run = CommonConfigs.read(loaded.env_macros).run
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


def _policy(env_ckpt_path: str):
    return CommonConfigs.read({"SEED": 1, "OUTPUT_ROOT": "/out", "RUN_NAME": "r", "CKPT_PATH": env_ckpt_path}).checkpoint


def test_checkpoint_path_follows_ckpt_path_unless_a_binding_names_another(tmp_path, monkeypatch):
    load_gin([_gin(tmp_path, "common.CheckpointPolicy.every_n_steps = 4\n")])
    policy = _policy("/ckpt/a")
    assert (policy.path, policy.every_n_steps) == ("/ckpt/a", 4)  # no binding needed for $CKPT_PATH
    assert _policy("").path == ""  # nothing set: off

    monkeypatch.setenv("CKPT_PATH", "/ckpt/a")
    loaded = load_gin([_gin(tmp_path, "common.CheckpointPolicy.path = %CKPT_PATH\n")])
    assert CommonConfigs.read(loaded.env_macros).checkpoint.path == "/ckpt/a"

    load_gin([_gin(tmp_path, 'common.CheckpointPolicy.path = "/ckpt/b"\n')])
    assert _policy("").path == "/ckpt/b"
    with pytest.raises(ConfigError, match=r"common.CheckpointPolicy.path = '/ckpt/b' but \$CKPT_PATH='/ckpt/a'"):
        _policy("/ckpt/a")


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        ("common.CheckpointPolicy.keep_last_n = 0", "common.CheckpointPolicy.keep_last_n must be an int >= 1, got 0"),
        ("common.CheckpointPolicy.every_n_steps = 2.5", "common.CheckpointPolicy.every_n_steps must be an int >= 0, got 2.5"),
        ("common.CheckpointPolicy.at_window_end = 1", "common.CheckpointPolicy.at_window_end must be True or False, got 1"),
        ("common.CheckpointPolicy.path = 3", "common.CheckpointPolicy.path must be a directory path or \"\", got 3"),
        ("common.TraceConfig.active_steps = 0", "common.TraceConfig.active_steps must be an int >= 1, got 0"),
        ("common.RunConfig.seed = 1.5", "common.RunConfig.seed must be an int, got 1.5"),
    ],
)
def test_a_bad_common_binding_is_one_config_error_naming_it(tmp_path, binding, message):
    load_gin([_gin(tmp_path, binding + "\n")])
    with pytest.raises(ConfigError) as raised:
        _policy("")
    assert str(raised.value).splitlines()[0] == message  # gin adds the call site below it


def test_a_binding_of_the_wrong_shape_names_its_configurable(tmp_path):
    load_gin([_gin(tmp_path, "common.Submission.org = None\n")])
    with pytest.raises(ConfigError, match="common.Submission.org must be a non-empty string"):
        _policy("")
