"""Proactive reclaim on this host: kernel threads that drop page-cache pages nobody touched for a
while, whatever memory is free, and so turn one read of a file into several.

A storage measurement assumes the page cache keeps what was read until memory runs short. Hosts
that run DAMON-based reclaim (DAMON's sysfs interface with a `pageout` scheme, or the
damon_reclaim module; common on VMs that hand idle memory back to their hypervisor) break that:
a page not accessed for the scheme's minimum age (60 s on the machine this was written on) is
paged out, and the loader's next read of it goes to storage again. A run whose reads of one page
lie further apart than that (DLRM's first step on slow storage faults its history pool in over
minutes) then reads more from the device than its files hold.

    found = find_reclaimers()       # [] where there is none
    warning(found)                  # one line for the run's log, or None
    with paused(found): ...         # root: switched off inside, back on after (also on errors)

A pause is recorded in a file (RECORD: the pausing process and its switches) before the first
switch goes off and removed once every switch is back on; a script killed in between (SIGKILL,
which no `finally` sees) leaves the record, and the next storage script that starts
(`paused_for_storage_runs`, the sweep) switches those back on and says so, unless the process that
paused them still runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

SYSFS = Path("/sys")
# the switches a storage script turned off, until it turns them back on (in /run: gone at a reboot,
# when the kernel's own settings come back anyway)
RECORD = Path(os.environ.get("MLPERF_RECLAIM_RECORD", "/run/mlperf-proactive-reclaim-paused.json"))
# DAMON actions that drop pages from memory whatever the free memory (cold -> page cache gone);
# lru_deprio and the like only reorder what the normal reclaim takes first
_EVICTING_ACTIONS = {"pageout"}


@dataclasses.dataclass(frozen=True)
class Reclaimer:
    """One switch that proactive reclaim runs under: `switch` is the sysfs file, `on`/`off` the
    values that start and stop it; `min_age_s` is how long a page must stay untouched before it is
    dropped (None where the interface does not say)."""

    name: str
    switch: Path
    on: str
    off: str
    min_age_s: float | None

    def describe(self) -> str:
        age = "" if self.min_age_s is None else f" drops page-cache pages untouched for {self.min_age_s:g} s or more"
        return f"{self.name}{age} ({self.switch})"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _number(path: Path) -> float | None:
    text = _read(path)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _damon_sysfs(sysfs: Path) -> list[Reclaimer]:
    """Running kdamonds of DAMON's sysfs admin interface with an evicting scheme."""
    found = []
    for kdamond in sorted((sysfs / "kernel" / "mm" / "damon" / "admin" / "kdamonds").glob("[0-9]*")):
        if _read(kdamond / "state") != "on":
            continue
        ages = []
        for context in sorted((kdamond / "contexts").glob("[0-9]*")):
            aggregation_us = _number(context / "monitoring_attrs" / "intervals" / "aggr_us")
            for scheme in sorted((context / "schemes").glob("[0-9]*")):
                if _read(scheme / "action") not in _EVICTING_ACTIONS:
                    continue
                # a region's age counts aggregation intervals
                age = _number(scheme / "access_pattern" / "age" / "min")
                ages.append(age * aggregation_us / 1e6 if age is not None and aggregation_us else None)
        if ages:
            known = [a for a in ages if a is not None]
            pid = _read(kdamond / "pid")
            found.append(Reclaimer(name=f"DAMON kdamond {kdamond.name}" + (f" (pid {pid})" if pid else ""),
                                   switch=kdamond / "state", on="on", off="off",
                                   min_age_s=min(known) if known else None))
    return found


def _damon_reclaim_module(sysfs: Path) -> list[Reclaimer]:
    params = sysfs / "module" / "damon_reclaim" / "parameters"
    if _read(params / "enabled") not in ("Y", "1"):
        return []
    min_age_us = _number(params / "min_age")
    return [Reclaimer(name="the damon_reclaim module", switch=params / "enabled", on="Y", off="N",
                      min_age_s=None if min_age_us is None else min_age_us / 1e6)]


def find_reclaimers(sysfs: Path = SYSFS) -> list[Reclaimer]:
    """Every proactive reclaim running on this host that drops page-cache pages by age."""
    return _damon_sysfs(sysfs) + _damon_reclaim_module(sysfs)


