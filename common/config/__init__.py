"""Gin configuration: the checks every config runs (a leaf), and the loader of gin files and bindings."""

from common.config.checks import (
    ConfigError,
    binding_name,
    flavor_from,
    is_int,
    read,
    require,
    require_bool,
    require_choice,
    require_int,
    require_number,
)
from common.config.gin_files import ENV_MACROS, LoadedConfig, load_gin, write_config_snapshot

__all__ = [
    "ENV_MACROS",
    "ConfigError",
    "LoadedConfig",
    "binding_name",
    "flavor_from",
    "is_int",
    "load_gin",
    "read",
    "require",
    "require_bool",
    "require_choice",
    "require_int",
    "require_number",
    "write_config_snapshot",
]
