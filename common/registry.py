"""The benchmarks this installation has: the entry points of group `mlperf_trainers.benchmarks`.

Each benchmark registers its spec with one line in pyproject.toml:

    [project.entry-points."mlperf_trainers.benchmarks"]
    flux = "flux.spec:SPEC"

and any installed distribution can add one the same way (Python's plug-in convention). A new
entry point is seen once the distribution that declares it is (re)installed: `make venv` does it
for this project when pyproject.toml changes.
"""

from __future__ import annotations

import functools
from importlib import metadata

from common.spec import BenchmarkSpec

GROUP = "mlperf_trainers.benchmarks"


class RegistryError(LookupError):
    """No such benchmark, or a registration that is not usable; one line saying which."""


@functools.cache
def specs() -> tuple[BenchmarkSpec, ...]:
    """Every registered benchmark's spec, sorted by package (installers list entry points in their own order)."""
    points = metadata.entry_points(group=GROUP)
    if not points:
        raise RegistryError(f"no benchmark is registered (entry-point group {GROUP!r}): install the project into this "
                            "Python first (make venv, or pip install -e .)")
    found: dict[str, BenchmarkSpec] = {}
    for point in points:
        try:
            spec = point.load()
        except Exception as error:  # noqa: BLE001  (a broken plug-in is named, whatever broke it)
            raise RegistryError(f"entry point {point.name} = {point.value!r}: cannot be loaded "
                                f"({type(error).__name__}: {error})") from error
        if not isinstance(spec, BenchmarkSpec):
            raise RegistryError(f"entry point {point.name} = {point.value!r} is a {type(spec).__name__}, "
                                "not a common.spec.BenchmarkSpec")
        if spec.package != point.name:
            raise RegistryError(f"entry point {point.name} = {point.value!r} describes package {spec.package!r}: "
                                "the entry point's name must be the package's")
        if spec.package in found and found[spec.package] != spec:
            raise RegistryError(f"benchmark {spec.package!r} is registered twice, differently")
        found[spec.package] = spec
    _check_names_are_unique(found.values())
    return tuple(found[name] for name in sorted(found))


def _check_names_are_unique(registered) -> None:
    owner: dict[str, str] = {}
    for spec in registered:
        for name in spec.names():
            if owner.setdefault(name, spec.package) != spec.package:
                raise RegistryError(f"the name {name!r} belongs to both {owner[name]} and {spec.package}")


def find(name: str) -> BenchmarkSpec:
    """The benchmark known by `name`: its package, MLPerf Training name or MLPerf Storage model."""
    for spec in specs():
        if name in spec.names():
            return spec
    raise RegistryError(f"no benchmark named {name!r}; registered: {', '.join(s.package for s in specs())}")


def packages() -> tuple[str, ...]:
    return tuple(spec.package for spec in specs())
