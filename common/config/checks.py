"""The checks every gin-configured dataclass runs on itself, and the one way to build one.

- Every configurable is a frozen dataclass registered as `<package>.<Name>`; its `__post_init__`
  checks each field with `require*` and fails with one `ConfigError` line naming the binding:
  `recommendation_v4.TrainConfig.global_batch_size must be an int >= 1, got 0`.
- `read(cls)` builds a configurable from the parsed gin bindings; a binding of the wrong shape
  (a TypeError or ValueError in the constructor) becomes a ConfigError naming `<package>.<Class>`.
- `flavor_from(config, flavors)` is the model lookup every benchmark's `TrainConfig.model()` does:
  the named flavor with `model_overrides` applied, or a ConfigError naming the binding.

This module imports nothing of the project: every config may use it.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A gin file or binding could not be used; the message names which one and why."""


def config_name(cls: type) -> str:
    """`<package>.<Class>`, the way gin files name a configurable."""
    return f"{cls.__module__.split('.')[0]}.{cls.__name__}"


def binding_name(config: object, field: str) -> str:
    """`<package>.<Class>.<field>`, the way a gin file binds this field."""
    return f"{config_name(type(config))}.{field}"


def is_int(value: object) -> bool:
    """An int that is not a bool (True would otherwise pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def require(config: object, field: str, ok: bool, must: str) -> None:
    """Raises ConfigError `<binding> must be <must>, got <value>` unless `ok`."""
    if not ok:
        raise ConfigError(f"{binding_name(config, field)} must be {must}, got {getattr(config, field)!r}")


def require_int(config: object, *fields: str, minimum: int) -> None:
    for field in fields:
        value = getattr(config, field)
        require(config, field, is_int(value) and value >= minimum, f"an int >= {minimum}")


def require_number(config: object, *fields: str, minimum: float, strictly: bool = False) -> None:
    for field in fields:
        value = getattr(config, field)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = number and (value > minimum if strictly else value >= minimum)
        require(config, field, ok, f"a number {'>' if strictly else '>='} {minimum}")


def require_bool(config: object, *fields: str) -> None:
    for field in fields:
        require(config, field, isinstance(getattr(config, field), bool), "True or False")


def require_choice(config: object, field: str, choices: Sequence[object]) -> None:
    require(config, field, getattr(config, field) in choices, f"one of {list(choices)}")


def read(cls: Callable[[], T], *, name: str | None = None) -> T:
    """`cls()` with its gin bindings; a binding the constructor cannot take is a ConfigError.

    `name` is the configurable's gin name when `cls` is not the class itself (an external
    configurable's handle)."""
    try:
        return cls()
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{name or config_name(cls)}: {error}") from error  # type: ignore[arg-type]


def flavor_from(config: object, flavors: Mapping[str, T], *, flavor_field: str = "flavor",
                overrides_field: str = "model_overrides") -> T:
    """The flavor `config.<flavor_field>` names, with `config.<overrides_field>` applied on top."""
    name = getattr(config, flavor_field)
    require(config, flavor_field, name in flavors, f"one of {sorted(flavors)}")
    overrides = getattr(config, overrides_field)
    require(config, overrides_field, isinstance(overrides, dict), "a dict of flavor fields")
    try:
        return dataclasses.replace(flavors[name], **overrides)  # type: ignore[type-var]
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{binding_name(config, overrides_field)}={overrides!r}: {error}") from error
