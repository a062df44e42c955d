"""The offline time-window index: the reference's `use_offline_ts_indices` (merged yambda.py and
datasets/offline_ts_indices.py @ f9353f6b; default off there and here).

Built once per cache, history length, floor and window length, under the cache's `_positions_lock`:

- `ts_indices_<tag>_W<W>.npy`: every anchor's index, int64, bucketed by window ((t - t_min) // W, t_min the
  earliest anchor's time) and in ascending anchor order (the cache's user-major order) inside a bucket;
- `ts_offsets_<tag>_W<W>.npy`: int64, one more than the windows: window ts is
  `ts_indices[offsets[ts]:offsets[ts + 1]]`.

`<tag>` is the positions file's (`L<L>`, or `L<L>_m<m>` for a floor other than L). The timestamps come from
`anchor_ts_<tag>.npy` where it exists, else from `flat_timestamps.npy` at each anchor's position, a million
anchors at a time, in three passes (range, counts per window, fill). Both files are staged in the cache
folder and renamed into place, the offsets last: a build that was interrupted has no offsets and is built
again. With the index a window costs two offsets and its own anchors' 8 B each instead of a full scan of
anchor_ts; the build is the one-time phase `window_index_build`.

    python -m recommendation_v4.data.window_index --cache-dir DIR --history-length 4086   # ahead of time

Example:
    python -m recommendation_v4.data.window_index --cache-dir $MLPERF_DATA_ROOT/yambda-5b/processed_5b/hstu_cache_L4086 --history-length 4086
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import sys
import tempfile
from collections.abc import Iterator, Sequence

import numpy as np

from common import command_line
from common.data.phases import ONE_TIME, measure_phase
from recommendation_v4.data import cache_format as cf

CHUNK_ANCHORS = 1_000_000


def index_files(cache: pathlib.Path, history_length: int, min_history: int,
                window_seconds: int) -> tuple[pathlib.Path, pathlib.Path]:
    """The index's two files (indices, offsets) in `cache`."""
    tag = cf.positions_file(history_length, min_history)[len("positions_"):-len(".npy")] + f"_W{window_seconds}"
    return cache / f"ts_indices_{tag}.npy", cache / f"ts_offsets_{tag}.npy"


