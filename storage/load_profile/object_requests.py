"""The object-store side of a load profile: the requests every rank's loader made, added up, and
what they come to per sample (`load_profile.json` "object_requests"; absent for file data)."""

from __future__ import annotations

from typing import Any, Sequence

from common.object_store.requests import GET, RANGED_GET, RequestTally

DATA_KINDS = (GET, RANGED_GET)  # the requests that fetch samples' bytes


def merged(parts: Sequence[dict[str, Any]], *, samples: int) -> dict[str, Any] | None:
    """All ranks' request tallies; None when no rank read from an object store."""
    found = [p["reads"].get("object_requests") for p in parts]
    if not any(found):
        return None
    total = RequestTally()
    for entry in found:
        if entry:
            total.merge(RequestTally.from_json(entry))
    by_kind = total.to_json()
    data_requests = sum(by_kind.get(k, {}).get("requests", 0) for k in DATA_KINDS)
    data_bytes = sum(by_kind.get(k, {}).get("bytes", 0) for k in DATA_KINDS)
    return {
        "by_kind": by_kind,
        "data_requests": data_requests,
        "data_bytes": data_bytes,
        "requests_per_sample": data_requests / samples if samples else 0.0,
        "bytes_per_request": data_bytes / data_requests if data_requests else 0.0,
        "note": "requests the loaders made while building training batches (GET: whole objects; ranged GET: "
                "byte ranges); the dataset's listing at open is under dataset.listing",
    }


def summary(requests: dict[str, Any] | None) -> str:
    """"; s3 N requests/sample of M B" for the summary line, or nothing for file data."""
    if not requests:
        return ""
    kinds = "+".join(k for k in DATA_KINDS if k in requests["by_kind"])
    return (f"; object store: {requests['requests_per_sample']:,.2f} {kinds} requests/sample of "
            f"{requests['bytes_per_request']:,.0f} B")


def endpoint_of(dataset: dict[str, Any] | None) -> dict[str, str] | None:
    """The endpoint (URL and region, never a credential) a dataset under s3:// was read from."""
    if not dataset or not str(dataset.get("root") or "").startswith("s3://"):
        return None
    from common.object_store.endpoint import resolve_endpoint

    endpoint = resolve_endpoint()
    return {"endpoint_url": endpoint.url, "region": endpoint.region}
