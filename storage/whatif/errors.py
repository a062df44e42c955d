"""The what-if model's refusals: one line naming the flag, file or field, and the exit status it ends with."""

from __future__ import annotations


class WhatIfError(Exception):
    """A refusal; `status` is the command's exit status."""

    status = 1


class ConfigError(WhatIfError):
    """A flag or a cluster description that cannot be used (exit 2)."""

    status = 2


class DataError(WhatIfError):
    """A measured run's file that cannot be read or lacks a field the model needs (exit 3)."""

    status = 3
