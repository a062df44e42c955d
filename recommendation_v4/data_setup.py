"""From gin's `DataConfig` / `StreamingConfig` to the train windows and the evaluation set.

The dataset is read from the reference's flat-event cache (`processed_<size>/hstu_cache_L<L>/`).
Rank 0 makes what is missing, in the order the reference's first run does: a synthetic dataset is
generated (`yambda-synthetic-<size>-seed<seed>`), the raw files preprocessed into
`train_sessions.parquet` (when there is no cache yet, or the raw files changed), the cache built from
it, then the anchor positions of this `min_history` and their timestamps; the other ranks wait
(`common.RunConfig.data_preparation_timeout_s`). A prepared cache (the reference's download)
needs nothing else. A data root in an object store (`s3://bucket/prefix`) is only read: its cache
must have been published there.

Windows, order and rank split are the reference's (windows.py; `round_robin_batches`): rank r
trains samples r, r + W, r + 2W, ... of each window's order, in batches of GBS / W, the tail
dropped, so all ranks work on the same users at once.
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import torch

from common.config.checks import ConfigError
from common.data.fidelity import DataPathSetting
from common.data.index import round_robin_batches
from common.data.loader import StreamingLoader
from common.data.preparation_lock import preparing
from common.distributed.collectives import run_on_rank0, world_size
from common.distributed.setup import DistInfo
from common.object_store.location import ObjectPath
from common.quality.auc import binary_auc
from common.run.task import EvalPoint
from recommendation_v4.data import cache_build, layout, schema
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data import features as F
from recommendation_v4.data.dataset import YambdaDataset
from recommendation_v4.data.item_maps import ItemMaps
from recommendation_v4.data.preprocess import SOURCES_FILE, ensure_processed, stale_reason
from recommendation_v4.data.synthetic import ensure_synthetic
from recommendation_v4.data.window_index import ensure_window_index, load_window_index
from recommendation_v4.data.windows import AnchorWindows
from recommendation_v4.model.flavors import HSTUFlavor, reference_table_rows
from recommendation_v4.run_config import DataConfig, StreamingConfig

# pseudo-count of the popularity baseline: items seen rarely shrink toward the global rate
POPULARITY_PRIOR_COUNT = 10.0
# the evaluation subset is the same for every run, whatever its training seed
EVAL_SUBSET_SEED = 20_260_101
# the popularity baseline counts at most this many train anchors (evenly spaced: still a forward read)
BASELINE_MAX_ANCHORS = 50_000_000


def dataset_dir_for(config: DataConfig) -> layout.Location:
    return layout.default_dataset_dir(config.location, config.dataset)


def _dataset_kind(config: DataConfig) -> dict[str, str | int]:
    try:
        return layout.parse_dataset_name(config.dataset)
    except ValueError as error:
        raise ConfigError(f"recommendation_v4.DataConfig.dataset: {error}") from error


def _how_to_get(dataset_dir: layout.Location, size: str) -> str:
    return (f"download it with `recommendation_v4/download_dataset.sh --size {size} --dataset-dir {dataset_dir}` (raw "
            f"files: preprocessed and cached on first use), or place the prepared cache the reference publishes "
            f"(processed_{size}/hstu_cache_L4086/, item_popularity.npy and shared_metadata/) there; or train on "
            "synthetic data: `python -m recommendation_v4.data.synthetic --size small --seed 0`, or bind "
            "recommendation_v4.DataConfig.dataset to a yambda-synthetic-<size>-seed<n> name")


def _announce(what: str) -> None:
    waiting = "; the other ranks wait for it" if world_size() > 1 else ""
    print(f"[data] {what}{waiting}", flush=True)


def _prepare_local(config: DataConfig, dataset_dir: pathlib.Path, size: str, history_length: int,
                   min_history: int, window_seconds: int | None) -> None:
    """Rank 0: whatever the reference's first run would build, built (see the module docstring)."""
    kind = _dataset_kind(config)
    if kind["kind"] == "synthetic" and config.generate_if_missing:
        ensure_synthetic(dataset_dir, size=size, seed=int(kind["seed"]), content=str(kind["content"]))
    processed = pathlib.Path(layout.processed_dir(dataset_dir, size))
    cache = processed / layout.cache_dir_name(history_length)
    has_raw = pathlib.Path(layout.multi_event_path(dataset_dir, size)).is_file()
    sessions = processed / layout.TRAIN_SESSIONS_FILE
    if has_raw and sessions.is_file() and not (processed / SOURCES_FILE).is_file():
        # preprocessed elsewhere (the reference's download_dataset.sh writes the same files): taken as is
        print(f"[data] {sessions}: preprocessed elsewhere (no {SOURCES_FILE}), taken as it is", flush=True)
    elif has_raw:
        reason = stale_reason(dataset_dir, size)
        if reason is not None and (reason != "not built yet" or not cf.is_ready(cache)):
            ensure_processed(dataset_dir, size, progress=True,
                             announce=lambda why: _announce(f"preprocessing {dataset_dir} ({why})"))
    elif not cf.is_ready(cache) and not (processed / layout.TRAIN_SESSIONS_FILE).is_file():
        raise schema.DatasetError(f"no Yambda data at {dataset_dir} (neither {cache} nor the raw files): "
                                  + _how_to_get(dataset_dir, size))
    try:
        if not cf.is_ready(cache):
            _announce(f"building the flat-event cache {cache} from {layout.TRAIN_SESSIONS_FILE} (the reference's "
                      f"first-run build; ahead of time: python -m recommendation_v4.data.cache_build --dataset-dir "
                      f"{dataset_dir} --history-length {history_length})")
            cache_build.build_cache(processed, history_length)
        cache_build.ensure_positions(cache, history_length, min_history)
        if window_seconds is None:
            cache_build.ensure_anchor_ts(cache, history_length, min_history)
        else:  # the reference's offline index: built from flat_timestamps (or an anchor_ts already there)
            ensure_window_index(cache, history_length, min_history, window_seconds)
    except OSError as error:  # a read-only or full file system, a permission
        raise schema.DatasetError(f"{cache}: cannot write what this run needs there ({error}); build it once where the "
                                  f"dataset is writable: python -m recommendation_v4.data.cache_build --dataset-dir "
                                  f"{dataset_dir} --history-length {history_length} --min-history {min_history}") from error


