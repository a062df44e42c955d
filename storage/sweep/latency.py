"""The sweep at one or several storage latencies (storage.sweep --latency-ms): the relays it sets, and the
table and plot of the answer against the latency.

The latency is added by the relays the storage was brought up with (storage.backends.latency_relay): one per
emulated host in front of the shared storage (`storage.backends.shared_storage up --latency-ms 0`, found
through --emulated-hosts) and one in front of the S3 endpoint (`storage.backends.object_endpoint serve
--latency-ms 0`, whose env file names its control file in MLPERF_LATENCY_RELAYS). Before each latency's
counts the sweep sets every relay to it and waits until each has applied it; a storage without a relay
is refused, so that a latency is never recorded that the runs did not have.

With one latency the sweep's outputs are as without it, with `latency_ms` in sweep.json's settings.
With several, each latency's sweep goes to <out>/latency_<L>ms/ (its sweep.json, sweep.md, runs) and
<out> holds the answer against the latency: sweep.json (format LATENCY_FORMAT), sweep.md, sweep.png.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from storage.backends.latency_control import RELAYS_VARIABLE, LatencyRelayError, check_control, check_delay, set_delay
from storage.backends.relays import find_relays
from storage.backends.shared_storage import SharedStorageError
from storage.sweep.plot import bar
from storage.sweep.rules import SweepError

LATENCY_FORMAT = "mlperf-emulation-latency-sweep"


def check_latencies(latencies: Sequence[float]) -> None:
    """SweepError naming --latency-ms for a value that is not a number >= 0, or one given twice."""
    for value in latencies:
        try:
            check_delay(value)
        except LatencyRelayError as error:
            raise SweepError(str(error)) from None
    if len(set(latencies)) != len(latencies):
        raise SweepError(f"--latency-ms: each latency once, got {' '.join(f'{v:g}' for v in latencies)}")


def relay_controls(emulated_hosts: Path | None, environ: Mapping[str, str] = os.environ) -> list[Path]:
    """The control files of the storage's relays: the shared storage's in --emulated-hosts, then those the
    environment names (the S3 endpoint's). SweepError naming --latency-ms where there is none."""
    try:
        controls = find_relays(emulated_hosts, environ)
    except (SharedStorageError, OSError) as error:
        raise SweepError(f"--latency-ms: {error}") from None
    for control in controls:  # only a file a relay made and marked is ever written (check_control)
        try:
            check_control(control)
        except LatencyRelayError as error:
            raise SweepError(f"--latency-ms: {error}") from None
    if not controls:
        raise SweepError("--latency-ms: the storage has no latency relay: bring it up with --latency-ms 0 "
                         "(storage.backends.shared_storage up, with --emulated-hosts here; or storage.backends.object_endpoint "
                         f"serve, whose env file sets {RELAYS_VARIABLE})")
    return controls


def apply_latency(controls: Sequence[Path], latency_ms: float) -> None:
    """Every relay at `latency_ms` (no jitter), returning once each has applied it."""
    for control in controls:
        try:
            set_delay(control, latency_ms)
        except LatencyRelayError as error:
            raise SweepError(f"--latency-ms {latency_ms:g}: {error}") from None
    print(f"[sweep] the storage link's latency: {latency_ms:g} ms round trip on {len(controls)} relay(s)", flush=True)


def folder_of(out: Path, latency_ms: float) -> Path:
    return out / f"latency_{latency_ms:g}ms"


# ---------------------------------------------------------------------------- the answer against the latency

def latency_row(latency_ms: float, document: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """One latency's answer (ours and DLIO's) from its sweep.json's content."""
    ours, dlio = document["headline"], document.get("dlio_headline")
    at_bar = next((p for p in document["points"] if p["accelerators"] == ours["accelerators"]), None)
    return {"latency_ms": latency_ms, "folder": str(folder), "accelerators": ours["accelerators"],
            "lower_bound": ours["lower_bound"], "au_mean": None if at_bar is None else at_bar["au_mean"],
            "mb_per_s": None if at_bar is None else at_bar.get("mb_per_s"),
            "dlio_accelerators": None if dlio is None else dlio["accelerators"],
            "dlio_lower_bound": None if dlio is None else dlio["lower_bound"],
            "failure": document.get("failure")}


def latency_document(settings: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                     au_threshold: float | None) -> dict[str, Any]:
    return {"format": LATENCY_FORMAT, "version": 1, **settings, "au_threshold": au_threshold,
            "latencies": [dict(r) for r in rows]}


def _answer(count: int | None, lower_bound: bool | None) -> str:
    return "n/a" if count is None else f"{count}{'+' if lower_bound else ''}"


def latency_markdown(document: Mapping[str, Any]) -> str:
    rows = document["latencies"]
    with_dlio = any(r["dlio_accelerators"] is not None for r in rows)
    header = ["latency ms", "accelerators at the bar", "AU there", "MB/s asked there"] + \
        (["DLIO's accelerators"] if with_dlio else []) + ["sweep"]
    lines = [f"# {document['benchmark']} on {document['accelerator']}: the answer against the storage's latency", "",
             f"AU threshold {bar(document['au_threshold'])}; the round trip the storage link adds to every "
             "request-response (storage.backends.latency_relay); each latency a full sweep. A '+' is a lower bound "
             "(every count run passed).", "",
             "| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for r in rows:
        au = "n/a" if r["au_mean"] is None else f"{r['au_mean']:.1%}"
        mb = "n/a" if r["mb_per_s"] is None else f"{r['mb_per_s']:,.2f}"
        row = [f"{r['latency_ms']:g}", _answer(r["accelerators"], r["lower_bound"]), au, mb]
        if with_dlio:
            row.append(_answer(r["dlio_accelerators"], r["dlio_lower_bound"]))
        row.append(f"{Path(r['folder']).name}/sweep.md" + (" (stopped on a failed point)" if r["failure"] else ""))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot_latencies(document: Mapping[str, Any], path: Path) -> None:
    """Accelerators at the AU bar against the latency, DLIO's beside ours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = document["latencies"]
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    xs = [r["latency_ms"] for r in rows]
    ax.plot(xs, [r["accelerators"] for r in rows], "o-", label="ours (the real loader)")
    dlio = [(r["latency_ms"], r["dlio_accelerators"]) for r in rows if r["dlio_accelerators"] is not None]
    if dlio:
        ax.plot([x for x, _ in dlio], [y for _, y in dlio], "s--", label="DLIO")
    ax.set_xlabel("storage latency, round trip (ms)")
    ax.set_ylabel(f"accelerators at AU >= {bar(document['au_threshold'])}")
    ax.set_title(f"{document['benchmark']} on {document['accelerator']}", fontsize=10)
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_latency_outputs(out: Path, document: Mapping[str, Any]) -> None:
    from storage.sweep.report import PLOT_FILE, SWEEP_FILE, TABLE_FILE

    staging = out / (SWEEP_FILE + ".tmp")
    staging.write_text(json.dumps(document, indent=2) + "\n")
    staging.replace(out / SWEEP_FILE)
    (out / TABLE_FILE).write_text(latency_markdown(document))
    if document["latencies"]:
        plot_latencies(document, out / PLOT_FILE)
