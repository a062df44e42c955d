"""From gin's `DataConfig` to the train windows and the eval set of a Yambda dataset.

The dataset named in the config is created on first use when it is a synthetic one
(`yambda-synthetic-<size>-seed<seed>`) and preprocessed when its processed files are missing or
stale; downloaded Yambda (`yambda-<50m|500m|5b>`) goes through the very same path. A data root in
an object store (`s3://bucket/prefix`) is only read: its `processed/` must have been published
there (`processed_format.how_to_publish`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from common.quality.auc import binary_auc
from common.distributed.collectives import run_on_rank0, world_size
from common.config.checks import ConfigError
from common.distributed.setup import DistInfo
from common.run.task import EvalPoint
from common.data.index import rank_share, window_batches
from common.data.loader import StreamingLoader
from common.data.time_windows import TimeWindows, index_is_complete, write_index
from common.object_store.location import ObjectPath
from recommendation_v4.data import features as F
from recommendation_v4.data import layout, schema
from recommendation_v4.data.dataset import YambdaSequenceDataset
from recommendation_v4.data.preprocess import SplitConfig, ensure_processed, other_split, published_other_split
from recommendation_v4.data.synthetic import ensure_synthetic
from recommendation_v4.model.flavors import HSTUFlavor, reference_table_rows
from recommendation_v4.run_config import DataConfig

# pseudo-count of the popularity baseline: items seen rarely shrink toward the global rate
POPULARITY_PRIOR_COUNT = 10.0
# the eval subset is the same for every run, whatever its training seed
EVAL_SUBSET_SEED = 20_260_101
WINDOW_INDEX_DIR = "window_index"


class _AnchorTimestamps:
    """The anchor timestamps of a split as a lazy array: read a slice or a gather at a time."""

    def __init__(self, dataset: YambdaSequenceDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        rows = np.asarray(self.dataset.anchors[key], dtype=np.int64)
        return np.asarray(self.dataset.data.events["timestamp"][rows], dtype=np.int64)


def dataset_dir_for(config: DataConfig) -> layout.Location:
    return layout.default_dataset_dir(config.data_root, config.dataset)


def _dataset_kind(config: DataConfig) -> dict[str, str | int]:
    try:
        return layout.parse_dataset_name(config.dataset)
    except ValueError as error:
        raise ConfigError(f"recommendation_v4.DataConfig.dataset: {error}") from error


def _check_published(dataset_dir: ObjectPath, config: DataConfig) -> None:
    """Processed data in an object store is used as published: present (else the DatasetError
    saying how to publish it) and built with the configured split (else a ConfigError)."""
    processed = layout.processed_dir(dataset_dir)
    other = published_other_split(processed, SplitConfig(test_day=config.test_day))
    if other is not None:
        raise ConfigError(
            f"recommendation_v4.DataConfig.test_day={config.test_day}: {processed} was built with {other}; bind "
            "the test day it was built with, or preprocess and publish it again with this one")


def materialise(config: DataConfig) -> layout.Location:
    """Rank 0 generates (synthetic) and preprocesses the dataset; every rank gets its directory,
    or rank 0's error (a missing or malformed dataset is a data error on every rank). A dataset in
    an object store is only checked: the trainer does not write there."""
    dataset_dir = dataset_dir_for(config)
    if isinstance(dataset_dir, ObjectPath):
        _dataset_kind(config)
        run_on_rank0(lambda: _check_published(dataset_dir, config), shared_errors=(ConfigError, schema.DatasetError))
        return dataset_dir

    def prepare() -> None:
        kind = _dataset_kind(config)
        if kind["kind"] == "synthetic" and config.generate_if_missing:
            ensure_synthetic(dataset_dir, size=str(kind["size"]), seed=int(kind["seed"]), content=str(kind["content"]))
        schema.validate_raw_dataset(dataset_dir)  # a clear message if it is missing or malformed
        split = SplitConfig(test_day=config.test_day)
        other = other_split(dataset_dir, split)
        if other is not None:
            # someone preprocessed this split on purpose: replacing it silently would train on another one
            raise ConfigError(
                f"recommendation_v4.DataConfig.test_day={config.test_day}: {layout.processed_dir(dataset_dir)} "
                f"was built with {other}; bind the test day it was built with, or rebuild it with "
                f"`python -m recommendation_v4.data.preprocess --dataset-dir {dataset_dir} --force"
                f"{'' if config.test_day is None else f' --test-day {config.test_day}'}`")

        def announce(reason: str) -> None:
            waiting = "; the other ranks wait for it" if world_size() > 1 else ""
            print(f"[data] preprocessing {dataset_dir} ({reason}){waiting}. For a large "
                  f"dataset run `python -m recommendation_v4.data.preprocess --dataset-dir {dataset_dir}"
                  f"{'' if config.test_day is None else f' --test-day {config.test_day}'}` ahead of training",
                  flush=True)

        ensure_processed(dataset_dir, config=split, progress=True, announce=announce)

    run_on_rank0(prepare, shared_errors=(ConfigError, schema.DatasetError))
    return dataset_dir


@dataclasses.dataclass
class YambdaData:
    config: DataConfig
    dataset_dir: layout.Location
    train: YambdaSequenceDataset
    eval: YambdaSequenceDataset
    eval_indices: np.ndarray
    info: DistInfo

    @property
    def table_rows(self) -> dict[str, int]:
        return self.train.table_rows

    def describe(self) -> str:
        return (
            f"{self.config.dataset} at {self.dataset_dir}: {len(self.train):,} train samples, "
            f"{len(self.eval_indices):,} eval samples (of {len(self.eval):,}), history_length "
            f"{self.train.history_length}, tables {self.table_rows}"
        )

    def train_windows(self, *, window_seconds: int) -> TimeWindows:
        """The train samples grouped into time windows (days by default), in time order.

        The index is built once, by rank 0, into the processed directory and memory-mapped by every
        rank (common.data.time_windows): per-rank memory does not grow with the dataset or the ranks of
        a node. A dataset directory that cannot be written gets the in-memory index on every rank.
        """
        source = self.train.anchor_source_name()
        if source is None:
            return TimeWindows(self.train.anchor_timestamps(), window_seconds=window_seconds)
        directory = self.dataset_dir / layout.PROCESSED_DIR / WINDOW_INDEX_DIR / f"{source}-w{window_seconds}"
        count = len(self.train)

        def build() -> None:
            if not index_is_complete(directory, count=count, window_seconds=window_seconds, source=source):
                write_index(directory, timestamps=_AnchorTimestamps(self.train), window_seconds=window_seconds,
                            source=source)

        try:
            run_on_rank0(build, shared_errors=(OSError,))
        except OSError as error:
            if self.info.is_main:
                print(f"[data] window index not written under {directory} ({error}); every rank builds it in memory",
                      flush=True)
            return TimeWindows(self.train.anchor_timestamps(), window_seconds=window_seconds)
        return TimeWindows.open(directory)

    def train_window_batches(self, windows: TimeWindows, key: int, *, global_batch_size: int, seed: int) -> list[np.ndarray]:
        return window_batches(
            windows.indices(key),
            global_batch_size=global_batch_size,
            rank=self.info.rank,
            world_size=self.info.world_size,
            seed=seed,
            key=key,
        )

    def popularity_baseline_auc(self) -> float:
        """AUC of scoring each eval candidate by its item's listen_plus rate in the train split,
        on exactly the eval samples the model is evaluated on."""
        data = self.train.data
        train_rows = np.asarray(self.train.anchors, dtype=np.int64)
        items = np.asarray(data.events["item_id"][train_rows], dtype=np.int64)
        labels = np.asarray(data.events["played_ratio_pct"][train_rows]) >= schema.LISTEN_PLUS_MIN_PLAYED_PCT
        n_items = int(self.train.id_rows["item_id"])
        plays = np.bincount(items, minlength=n_items)
        wins = np.bincount(items, weights=labels, minlength=n_items)
        rate = (wins + POPULARITY_PRIOR_COUNT * labels.mean()) / (plays + POPULARITY_PRIOR_COUNT)
        eval_rows = np.asarray(self.eval.anchors, dtype=np.int64)[self.eval_indices]
        eval_items = np.asarray(data.events["item_id"][eval_rows], dtype=np.int64)
        eval_labels = np.asarray(data.events["played_ratio_pct"][eval_rows]) >= schema.LISTEN_PLUS_MIN_PLAYED_PCT
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


def prepare_data(*, config: DataConfig, model_config: HSTUFlavor, info: DistInfo, seed: int) -> YambdaData:
    dataset_dir = materialise(config)
    history_length = config.history_length or model_config.history_length
    if F.max_sequence_length(history_length) > model_config.max_seq_len:
        raise ConfigError(
            f"recommendation_v4.DataConfig.history_length={history_length} makes sequences longer than the "
            f"model's max_seq_len={model_config.max_seq_len}"
        )
    cross, entity = _table_sizes(config)
    common = dict(
        history_length=history_length,
        min_history=config.min_history,
        cross_table_rows=cross,
        entity_table_rows=entity,
        holdout_user_fraction=config.holdout_user_fraction,
    )
    processed = layout.processed_dir(dataset_dir)
    train = YambdaSequenceDataset(processed, split="train", **common)
    evaluation = YambdaSequenceDataset(processed, split="eval", **common)
    # a fixed eval subset (same on every rank and run), trimmed to a multiple of world size
    n_eval = len(evaluation)
    if config.test_day_max_samples and n_eval > config.test_day_max_samples:
        pick = np.random.default_rng(EVAL_SUBSET_SEED).choice(n_eval, config.test_day_max_samples, replace=False)
        chosen = np.sort(pick)
    else:
        chosen = np.arange(n_eval)
    chosen = chosen[: len(chosen) - len(chosen) % info.world_size]
    return YambdaData(config=config, dataset_dir=dataset_dir, train=train, eval=evaluation, eval_indices=chosen, info=info)


class CombinedSource:
    """One index space over the train split then the eval split, so one loader serves both:
    index i < len(train) is train sample i, index len(train) + j is eval sample j."""

    def __init__(self, train: YambdaSequenceDataset, evaluation: YambdaSequenceDataset) -> None:
        self.train, self.eval = train, evaluation
        self.offset = len(train)

    def get_batch(self, indices: np.ndarray):
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and indices.min() >= self.offset:
            return self.eval.get_batch(indices - self.offset)
        if indices.size and indices.max() >= self.offset:
            raise ValueError("an eval batch mixes train-split and eval-split samples")
        return self.train.get_batch(indices)


@dataclasses.dataclass
class EvalPlan:
    """Which samples an evaluation after train window T uses.

    "holdout": the fixed eval subset of the test day (the default, and what the MLPerf
    reference scores). "next_window": the samples of window T+1 (strictly in the future of
    everything trained so far), capped at `max_samples`; after the last train window, the
    test day.
    """

    data: YambdaData
    windows: TimeWindows
    mode: str
    batch_size: int
    max_samples: int
    HOLDOUT_KEY = -1

    def __post_init__(self) -> None:
        if self.batch_size % self.data.info.world_size:
            raise ConfigError(
                f"recommendation_v4.TrainConfig.eval_batch_size={self.batch_size} does not split over "
                f"{self.data.info.world_size} ranks"
            )
        self.source = CombinedSource(self.data.train, self.data.eval)
        self._train_keys = set(self.windows.keys())

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
            chosen = self.data.eval_indices + self.source.offset
        else:
            chosen = self.windows.indices(eval_key)
            if self.max_samples and chosen.size > self.max_samples:
                pick = np.random.default_rng([EVAL_SUBSET_SEED, eval_key]).choice(chosen.size, self.max_samples, replace=False)
                chosen = chosen[np.sort(pick)]
            chosen = chosen[: chosen.size - chosen.size % self.data.info.world_size]
        info = self.data.info
        return [
            rank_share(chosen[s : s + self.batch_size], rank=info.rank, world_size=info.world_size)
            for s in range(0, chosen.size, self.batch_size)
        ]
