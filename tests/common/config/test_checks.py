"""The checks every config runs on itself, `read` and `flavor_from`: one ConfigError line naming the binding."""

from __future__ import annotations

import dataclasses

import pytest

from common.config.checks import (
    ConfigError,
    binding_name,
    flavor_from,
    is_int,
    read,
    require_bool,
    require_choice,
    require_int,
    require_number,
)


@dataclasses.dataclass(frozen=True)
class _Size:
    width: int = 4
    depth: int = 2


FLAVORS = {"small": _Size(4, 2), "large": _Size(64, 8)}


@dataclasses.dataclass(frozen=True)
class _TrainConfig:
    flavor: str = "small"
    model_overrides: dict = dataclasses.field(default_factory=dict)
    steps: object = 1
    rate: object = 0.5
    shuffle: object = True
    mode: str = "a"

    def __post_init__(self) -> None:
        require_int(self, "steps", minimum=1)
        require_number(self, "rate", minimum=0.0, strictly=True)
        require_bool(self, "shuffle")
        require_choice(self, "mode", ("a", "b"))


def test_is_int_refuses_bools_and_floats():
    assert is_int(3) and not is_int(True) and not is_int(3.0)


def test_binding_name_is_package_class_field():
    assert binding_name(_TrainConfig(), "steps") == "tests._TrainConfig.steps"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": 0}, "tests._TrainConfig.steps must be an int >= 1, got 0"),
        ({"steps": True}, "tests._TrainConfig.steps must be an int >= 1, got True"),
        ({"rate": 0}, "tests._TrainConfig.rate must be a number > 0.0, got 0"),
        ({"shuffle": 1}, "tests._TrainConfig.shuffle must be True or False, got 1"),
        ({"mode": "c"}, "tests._TrainConfig.mode must be one of ['a', 'b'], got 'c'"),
    ],
)
def test_each_check_names_the_binding_and_the_value(kwargs, message):
    with pytest.raises(ConfigError) as raised:
        _TrainConfig(**kwargs)
    assert str(raised.value) == message


def test_read_turns_a_constructor_error_into_a_config_error_naming_the_configurable():
    def broken():
        raise TypeError("__init__() got an unexpected keyword argument 'stpes'")

    with pytest.raises(ConfigError, match=r"^common.Broken: __init__\(\) got an unexpected keyword argument 'stpes'$"):
        read(broken, name="common.Broken")
    with pytest.raises(ConfigError, match="steps must be an int"):  # a ConfigError passes through as it is
        read(lambda: _TrainConfig(steps=0))
    assert read(_TrainConfig) == _TrainConfig()


def test_flavor_from_applies_overrides_and_names_the_binding_when_it_cannot():
    assert flavor_from(_TrainConfig(flavor="large", model_overrides={"depth": 3}), FLAVORS) == _Size(64, 3)
    with pytest.raises(ConfigError, match=r"^tests._TrainConfig.flavor must be one of \['large', 'small'\], got 'huge'$"):
        flavor_from(_TrainConfig(flavor="huge"), FLAVORS)
    with pytest.raises(ConfigError, match=r"^tests._TrainConfig.model_overrides=\{'dpeth': 3\}: .*dpeth"):
        flavor_from(_TrainConfig(model_overrides={"dpeth": 3}), FLAVORS)
    with pytest.raises(ConfigError, match="model_overrides must be a dict"):
        flavor_from(_TrainConfig(model_overrides=[("depth", 3)]), FLAVORS)
