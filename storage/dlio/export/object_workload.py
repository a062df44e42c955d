"""The object-storage variant of an exported workload: what DLIO's object mode is told.

PyPI's DLIO 2.0.0 has `storage_type: s3` in name only (no client, no endpoint setting; its readers
open `s3://` strings as local paths), so the variant is written for the MLCommons fork that
`mlpstorage ... training <model> run object` runs (DLIO_local_changes 3.0.x): `storage_type: s3`,
the bucket as `storage_root`, the client library and endpoint in `storage_options`. Credentials
are never written: that DLIO, like this project, takes them from AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY in the environment (mlpstorage loads them from its .env).
"""

from __future__ import annotations

from typing import Any

# the library mlpstorage's object mode picks by default, and the one whose listing and HEAD checks
# DLIO_local_changes supports fully (its minio and s3torchconnector adapters lack stat_object)
STORAGE_LIBRARY = "s3dlio"
PLACEHOLDER_BUCKET = "<bucket>"
PLACEHOLDER_ENDPOINT = "<http(s)://endpoint:port>"


def storage_section(profile: dict[str, Any], *, model: str) -> tuple[dict[str, Any], str, list[str]]:
    """(the `storage` section, the data_folder, notes) for `profile`'s run. A run that read from an
    object store names its bucket and endpoint; one that read files leaves placeholders to fill."""
    root = str((profile.get("dataset") or {}).get("root") or "")
    where = profile.get("object_store") or {}
    if root.startswith("s3://"):
        bucket, _, prefix = root[len("s3://"):].partition("/")
        folder = f"{prefix.split('/')[0]}/dlio/{model}/" if prefix else f"dlio/{model}/"
    else:
        bucket, folder = PLACEHOLDER_BUCKET, f"dlio/{model}/"
    options = {"storage_library": STORAGE_LIBRARY, "endpoint_url": where.get("endpoint_url") or PLACEHOLDER_ENDPOINT,
               "region": where.get("region") or "us-east-1"}
    section = {"storage_type": "s3", "storage_root": bucket, "storage_options": options}
    notes = [
        f"Object storage: DLIO_local_changes reads s3://{bucket}/{folder}train/... through {STORAGE_LIBRARY}; "
        "credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, never in this file.",
        "Listing: DLIO's rank 0 lists the whole prefix (recursively, every page) before the first step; "
        "dataset.skip_listing: True builds the names instead and HEAD-checks a sample of them.",
        "Reads: DLIO fetches each object whole (npz, npy, jpeg: one GET per file); parquet: ranged GETs of "
        "the footer and of each row group.",
    ]
    requests = profile.get("object_requests")
    if requests:
        kinds = ", ".join(f"{kind} {entry['requests']:,} x {entry['bytes_per_request']:,.0f} B "
                          f"({entry['latency_ms_mean']:.1f} ms)" for kind, entry in requests["by_kind"].items())
        notes.append(f"The trainer read this dataset from {root}: {requests['requests_per_sample']:.2f} data "
                     f"requests per sample of {requests['bytes_per_request']:,.0f} B each ({kinds}).")
    else:
        notes.append("The trainer read files in this run: fill storage_root and endpoint_url with the bucket and "
                     "endpoint the data is in.")
    return section, folder, notes