def _check_published(cache: ObjectPath, history_length: int, min_history: int) -> None:
    opened = cf.FlatEventCache.open(cache)
    for name in (cf.positions_file(history_length, min_history), cf.anchor_ts_file(history_length, min_history)):
        if not opened.has(name):
            raise schema.DatasetError(
                f"{cache / name}: no such object: publish the cache with the positions and anchor timestamps of "
                f"min_history {min_history} (python -m recommendation_v4.data.synthetic --out s3://... --cache "
                f"{history_length}:{min_history}, or build them locally and upload the directory)")


def materialise(config: DataConfig, *, history_length: int, min_history: int,
                window_seconds: int | None = None) -> layout.Location:
    """Rank 0 prepares what is missing (with `window_seconds`, the offline window index of that window
    length instead of anchor_ts); every rank gets the dataset directory, or rank 0's error."""
    dataset_dir = dataset_dir_for(config)
    size = str(_dataset_kind(config)["size"])
    if isinstance(dataset_dir, ObjectPath) and window_seconds is not None:
        raise ConfigError(f"recommendation_v4.DataConfig.use_offline_ts_indices = True: the offline window index is "
                          f"built beside a local cache, not in an object store ({dataset_dir})")
    if isinstance(dataset_dir, ObjectPath):
        cache = layout.cache_dir(dataset_dir, size, history_length)
        run_on_rank0(lambda: _check_published(cache, history_length, min_history),
                     shared_errors=(ConfigError, schema.DatasetError))
        return dataset_dir
    def prepare() -> None:
        with preparing(dataset_dir, say=lambda line: print(line, flush=True)):
            _prepare_local(config, pathlib.Path(dataset_dir), size, history_length, min_history, window_seconds)

    run_on_rank0(prepare, shared_errors=(ConfigError, schema.DatasetError))
    return dataset_dir


