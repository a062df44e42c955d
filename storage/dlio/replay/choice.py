"""One entry for both replays: `replay(run_dir, reader="generic"|"plugin", ...)`.

- generic (storage.dlio.replay.generic): DLIO 2.0.0 on export's workload, one record per sample;
- plugin (storage.dlio.plugin.workload): DLIO 2.0.0 with the reader plugin that makes, per
  sample, the reads the profile recorded;
- storage (storage.dlio.replay.storage_workload_replay): DLIO 3.0.x on the export's MLPerf Storage
  workload itself (FLUX: parquet row groups), at this run's data size; 3.0 only;
- object (storage.dlio.replay.object_replay): DLIO 3.0.x's object mode (s3dlio) on the export's
  object-storage workload, in the bucket and through the endpoint the run read; 3.0 only, and only
  for a run whose data was in an object store (the sweep's --dlio runs it for s3:// data).

The plugin's replay is built on the generic one's pieces, so the choice between them lives here,
above both, rather than in either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from storage.dlio.plugin.workload import plugin_replay
from storage.dlio.replay.generic import ReplayError, ReplayResult
from storage.dlio.replay.generic import replay as generic_replay
from storage.dlio.replay.storage_workload_replay import storage_workload_replay

READERS = ("generic", "plugin", "storage", "object")
# the readers only DLIO 3.0.x runs: 2.0.0 has no parquet, none of the MLPerf Storage keys and no S3 client
_DLIO3_ONLY = {"storage": "the export's MLPerf Storage workload, which only DLIO 3.0.x reads (2.0.0 has neither "
                          "its parquet nor its keys)",
               "object": "the export's object-storage workload, which only DLIO 3.0.x's object mode reads (2.0.0 "
                         "has no S3 client)"}


def replay(run_dir: Path, *, reader: str = "generic", work_dir: Path | None = None, keep_data: bool = False,
           timeout_s: float | None = None, before_train: Callable[[Path], None] | None = None,
           dlio: str = "2.0.0") -> ReplayResult:
    """The replay `reader` names, on DLIO `dlio` (2.0.0 or 3.0); a ReplayError for another name."""
    if reader not in READERS:
        raise ReplayError(f"reader {reader!r} is not one of {', '.join(READERS)}")
    if reader in _DLIO3_ONLY and dlio != "3.0":
        raise ReplayError(f"the {reader} reader runs {_DLIO3_ONLY[reader]}: add --dlio 3.0")
    if reader == "storage":
        return storage_workload_replay(run_dir, work_dir=work_dir, keep_data=keep_data, timeout_s=timeout_s,
                                       before_train=before_train)
    if reader == "object":  # DLIO reads the endpoint, as the run did: no page cache to evict (before_train unused)
        from storage.dlio.replay.object_replay import object_replay

        return object_replay(run_dir, work_dir=work_dir, keep_data=keep_data, timeout_s=timeout_s)
    run = generic_replay if reader == "generic" else plugin_replay
    return run(run_dir, work_dir=work_dir, keep_data=keep_data, timeout_s=timeout_s, before_train=before_train,
               dlio=dlio)
