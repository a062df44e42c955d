"""Gin configuration: files + command-line bindings + a few per-launch environment macros.

The naming convention: every configurable is a frozen dataclass registered under its package,
`<package>.<Name>` (`common.RunConfig`, `common.CheckpointPolicy`, `recommendation_v4.TrainConfig`,
`retinanet.DataConfig`, ...), and gin files spell bindings that way. Each config checks its own
fields when it is built and raises `ConfigError` with one line that names the binding
(`config_checks` below), which the trainer reports with exit status 2.

Per-launch facts (where data lives, where runs go, the run name, the seed, a checkpoint path)
come from the environment through gin macros that every config can reference as `%NAME`:

    DATA_ROOT    <- $MLPERF_DATA_ROOT   (default: <repo>/data)
    OUTPUT_ROOT  <- $MLPERF_OUTPUT_ROOT (default: <repo>/runs)
    RUN_NAME     <- $RUN_NAME           (default: the first config file's stem)
    SEED         <- $SEED               (default: 1; negative draws a fresh seed)
    CKPT_PATH    <- $CKPT_PATH          (default: "" = checkpointing off)

The macros are bound before the files are parsed and `--gin_bindings` after them, so a
binding on the command line wins over the files, which win over the environment. Everything
else belongs in the gin files themselves: the environment is not a second config language.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Sequence

import gin

from common.config.paths import DEFAULT_DATA_ROOT, DEFAULT_OUTPUT_ROOT

# name of the gin macro -> (environment variable, default, type)
ENV_MACROS: dict[str, tuple[str, object, type]] = {
    "DATA_ROOT": ("MLPERF_DATA_ROOT", str(DEFAULT_DATA_ROOT), str),
    "OUTPUT_ROOT": ("MLPERF_OUTPUT_ROOT", str(DEFAULT_OUTPUT_ROOT), str),
    "RUN_NAME": ("RUN_NAME", None, str),
    "SEED": ("SEED", 1, int),
    "CKPT_PATH": ("CKPT_PATH", "", str),
}


class ConfigError(ValueError):
    """A gin file or binding could not be used; the message names which one and why."""


def binding_name(config: object, field: str) -> str:
    """`<package>.<Class>.<field>`, the way a gin file binds this field."""
    cls = type(config)
    return f"{cls.__module__.split('.')[0]}.{cls.__name__}.{field}"


def require(config: object, field: str, ok: bool, must: str) -> None:
    """Raises ConfigError `<binding> must be <must>, got <value>` unless `ok`."""
    if not ok:
        raise ConfigError(f"{binding_name(config, field)} must be {must}, got {getattr(config, field)!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def require_int(config: object, *fields: str, minimum: int) -> None:
    for field in fields:
        value = getattr(config, field)
        require(config, field, _is_int(value) and value >= minimum, f"an int >= {minimum}")


def require_number(config: object, *fields: str, minimum: float, strictly: bool = False) -> None:
    for field in fields:
        value = getattr(config, field)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = number and (value > minimum if strictly else value >= minimum)
        require(config, field, ok, f"a number {'>' if strictly else '>='} {minimum}")


def require_choice(config: object, field: str, choices: Sequence[object]) -> None:
    require(config, field, getattr(config, field) in choices, f"one of {list(choices)}")


@dataclasses.dataclass(frozen=True)
class LoadedConfig:
    files: tuple[Path, ...]
    bindings: tuple[str, ...]
    env_macros: dict[str, object]

    @property
    def primary_name(self) -> str:
        return self.files[0].stem if self.files else "default"


def env_macro_values(default_run_name: str) -> dict[str, object]:
    """The per-launch macro values from the environment (defaults where a variable is unset)."""
    return _env_macro_values(default_run_name)


def _env_macro_values(default_run_name: str) -> dict[str, object]:
    values: dict[str, object] = {}
    for macro, (env_var, default, kind) in ENV_MACROS.items():
        raw = os.environ.get(env_var)
        if raw is None or raw == "":
            values[macro] = default_run_name if macro == "RUN_NAME" else default
            continue
        try:
            values[macro] = kind(raw)
        except ValueError as err:
            raise ConfigError(f"environment variable {env_var}={raw!r} is not a valid {kind.__name__}") from err
    return values


def load_gin(gin_files: Sequence[str | Path], bindings: Sequence[str] = ()) -> LoadedConfig:
    """Parses config files and bindings (in that order) on top of the environment macros.

    Fails with a ConfigError naming the file or binding when a file is missing, a binding
    refers to an unknown configurable or parameter, or the syntax is wrong.
    """
    # every trainer's files bind the common configurables: register them before parsing
    import common.checkpoint.policy  # noqa: F401
    import common.run.settings  # noqa: F401
    import common.tracing  # noqa: F401  (common.TraceConfig)

    files = tuple(Path(f) for f in gin_files)
    for path in files:
        if not path.is_file():
            raise ConfigError(f"gin config file not found: {path}")
    default_run_name = files[0].stem if files else "default"
    macros = _env_macro_values(default_run_name)

    gin.clear_config()
    gin.enter_interactive_mode()  # lets a later binding redefine a macro instead of erroring
    try:
        for macro, value in macros.items():
            gin.parse_config(f"{macro} = {value!r}")
        for path in files:
            try:
                gin.parse_config_file(str(path))
            except (ValueError, SyntaxError, KeyError, IOError) as err:
                raise ConfigError(f"in gin file {path}: {err}") from err
        for binding in bindings:
            try:
                gin.parse_config(binding)
            except (ValueError, SyntaxError, KeyError) as err:
                raise ConfigError(f"bad --gin_bindings {binding!r}: {err}") from err
    finally:
        gin.exit_interactive_mode()
    return LoadedConfig(files=files, bindings=tuple(bindings), env_macros=macros)


def write_config_snapshot(run_dir: Path, *, operative: bool) -> Path:
    """Writes the parsed config (or, once the program has built everything, the operative one)."""
    name = "operative_config.gin" if operative else "config.gin"
    text = gin.operative_config_str() if operative else gin.config_str()
    out = run_dir / name
    out.write_text(text)
    return out