def _train_and_holdout(windows: AnchorWindows, stream: StreamingConfig) -> tuple[list[int], int]:
    """The train windows and the holdout window (see StreamingConfig); a ConfigError when they clash."""
    count = windows.num_windows()
    start = stream.start_window
    if stream.eval_holdout_window >= 0:
        holdout = stream.eval_holdout_window
    else:
        holdout = start + stream.num_windows if stream.num_windows else count - 1
    end = start + stream.num_windows if stream.num_windows else holdout
    if start >= count:
        raise ConfigError(f"recommendation_v4.StreamingConfig.start_window={start}: the data has {count} windows "
                          f"of {stream.window_seconds} s")
    if not start <= holdout - stream.eval_holdout_num_windows + 1 or holdout >= count or start <= holdout < end:
        raise ConfigError(
            f"recommendation_v4.StreamingConfig: the evaluation window {holdout} is not one after the train windows "
            f"{start}..{end - 1} among the data's {count} windows (set eval_holdout_window, num_windows or start_window)")
    keys = list(range(start, min(end, count)))
    if not keys:
        raise ConfigError(
            f"recommendation_v4.StreamingConfig: no train window before the evaluation window {holdout}: the data has "
            f"{count} window(s) of {stream.window_seconds} s from start_window {start} (shorter windows, an earlier "
            "start_window, or another eval_holdout_window)")
    return keys, holdout


