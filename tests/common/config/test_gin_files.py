import gin
import pytest

from common.config.checks import ConfigError

from common.config.gin_files import load_gin, write_config_snapshot


@gin.configurable
def _probe(data_root="unset", seed=0, lr=0.0, run_name=""):
    return data_root, seed, lr, run_name


def _write(tmp_path, text, name="exp.gin"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_env_macros_files_and_bindings_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("MLPERF_DATA_ROOT", "/from/env")
    monkeypatch.setenv("SEED", "7")
    monkeypatch.delenv("RUN_NAME", raising=False)
    path = _write(tmp_path, "_probe.data_root = %DATA_ROOT\n_probe.seed = %SEED\n_probe.lr = 0.5\n_probe.run_name = %RUN_NAME\n")
    load_gin([path])
    assert _probe() == ("/from/env", 7, 0.5, "exp")  # run name defaults to the file stem

    load_gin([path], ["_probe.lr = 0.25", "SEED = 3"])  # command line beats file and env
    assert _probe() == ("/from/env", 3, 0.25, "exp")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="not found: .*nope.gin"):
        load_gin([tmp_path / "nope.gin"])


def test_unknown_binding_is_named(tmp_path):
    path = _write(tmp_path, "_probe.lr = 0.5\n")
    with pytest.raises(ConfigError, match="_probe.no_such_param"):
        load_gin([path], ["_probe.no_such_param = 1"])


def test_unknown_configurable_in_file_names_the_file(tmp_path):
    path = _write(tmp_path, "NotAConfigurable.x = 1\n", name="broken.gin")
    with pytest.raises(ConfigError, match="broken.gin"):
        load_gin([path])


def test_bad_env_value_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("SEED", "one")
    with pytest.raises(ConfigError, match="SEED='one'"):
        load_gin([_write(tmp_path, "")])


def test_operative_config_written(tmp_path):
    path = _write(tmp_path, "_probe.lr = 0.125\n")
    load_gin([path])
    _probe()
    out = write_config_snapshot(tmp_path, operative=True)
    assert "_probe.lr = 0.125" in out.read_text()


def test_an_unknown_macro_is_named_with_the_binding_that_uses_it(tmp_path):
    path = _write(tmp_path, "_probe.data_root = %DATA_ROTO\n")
    with pytest.raises(ConfigError, match=r"^unknown gin macro %DATA_ROTO, used by _probe.data_root; the per-launch "
                                          r"macros are %DATA_ROOT, "):
        load_gin([path])
    # a macro the file defines, one inside a list, and a % inside a string are all fine
    load_gin([_write(tmp_path, "LR = 0.5\n_probe.lr = %LR\n_probe.run_name = '100%DONE'\n_probe.seed = [%SEED]\n")])
    with pytest.raises(ConfigError, match="unknown gin macro %NOPE, used by _probe.seed"):
        load_gin([path], ["_probe.data_root = %DATA_ROOT", "_probe.seed = [1, %NOPE]"])
