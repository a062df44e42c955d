"""From gin's `flux.DataConfig` to the train and validation splits of a run.

Rank 0 generates a synthetic dataset on first use (`synthetic-<size>-seed<N>`); every rank then
opens the splits, memory-mapped, and checks that their shapes fit the model flavor. A missing
or malformed dataset is a data error on every rank, naming the file and how to get the data.
"""

from __future__ import annotations

import numpy as np

from common.distributed.collectives import run_on_rank0
from common.config.checks import ConfigError
from common.distributed.setup import DistInfo
from flux.data import layout
from flux.data.schema import FluxDataError
from flux.data.splits import FluxSplits, materialise, open_splits
from flux.model.flavors import FluxFlavor
from flux.run_config import DataConfig


def prepare_data(*, config: DataConfig, args: FluxFlavor, flavor: str) -> FluxSplits:
    def generate():
        try:
            return str(materialise(data_root=config.location, name=config.dataset,
                                   generate_if_missing=config.generate_if_missing))
        except (ValueError, FileExistsError) as error:
            raise ConfigError(f"flux.DataConfig.dataset={config.dataset!r}: {error}") from error

    run_on_rank0(generate, shared_errors=(ConfigError, FluxDataError))
    splits = open_splits(layout.dataset_dir(config.location, config.dataset))
    try:
        splits.shapes.check_model(context_in_dim=args.context_in_dim, vec_in_dim=args.vec_in_dim,
                                  in_channels=args.in_channels, data_name=config.dataset, model_name=flavor)
    except ValueError as error:
        raise ConfigError(f"flux.DataConfig.dataset / flux.TrainConfig.flavor: {error}") from error
    return splits


def validation_batches(*, count: int, info: DistInfo, batch_size: int) -> list[np.ndarray]:
    """This rank's contiguous share of the first `count` validation samples, in batches (shares
    differ by one sample at most, as the reference's split by node)."""
    mine = np.array_split(np.arange(count, dtype=np.int64), info.world_size)[info.rank]
    return [mine[start : start + batch_size] for start in range(0, len(mine), batch_size)]