@contextlib.contextmanager
def _positions_locked(cache: pathlib.Path) -> Iterator[None]:
    with open(cache / cf.POSITIONS_LOCK, "a") as handle:  # the reference builds under the same lock
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _timestamps(cache: pathlib.Path, history_length: int, min_history: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(timestamps, positions): anchor_ts itself where it is there (positions None), else flat_timestamps
    with the positions to gather it through."""
    anchor_ts = cache / cf.anchor_ts_file(history_length, min_history)
    positions = np.load(cache / cf.positions_file(history_length, min_history), mmap_mode="r")
    if anchor_ts.is_file():
        values = np.load(anchor_ts, mmap_mode="r")
        if values.ndim != 1 or values.dtype != np.int64 or len(values) != len(positions):
            raise ValueError(f"{anchor_ts}: not one int64 per anchor of {cf.positions_file(history_length, min_history)}")
        return values, None
    return np.load(cache / "flat_timestamps.npy", mmap_mode="r"), positions


def _chunks(count: int, timestamps: np.ndarray, positions: np.ndarray | None) -> Iterator[tuple[int, np.ndarray]]:
    for start in range(0, count, CHUNK_ANCHORS):
        stop = min(start + CHUNK_ANCHORS, count)
        if positions is None:
            yield start, np.asarray(timestamps[start:stop], dtype=np.int64)
        else:
            yield start, np.asarray(timestamps[np.asarray(positions[start:stop])], dtype=np.int64)


def ensure_window_index(cache: pathlib.Path, history_length: int, min_history: int,
                        window_seconds: int) -> tuple[pathlib.Path, pathlib.Path]:
    """The index's files, built first where they are not both there (see the module docstring)."""
    if window_seconds < 1:
        raise ValueError(f"window_seconds must be >= 1, got {window_seconds}")
    indices_path, offsets_path = index_files(cache, history_length, min_history, window_seconds)
    if indices_path.is_file() and offsets_path.is_file():
        return indices_path, offsets_path
    with _positions_locked(cache):
        if indices_path.is_file() and offsets_path.is_file():
            return indices_path, offsets_path
        with measure_phase("window_index_build", ONE_TIME) as phase:
            timestamps, positions = _timestamps(cache, history_length, min_history)
            count = len(positions) if positions is not None else len(timestamps)
            t_min, t_max = None, None
            for _, chunk in _chunks(count, timestamps, positions):  # pass 1: the range
                if chunk.size:
                    low, high = int(chunk.min()), int(chunk.max())
                    t_min = low if t_min is None else min(t_min, low)
                    t_max = high if t_max is None else max(t_max, high)
            windows = 0 if t_min is None else (t_max - t_min) // window_seconds + 1
            counts = np.zeros(windows, dtype=np.int64)
            for _, chunk in _chunks(count, timestamps, positions):  # pass 2: anchors per window
                counts += np.bincount((chunk - t_min) // window_seconds, minlength=windows).astype(np.int64)
            offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
            with tempfile.TemporaryDirectory(prefix=".window-index-", dir=cache) as staging_dir:
                staging = pathlib.Path(staging_dir)
                indices = np.lib.format.open_memmap(staging / indices_path.name, mode="w+", dtype=np.int64,
                                                    shape=(count,))
                cursor = offsets[:-1].copy()
                for start, chunk in _chunks(count, timestamps, positions):  # pass 3: each window's anchors, in order
                    buckets = (chunk - t_min) // window_seconds
                    order = np.argsort(buckets, kind="stable")
                    present, first, sizes = np.unique(buckets[order], return_index=True, return_counts=True)
                    for bucket, at, size in zip(present.tolist(), first.tolist(), sizes.tolist()):
                        indices[cursor[bucket]:cursor[bucket] + size] = order[at:at + size] + start
                        cursor[bucket] += size
                indices.flush()
                del indices
                np.save(staging / offsets_path.name, offsets)
                offsets_path.unlink(missing_ok=True)
                os.replace(staging / indices_path.name, indices_path)
                os.replace(staging / offsets_path.name, offsets_path)  # last: a complete index has both
            element = 8 if positions is None else 16  # a timestamp, or a position and the timestamp it points at
            phase.read(3 * count * element, files=1 if positions is None else 2)
            phase.wrote(indices_path)
            phase.wrote(offsets_path)
            phase.detail.update(path=str(indices_path), anchors=count, windows=windows, passes=3,
                                source="anchor_ts" if positions is None else "flat_timestamps[positions]")
    return indices_path, offsets_path


def load_window_index(cache: pathlib.Path, history_length: int, min_history: int,
                      window_seconds: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices memory-mapped, offsets), checked as the reference checks them; ValueError naming the file."""
    indices_path, offsets_path = index_files(cache, history_length, min_history, window_seconds)
    indices = np.load(indices_path, mmap_mode="r")
    offsets = np.load(offsets_path)
    positions = np.load(cache / cf.positions_file(history_length, min_history), mmap_mode="r")
    if indices.ndim != 1 or indices.dtype != np.int64 or len(indices) != len(positions):
        raise ValueError(f"{indices_path}: not one int64 per anchor of {cf.positions_file(history_length, min_history)}")
    if (offsets.ndim != 1 or offsets.dtype != np.int64 or not offsets.size or offsets[0] != 0
            or offsets[-1] != len(indices) or np.any(np.diff(offsets) < 0)):
        raise ValueError(f"{offsets_path}: not the offsets of {indices_path.name} (int64, from 0 to "
                         f"{len(indices):,}, non-decreasing)")
    return indices, offsets


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.parser("recommendation_v4.data.window_index", __doc__.split("\n\n")[0],
                                 example=command_line.example_in(__doc__), docs="docs/fidelity.md")
    parser.add_argument("--cache-dir", type=pathlib.Path, required=True, help="an hstu_cache_L<L> folder")
    parser.add_argument("--history-length", type=int, required=True)
    parser.add_argument("--min-history", type=int, default=None, help="the anchors' floor (default: the history length)")
    parser.add_argument("--window-seconds", type=int, default=86_400)
    args = parser.parse_args(argv)
    min_history = args.history_length if args.min_history is None else args.min_history
    if not (args.cache_dir / cf.positions_file(args.history_length, min_history)).is_file():
        print(f"error: {args.cache_dir / cf.positions_file(args.history_length, min_history)}: not there (build the "
              "cache first: python -m recommendation_v4.data.cache_build)", file=sys.stderr)
        return 3
    for path in ensure_window_index(args.cache_dir, args.history_length, min_history, args.window_seconds):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
