"""What each step of the accelerator check imports, what this Python has of it, and where the rest
comes from: the node's own stack (torch, Triton, torchvision, numpy: never replaced), the offline
bundle (scripts/accelerator_bundle.py: the project's small needs, installed into a private folder),
or an install the check cannot do itself (TorchRec and the matching fbgemm-gpu).

Standard library only: it runs on whatever Python the node has, before anything else is known.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Iterable

NODE = "node"  # the site's own stack: never installed by the check
BUNDLE = "bundle"  # in the offline bundle
SEPARATE = "separate"  # neither: named with the command that supplies it


@dataclasses.dataclass(frozen=True)
class Package:
    module: str  # what the code imports
    distribution: str  # what pip installs
    version: str | None  # the bundle's pin (None: the node's own, whatever version)
    source: str  # NODE, BUNDLE or SEPARATE


# The bundle's pins are the project's (pyproject.toml, scripts/setup_venv.sh); the packages only the
# tests need to run (pytest's and hypothesis's own needs) are pinned here at the versions the
# project's venv resolves. mlperf-logging's declared pandas and scipy are for its result summarizer
# and RCP checker, which nothing here imports: it is installed without them.
PACKAGES = {p.module: p for p in (
    Package("torch", "torch", None, NODE),
    Package("triton", "triton", None, NODE),
    Package("torchvision", "torchvision", None, NODE),
    Package("numpy", "numpy", None, NODE),
    Package("PIL", "pillow", None, NODE),
    Package("torchrec", "torchrec", "1.9.2", SEPARATE),
    Package("fbgemm_gpu", "fbgemm-gpu", "1.9.0", SEPARATE),
    Package("tensordict", "tensordict", "0.15.3", SEPARATE),
    Package("torchmetrics", "torchmetrics", "1.0.3", SEPARATE),
    Package("gin", "gin-config", "0.5.0", BUNDLE),
    Package("mlperf_logging", "mlperf-logging", "4.1.68", BUNDLE),
    Package("yaml", "pyyaml", "6.0.3", BUNDLE),
    Package("pyarrow", "pyarrow", "22.0.0", BUNDLE),
    Package("pycocotools", "pycocotools", "2.0.10", BUNDLE),
    Package("tqdm", "tqdm", "4.70.1", BUNDLE),
    Package("pytest", "pytest", "8.4.2", BUNDLE),
    Package("iniconfig", "iniconfig", "2.3.1", BUNDLE),
    Package("pluggy", "pluggy", "1.7.0", BUNDLE),
    Package("packaging", "packaging", "26.4", BUNDLE),
    Package("pygments", "pygments", "2.21.0", BUNDLE),
    Package("hypothesis", "hypothesis", "6.148.7", BUNDLE),
    Package("sortedcontainers", "sortedcontainers", "2.4.0", BUNDLE),
)}

# What each step's commands import (the trainers' runs also write their load profile: numpy; their
# plots need matplotlib, which is optional: without it the profile says so and keeps its JSON)
_TESTS = ("pytest", "iniconfig", "pluggy", "packaging", "pygments", "hypothesis", "sortedcontainers")
_RUN = ("gin", "mlperf_logging", "yaml", "tqdm")
STEP_NEEDS: dict[str, tuple[str, ...]] = {
    "triton": ("torch", "triton", "numpy", *_TESTS),
    "hstu_ops": ("torch", "triton", "numpy"),
    "tune": ("torch", "triton", "numpy"),
    "flux": ("torch", "numpy", "pyarrow", *_RUN),
    "retinanet": ("torch", "torchvision", "numpy", "PIL", "pycocotools", *_RUN),
    "dlrm": ("torch", "numpy", "pyarrow", "torchrec", "fbgemm_gpu", "tensordict", "torchmetrics", *_RUN),
    "compute_times": (),
}


def bundle_packages() -> list[Package]:
    return [p for p in PACKAGES.values() if p.source == BUNDLE]


def present(module: str) -> bool:
    """Whether `module` can be imported here (a finder that refuses it counts as absent)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def version_of(package: Package) -> str | None:
    try:
        return importlib.metadata.version(package.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def stack() -> dict[str, object]:
    """The versions this Python has of every package a step imports (None: absent), and its own."""
    found: dict[str, object] = {"python": platform.python_version(), "executable": sys.executable,
                                "platform": f"{platform.system().lower()}_{platform.machine()}"}
    for module, package in PACKAGES.items():
        found[package.distribution] = version_of(package) if present(module) else None
    return found


def missing_for(step: str) -> list[Package]:
    return [PACKAGES[m] for m in STEP_NEEDS[step] if not present(m)]


def supply_command(packages: Iterable[Package], *, python: str, bundle: Path | None) -> str:
    """The one command that would supply `packages` on this node."""
    packages = list(packages)
    bundled = [p for p in packages if p.source == BUNDLE]
    separate = [p for p in packages if p.source == SEPARATE]
    node = [p for p in packages if p.source == NODE]
    parts = []
    if bundled:
        tag = f"{sys.version_info.major}.{sys.version_info.minor}"
        where = f"--bundle {bundle}" if bundle else "--bundle DIR"
        parts.append(f"python3 scripts/accelerator_bundle.py --python-version {tag} --platform "
                     f"{_wheel_platform()} --out DIR (on a machine with a package index), then {where}")
    if separate:
        pins = " ".join(f"{p.distribution}=={p.version}" for p in separate)
        parts.append(f"{python} -m pip install --no-deps {pins} (the fbgemm-gpu build of this node's torch and "
                     "CUDA/ROCm line: PyPI's is CUDA; ROCm's comes from the PyTorch ROCm index or a source build), "
                     "or the project's image (docker/)")
    if node:
        parts.append(f"{', '.join(p.distribution for p in node)} from the node's own stack (the check never "
                     "replaces it)")
    return "; ".join(parts)


def _wheel_platform() -> str:
    machine = platform.machine()
    return f"manylinux_2_28_{machine}" if platform.system() == "Linux" else f"{platform.system().lower()}_{machine}"


def install_from_bundle(bundle: Path, site: Path, *, python: str = sys.executable,
                        packages: Iterable[Package] | None = None) -> list[str]:
    """Installs, from `bundle` only, the bundled packages this Python lacks, into `site` (pip's
    --target: the site's own packages stay as they are); returns what it installed. The caller puts
    `site` on the path first (sys.path and PYTHONPATH), so that what it installed before counts as
    present. A bundle made for another Python or platform is refused by pip, named."""
    manifest = bundle / "bundle.json"
    if not manifest.is_file():
        raise RuntimeError(f"{bundle}: no bundle.json (make the bundle with scripts/accelerator_bundle.py)")
    made_for = json.loads(manifest.read_text())
    wanted = [p for p in (bundle_packages() if packages is None else packages) if not present(p.module)]
    if not wanted:
        return []
    command = [python, "-m", "pip", "install", "--no-index", "--find-links", str(bundle), "--no-deps",
               "--disable-pip-version-check", "--target", str(site),
               *[f"{p.distribution}=={p.version}" for p in wanted]]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        last = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()][-1:] or ["no output"]
        raise RuntimeError(f"installing from {bundle} (made for Python {made_for.get('python_version')} on "
                           f"{made_for.get('platform')}) into {site} failed: {last[0]}")
    importlib.invalidate_caches()
    return [f"{p.distribution}=={p.version}" for p in wanted]


def with_site(env: dict[str, str], site: Path | None, repo: Path) -> dict[str, str]:
    """`env` with the repository and the private site first on PYTHONPATH."""
    parts = [str(repo), str(site) if site else "", env.get("PYTHONPATH", "")]
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in parts if p)}
