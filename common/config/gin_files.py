"""Gin files + command-line bindings + a few per-launch environment macros, parsed in that order.

It imports none of the configurables it parses: whoever loads a trainer's files imports them
first (`common.run.settings` registers the common ones, each benchmark its own), so gin knows
every `<package>.<Name>` a file binds. The checks each config runs are in `common.config.checks`.

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
import re
from pathlib import Path
from typing import Sequence

import gin

from common.config.checks import ConfigError
from common.config.paths import DEFAULT_DATA_ROOT, DEFAULT_OUTPUT_ROOT

# name of the gin macro -> (environment variable, default, type)
ENV_MACROS: dict[str, tuple[str, object, type]] = {
    "DATA_ROOT": ("MLPERF_DATA_ROOT", str(DEFAULT_DATA_ROOT), str),
    "OUTPUT_ROOT": ("MLPERF_OUTPUT_ROOT", str(DEFAULT_OUTPUT_ROOT), str),
    "RUN_NAME": ("RUN_NAME", None, str),
    "SEED": ("SEED", 1, int),
    "CKPT_PATH": ("CKPT_PATH", "", str),
}


@dataclasses.dataclass(frozen=True)
class LoadedConfig:
    files: tuple[Path, ...]
    bindings: tuple[str, ...]
    env_macros: dict[str, object]


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
    _check_macros_defined()
    return LoadedConfig(files=files, bindings=tuple(bindings), env_macros=macros)


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_MACRO_REFERENCE = re.compile(r"%([A-Za-z_][A-Za-z0-9_.]*)")


def _check_macros_defined() -> None:
    """A `%NAME` that nothing defines is a ConfigError naming it and the binding that uses it.

    gin itself only notices when the configurable is called, with a TypeError about `macro()`."""
    binding = ""
    for line in gin.config_str().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        value = line
        if not line[0].isspace() and " = " in line:  # a binding's first line; a long value continues indented
            binding, _, value = line.partition(" = ")
        for name in _MACRO_REFERENCE.findall(_QUOTED.sub("", value)):
            try:
                gin.query_parameter(f"{name}/gin.macro.value")
            except ValueError:
                raise ConfigError(f"unknown gin macro %{name}, used by {binding}; the per-launch macros are "
                                  f"{', '.join('%' + m for m in ENV_MACROS)}") from None


def write_config_snapshot(run_dir: Path, *, operative: bool) -> Path:
    """Writes the parsed config (or, once the program has built everything, the operative one)."""
    name = "operative_config.gin" if operative else "config.gin"
    text = gin.operative_config_str() if operative else gin.config_str()
    out = run_dir / name
    out.write_text(text)
    return out
