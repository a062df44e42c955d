"""The settings of a trainer's data path set beside its reference's: which order, rank split,
loader concurrency, evaluation cadence and one-time phases this run used, and what the
reference trainer uses (its file:line is in docs/fidelity.md).

A benchmark's build lists them in its `DataPlan.data_path`; the load profile writes them into
`load_profile.json` (`data_path`) and says in one line where a run departs from the reference, so
a storage answer always states the data path that produced it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable


@dataclasses.dataclass(frozen=True)
class DataPathSetting:
    name: str  # what it is: "order", "rank_split", "train_workers", ...
    value: Any  # this run's
    reference: Any  # the reference trainer's, at its reference config
    binding: str  # the gin binding that sets it here

    @property
    def same(self) -> bool:
        return self.value == self.reference

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "reference": self.reference, "binding": self.binding,
                "same": self.same}


def departures(settings: Iterable[DataPathSetting]) -> list[DataPathSetting]:
    """The settings where this run is not the reference's."""
    return [s for s in settings if not s.same]


def departures_line(settings: Iterable[DataPathSetting]) -> str:
    """One line for the run's output: the reference's data path, or where this one departs from it."""
    settings = list(settings)
    if not settings:
        return "data path: not described by this benchmark"
    off = departures(settings)
    if not off:
        return f"data path: the reference's ({', '.join(f'{s.name} {s.value}' for s in settings)})"
    return "data path departs from the reference's: " + "; ".join(
        f"{s.name} {s.value!r} (reference {s.reference!r}, {s.binding})" for s in off)
