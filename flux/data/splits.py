"""A whole FLUX dataset by name: generated on first use when synthetic, then opened as three parts.

    dataset_dir = materialise(data_root=root, name="synthetic-tiny-seed0")   # rank 0 only
    data = open_splits(dataset_dir)                                         # every rank
    data.shapes.check_model(context_in_dim=..., vec_in_dim=..., in_channels=..., ...)

`mlcommons` names the download under <data_root>/flux; it is never generated.
"""

from __future__ import annotations

import dataclasses

from common.data.preparation_lock import preparing
from common.object_store.location import Location, ObjectPath
from common.object_store.publish import generate_then_publish
from flux.data import layout
from flux.data.empty_encodings import EmptyEncodings, load_empty_encodings
from flux.data.reader import FluxArrowDataset
from flux.data.schema import FluxDataError
from flux.data.shapes import FluxShapes
from flux.data.synthetic import ensure_synthetic
from flux.data.synthetic_sizes import SYNTHETIC_SIZES


@dataclasses.dataclass
class FluxSplits:
    dataset_dir: Location
    train: FluxArrowDataset
    validation: FluxArrowDataset  # carries `timestep` (sample i is scored at t = timestep / 8)
    empty: EmptyEncodings  # the CFG-dropout replacement for t5 / clip

    @property
    def shapes(self) -> FluxShapes:
        return self.train.shapes

    def describe(self) -> str:
        return (
            f"{self.dataset_dir}: {len(self.train):,} train and {len(self.validation):,} validation samples, "
            f"{self.shapes.describe()}"
        )


def materialise(*, data_root: Location, name: str, generate_if_missing: bool = True) -> Location:
    """The directory of dataset `name`, generating a synthetic one that is not there yet (under an
    s3:// data root: generated in a local staging directory, then uploaded)."""
    dataset_dir = layout.dataset_dir(data_root, name)
    synthetic = layout.parse_synthetic_name(name)
    if synthetic is not None and generate_if_missing:
        size, seed = synthetic
        if size not in SYNTHETIC_SIZES:
            raise ValueError(f"dataset {name!r}: unknown synthetic size {size!r}; known: {sorted(SYNTHETIC_SIZES)}")
        content = layout.synthetic_content(name)
        if not isinstance(dataset_dir, ObjectPath):
            with preparing(dataset_dir, say=lambda line: print(line, flush=True)):
                ensure_synthetic(dataset_dir, size=size, seed=seed, content=content)
        elif not (dataset_dir / layout.GENERATOR_INFO_FILE).is_file():
            generate_then_publish(dataset_dir, lambda local: ensure_synthetic(local, size=size, seed=seed, content=content))
    return dataset_dir


def open_splits(dataset_dir: Location, *, expect: FluxShapes | None = None,
                readahead: bool = True) -> FluxSplits:
    """Opens train, validation and the empty encodings; FluxDataError when they do not fit together."""
    paths = layout.dataset_paths(dataset_dir)
    if not paths.train.is_dir():
        raise FluxDataError(
            f"{dataset_dir}: holds neither {layout.DOWNLOADED_TRAIN_DIRNAME}/ (the MLCommons download: "
            f"flux/download_dataset.sh) nor {layout.SYNTHETIC_TRAIN_DIRNAME}/ (a synthetic dataset: "
            "python -m flux.data.synthetic)"
        )
    train = FluxArrowDataset(paths.train, expect=expect, readahead=readahead)
    validation = FluxArrowDataset(paths.validation, expect=train.shapes, readahead=readahead)
    if not validation.has_timestep:
        raise FluxDataError(f"{paths.validation}: no 'timestep' column; validation samples need their eval timestep")
    empty = load_empty_encodings(paths.empty_encodings, t5_shape=train.shapes.t5_shape, clip_dim=train.shapes.clip_dim)
    return FluxSplits(dataset_dir=dataset_dir, train=train, validation=validation, empty=empty)
