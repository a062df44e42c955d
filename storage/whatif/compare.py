"""A what-if beside a measured sweep (`--compare sweep.json`): per accelerator count both AUs and the error in
points, each side's pass, and both knees; the table the validation of docs/whatif.md is made of."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from storage.sweep.report import FORMAT
from storage.whatif.errors import DataError

WITHIN_POINTS = 5.0  # issue 61's bound: a predicted AU within 5 points of the measured one


def read_sweep(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text())
    except OSError as error:
        raise DataError(f"--compare {path}: cannot be read ({error.strerror or error})") from None
    except ValueError as error:
        raise DataError(f"--compare {path}: not JSON ({error})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise DataError(f"--compare {path}: field 'format' is {found!r}, expected {FORMAT!r}")
    for index, point in enumerate(document.get("points") or []):
        for key in ("accelerators", "au_mean", "passed"):
            if point.get(key) is None:
                raise DataError(f"--compare {path}: no field 'points[{index}].{key}'")
    return document


def _knee(points: Sequence[Mapping[str, Any]]) -> int:
    best = 0
    for point in sorted(points, key=lambda p: p["accelerators"]):
        if not point["passed"]:
            break
        best = point["accelerators"]
    return best


def comparison(predicted: Mapping[str, Any], measured: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Every count both documents have: AUs, the error (predicted - measured, in points) and whether it is within
    the bound; each side's knee over those counts."""
    ours = {p["accelerators"]: p for p in predicted["points"]}
    rows = []
    for point in sorted(measured.get("points") or [], key=lambda p: p["accelerators"]):
        twin = ours.get(point["accelerators"])
        if twin is None:
            continue
        error = (twin["au_mean"] - point["au_mean"]) * 100
        rows.append({"accelerators": point["accelerators"], "measured_au": point["au_mean"],
                     "predicted_au": twin["au_mean"], "error_points": error,
                     "within": abs(error) <= WITHIN_POINTS, "measured_pass": point["passed"],
                     "predicted_pass": twin["passed"]})
    shared = [r["accelerators"] for r in rows]
    measured_knee = _knee([p for p in measured["points"] if p["accelerators"] in shared])
    predicted_knee = _knee([p for p in predicted["points"] if p["accelerators"] in shared])
    return {"measured_sweep": source, "within_points": WITHIN_POINTS, "rows": rows,
            "within_share": sum(r["within"] for r in rows) / len(rows) if rows else None,
            "measured_knee": measured_knee, "predicted_knee": predicted_knee,
            "same_knee": measured_knee == predicted_knee}


def markdown(found: Mapping[str, Any]) -> str:
    header = ["accelerators", "measured AU", "predicted AU", "error (points)", f"within {WITHIN_POINTS:g}",
              "measured pass", "predicted pass"]
    lines = [f"**Beside the measured sweep** `{found['measured_sweep']}`:", "",
             "| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for r in found["rows"]:
        lines.append(f"| {r['accelerators']} | {r['measured_au']:.1%} | {r['predicted_au']:.1%} | "
                     f"{r['error_points']:+.1f} | {'yes' if r['within'] else 'no'} | "
                     f"{'yes' if r['measured_pass'] else 'no'} | {'yes' if r['predicted_pass'] else 'no'} |")
    share = found["within_share"]
    lines += ["", f"Knee: measured {found['measured_knee']}, predicted {found['predicted_knee']} "
                  f"({'the same' if found['same_knee'] else 'different'}); "
                  f"{'n/a' if share is None else format(share, '.0%')} of the counts within {WITHIN_POINTS:g} points."]
    return "\n".join(lines) + "\n"