@dataclasses.dataclass
class YambdaData:
    config: DataConfig
    stream: StreamingConfig
    dataset_dir: layout.Location
    dataset: YambdaDataset
    windows: AnchorWindows
    train_keys: list[int]
    sizes: dict[int, int]  # train samples per train window
    holdout_window: int
    eval_indices: np.ndarray  # the fixed evaluation set (anchor indices, ascending)
    info: DistInfo

    @property
    def table_rows(self) -> dict[str, int]:
        return self.dataset.table_rows

    @property
    def read_dirs(self) -> list[layout.Location]:
        """What training reads: the flat-event cache and the mappings (not the raw files or the
        parquet they were built from), for the emulation's eviction and its 5x-memory check."""
        return [self.dataset.cache_dir, layout.shared_metadata_dir(self.dataset_dir)]

    def describe(self) -> str:
        d = self.dataset
        return (f"{self.config.dataset} at {self.dataset_dir}: {len(d):,} anchors (min_history {d.min_history}) in "
                f"{self.windows.num_windows()} windows; {sum(self.sizes.values()):,} train samples in windows "
                f"{self.train_keys[0]}..{self.train_keys[-1]}, {len(self.eval_indices):,} evaluation samples of window "
                f"{self.holdout_window}; history {d.history_length} ({d.history_strategy}, scan {d.scan_window}); "
                f"tables {self.table_rows}")

    def train_window_batches(self, key: int, *, global_batch_size: int) -> list[np.ndarray]:
        info = self.info
        return round_robin_batches(self.windows.train_window_indices(key), rank=info.rank, world_size=info.world_size,
                                   batch_size=global_batch_size // info.world_size)

    def _anchor_items_and_labels(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cache = self.dataset.cache
        pos = np.asarray(self.dataset.positions[indices], dtype=np.int64)
        items = np.asarray(cache.columns["flat_item_ids"][pos], dtype=np.int64)
        labels = np.asarray(cache.columns["flat_played_ratio"][pos]) >= schema.LISTEN_PLUS_MIN_PLAYED_PCT
        return items, labels

    def popularity_baseline_auc(self) -> float:
        """AUC of scoring each evaluation candidate by its item's listen_plus rate over the train
        windows' anchors (at most BASELINE_MAX_ANCHORS of them), on exactly the evaluation set."""
        train = self.windows.anchors_in_windows(self.train_keys[0], self.train_keys[-1])
        if train.size > BASELINE_MAX_ANCHORS:
            train = train[np.linspace(0, train.size - 1, BASELINE_MAX_ANCHORS).astype(np.int64)]
        items, labels = self._anchor_items_and_labels(train)
        n_items = max(self.dataset.id_rows["item_id"], int(items.max(initial=0)) + 1)
        plays = np.bincount(items, minlength=n_items)
        wins = np.bincount(items, weights=labels, minlength=n_items)
        mean = labels.mean() if labels.size else 0.5
        rate = (wins + POPULARITY_PRIOR_COUNT * mean) / (plays + POPULARITY_PRIOR_COUNT)
        eval_items, eval_labels = self._anchor_items_and_labels(self.eval_indices)
        eval_items = np.minimum(eval_items, n_items - 1)
        return binary_auc(torch.from_numpy(rate[eval_items]), torch.from_numpy(eval_labels.astype(np.float32)))


def _table_sizes(config: DataConfig) -> tuple[dict[str, int] | None, dict[str, int] | None]:
    cross = None
    if config.cross_table_rows is not None:
        cross = {c.name: int(config.cross_table_rows) for c in F.CROSS_FEATURES}
    entity = None
    if config.entity_table_rows == "reference":
        ref = reference_table_rows()
        entity = {name: ref[name] for name in F.REFERENCE_ENTITY_ROWS}
    return cross, entity


def _subset(indices: np.ndarray, limit: int, seed: list[int] | int) -> np.ndarray:
    if not limit or indices.size <= limit:
        return indices
    pick = np.random.default_rng(seed).choice(indices.size, limit, replace=False)
    return indices[np.sort(pick)]


def prepare_data(*, config: DataConfig, stream: StreamingConfig, model_config: HSTUFlavor, info: DistInfo) -> YambdaData:
    history_length = config.history_length or model_config.history_length
    min_history = history_length if config.min_history is None else config.min_history
    if F.max_sequence_length(history_length) > model_config.max_seq_len:
        raise ConfigError(f"recommendation_v4.DataConfig.history_length={history_length} makes sequences longer than "
                          f"the model's max_seq_len={model_config.max_seq_len}")
    dataset_dir = materialise(config, history_length=history_length, min_history=min_history,
                              window_seconds=stream.window_seconds if config.use_offline_ts_indices else None)
    size = str(_dataset_kind(config)["size"])
    processed = layout.processed_dir(dataset_dir, size)
    cache_dir = layout.cache_dir(dataset_dir, size, history_length)
    cross, entity = _table_sizes(config)
    popularity = processed / layout.ITEM_POPULARITY_FILE
    dataset = YambdaDataset(
        cache_dir, item_maps=ItemMaps.load(dataset_dir, processed), history_length=history_length,
        min_history=min_history, scan_window=config.scan_window, history_strategy=config.history_strategy,
        max_history_events=model_config.max_seq_len - F.SEQUENCE_OVERHEAD, cross_table_rows=cross,
        entity_table_rows=entity, popularity_items=_popularity_items(popularity))
    anchor_ts_name = cf.anchor_ts_file(history_length, min_history)
    whole = isinstance(cache_dir, ObjectPath)  # an object is scanned whole: one GET per scan
    windows = AnchorWindows(
        lambda: cf.FlatEventCache.open(cache_dir).load_per_anchor(anchor_ts_name, whole=whole) if whole
        else np.load(pathlib.Path(cache_dir) / anchor_ts_name, mmap_mode="r"),
        window_seconds=stream.window_seconds, shuffle_fraction=stream.shuffle_fraction,
        shuffle_seed=stream.shuffle_seed, train_split_percentage=config.train_split_percentage,
        split_salt=config.split_salt,
        uids_of=lambda idx: np.asarray(dataset.cache.columns["flat_uid"][np.asarray(dataset.positions[idx])]),
        open_window_index=(lambda: load_window_index(pathlib.Path(cache_dir), history_length, min_history,
                                                     stream.window_seconds)) if config.use_offline_ts_indices else None)
    train_keys, holdout = _train_and_holdout(windows, stream)
    sizes = windows.count_train_samples(train_keys)
    eval_indices = _subset(windows.eval_holdout_indices(holdout, stream.eval_holdout_num_windows),
                           config.eval_max_samples, EVAL_SUBSET_SEED)
    return YambdaData(config=config, stream=stream, dataset_dir=dataset_dir, dataset=dataset, windows=windows,
                      train_keys=train_keys, sizes=sizes, holdout_window=holdout, eval_indices=eval_indices, info=info)


def _popularity_items(path: layout.Location) -> int:
    try:
        if isinstance(path, ObjectPath):
            from common.object_store.npy_array import ObjectNpyArray

            return len(ObjectNpyArray(path))
        return int(np.load(path, mmap_mode="r").shape[0]) if path.is_file() else 0
    except FileNotFoundError:
        return 0


def data_path_settings(config: DataConfig, stream: StreamingConfig, *, history_length: int) -> list[DataPathSetting]:
    """This run's data path beside the reference's (PR #889 yambda_5b.gin and utils.py; docs/fidelity.md)."""
    min_history = history_length if config.min_history is None else config.min_history
    b = "recommendation_v4.DataConfig."
    s = "recommendation_v4.StreamingConfig."
    return [
        DataPathSetting("layout", "hstu_cache (flat npy columns)", "hstu_cache (flat npy columns)", b + "dataset"),
        DataPathSetting("order", "user-major" if stream.shuffle_fraction == 0 else f"shuffled {stream.shuffle_fraction:g}",
                        "user-major", s + "shuffle_fraction"),
        DataPathSetting("rank_split", "round_robin", "round_robin", "-"),
        DataPathSetting("window_seconds", stream.window_seconds, 86_400, s + "window_seconds"),
        DataPathSetting("min_history", min_history, 4086, b + "min_history"),
        DataPathSetting("history_length", history_length, 4086, b + "history_length"),
        DataPathSetting("scan_window", config.scan_window, 20_000, b + "scan_window"),
        DataPathSetting("history_strategy", config.history_strategy, "interleaved", b + "history_strategy"),
        DataPathSetting("train_workers", config.num_workers, 4, b + "num_workers"),
        DataPathSetting("prefetch_factor", config.prefetch_factor, 8, b + "prefetch_factor"),
        DataPathSetting("eval_workers", config.eval_num_workers, 4, b + "eval_num_workers"),
        DataPathSetting("next_window_prepared_in_background", True, True, "-"),
        DataPathSetting("window_selection", "offline window index slice" if config.use_offline_ts_indices
                        else "full anchor_ts scan per window", "full anchor_ts scan per window",
                        b + "use_offline_ts_indices"),
        DataPathSetting("eval_set", "holdout window" if stream.eval_mode == "holdout" else "next window",
                        "holdout window", s + "eval_mode"),
    ]


class EvalPlan:
    """Which samples an evaluation after train window T reads, and in which order.

    "holdout": the fixed set of the holdout window (the reference's `eval_holdout_indices`), the
    same at every evaluation. "next_window": the samples of window T+1 (strictly later than
    everything trained), capped at `max_samples`; after the last train window, the holdout set.
    Either way each rank reads its round-robin share in batches of eval_batch_size / W, a short
    last batch dropped, as the reference's evaluation loader does.
    """

    HOLDOUT_KEY = -1

    def __init__(self, data: YambdaData, *, mode: str, batch_size: int, max_samples: int) -> None:
        if batch_size % data.info.world_size:
            raise ConfigError(f"recommendation_v4.TrainConfig.eval_batch_size={batch_size} does not split over "
                              f"{data.info.world_size} ranks")
        self.data, self.mode, self.batch_size, self.max_samples = data, mode, batch_size, max_samples
        if data.eval_indices.size < batch_size:  # the reference drops a short last batch: nothing would be scored
            raise ConfigError(
                f"recommendation_v4.TrainConfig.eval_batch_size={batch_size} is more than the {data.eval_indices.size:,} "
                f"samples of the evaluation window {data.holdout_window}, whose short last batch is dropped (as the "
                "reference's loader drops it): lower it, or raise recommendation_v4.DataConfig.eval_max_samples")
        self.source = data.dataset
        self._train_keys = set(data.train_keys)

    def iterate(self, loader: StreamingLoader, at: EvalPoint, *, first_window: int):
        """The (index, batch) pairs of the evaluation at `at`; the next one's first batch is prefetched."""
        key = self.eval_key(at.window_key if at.window_key is not None else first_window)
        next_key = self.eval_key(at.next_window_key) if at.next_window_key is not None else None
        return loader.iterate(key, next_key=next_key)

    def eval_key(self, train_key: int) -> int:
        if self.mode == "next_window" and train_key + 1 in self._train_keys:
            return train_key + 1
        return self.HOLDOUT_KEY

    def batches(self, eval_key: int) -> list[np.ndarray]:
        if eval_key == self.HOLDOUT_KEY:
            chosen = self.data.eval_indices
        else:
            chosen = _subset(self.data.windows.window_indices(eval_key), self.max_samples, [EVAL_SUBSET_SEED, eval_key])
        info = self.data.info
        return round_robin_batches(chosen, rank=info.rank, world_size=info.world_size,
                                   batch_size=self.batch_size // info.world_size)