def warning(found: Sequence[Reclaimer]) -> str | None:
    """The line a run prints when `found` is not empty."""
    if not found:
        return None
    return ("proactive reclaim is on: " + "; ".join(r.describe() for r in found) +
            ". A page the loader reads again only after that long is read from storage again, so the device "
            "can serve more bytes than the dataset holds (pause it for a storage measurement, as root)")


def _write_record(record: Path, stopped: Sequence[Reclaimer]) -> None:
    staging = record.with_name(record.name + ".tmp")
    staging.write_text(json.dumps({"pid": os.getpid(), "switches": [
        {"name": r.name, "switch": str(r.switch), "on": r.on, "off": r.off} for r in stopped]}) + "\n")
    staging.replace(record)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _ancestors(pid: int) -> set[int]:
    """The pids above `pid` (its parent, the parent's parent, ...), from /proc."""
    found: set[int] = set()
    while pid > 1 and pid not in found:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            break
        pid = int(fields[1])
        found.add(pid)
    return found


def restore_left_paused(prefix: str, *, record: Path = RECORD) -> list[str]:
    """Switches back on what a killed storage script left paused (its record), says so on stdout
    with `prefix`, and removes the record; the names switched back on."""
    try:
        saved = json.loads(record.read_text())
        owner, entries = int(saved["pid"]), list(saved["switches"])
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"{prefix} warning: {record} is unreadable ({error}): a killed storage script may have left the "
              "host's proactive reclaim off; check it by hand", flush=True)
        return []
    if owner == os.getpid() or owner in _ancestors(os.getpid()):
        return []  # paused by this run itself (a storage script around its sweep): nothing to say
    if _running(owner):
        print(f"{prefix} warning: process {owner}, still running, has the host's proactive reclaim paused "
              f"({record}); storage measurements at the same time disturb each other", flush=True)
        return []
    restored, failed = [], False
    for entry in entries:
        switch = Path(entry["switch"])
        try:
            if switch.read_text().strip() == entry["off"]:
                switch.write_text(entry["on"] + "\n")
                restored.append(entry["name"])
        except OSError as error:
            failed = True
            print(f"{prefix} could not switch {entry['name']} back on ({switch}): {error}", flush=True)
    for name in restored:
        print(f"{prefix} switched {name} back on: a storage script paused it and was killed before it could "
              f"(recorded in {record})", flush=True)
    if not failed:  # what could not be switched back stays recorded for the next start
        record.unlink(missing_ok=True)
    return restored


@contextlib.contextmanager
def paused(found: Sequence[Reclaimer], *, record: Path = RECORD) -> Iterator[list[Reclaimer]]:
    """Switches every reclaimer in `found` off and, on leaving (errors included), back on; yields the
    ones it switched off. A switch that cannot be written (not root) raises PermissionError naming it,
    after the ones already switched off are back on. The pause is recorded in `record` meanwhile."""
    stopped: list[Reclaimer] = []
    if found:
        _write_record(record, found)  # before the first switch: a kill at any point leaves what to undo
    try:
        for r in found:
            try:
                r.switch.write_text(r.off + "\n")
            except OSError as error:
                raise PermissionError(f"cannot pause {r.name}: writing {r.off!r} to {r.switch}: {error}") from None
            stopped.append(r)
        yield stopped
    finally:
        failed = False
        for r in reversed(stopped):
            try:
                r.switch.write_text(r.on + "\n")
            except OSError as error:  # say so loudly: the host is left without its reclaim
                failed = True
                print(f"[reclaim] could not switch {r.name} back on ({r.switch}): {error}", flush=True)
        if found and not failed:
            record.unlink(missing_ok=True)


@contextlib.contextmanager
def paused_for_storage_runs(prefix: str, *, keep: bool = False, sysfs: Path = SYSFS,
                            record: Path = RECORD) -> Iterator[dict[str, list[str]]]:
    """What a root script that measures storage wraps its runs in: first what an earlier, killed one
    left paused switched back on; then the host's reclaimers paused (said on stdout with `prefix`),
    or with `keep` left running with a warning. Yields {"found": [...], "paused": [...]}."""
    restore_left_paused(prefix, record=record)
    found = find_reclaimers(sysfs)
    if found and keep:
        print(f"{prefix} warning: {warning(found)}", flush=True)
    with paused([] if keep else found, record=record) as stopped:
        for r in stopped:
            print(f"{prefix} paused {r.name} for these runs (it drops pages idle for {r.min_age_s} s, so a slow "
                  f"run would read some pages twice); it is switched back on at the end", flush=True)
        yield {"found": [r.describe() for r in found], "paused": [r.name for r in stopped]}
