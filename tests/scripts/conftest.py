"""The scripts under scripts/ are files, not modules of a package: `load_script` imports one."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.trainers.trainer_process import REPO


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module
