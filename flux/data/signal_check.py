"""Is the planted text->latent signal in a synthetic FLUX dataset? Three predictors of x0, compared.

    python -m flux.data.signal_check --dataset-dir data/flux/synthetic-tiny-seed0

On the validation split, per-value MSE to x0 = (mean - 0.1159) * 0.3611 of:

- the dataset-mean predictor (the average train x0): what a model that ignores the text can do
  at best from the text's point of view (an unconditional model has nothing else);
- the oracle that knows each sample's hidden concept and attribute (planted.py): the floor;
- a ridge regression from the CLIP vector to x0, fit on train: evidence that the signal is
  recoverable from the encodings the model actually sees, not only from the hidden truth.

The samples are read through FluxArrowDataset, i.e. from the files, not from the generator.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from common import command_line
from flux.data import layout
from flux.data.planted import LATENT_SCALE, LATENT_SHIFT, PlantedWorld
from flux.data.reader import FluxArrowDataset
from flux.data.synthetic import read_generator_info, size_from_info

_BATCH = 64


@dataclasses.dataclass(frozen=True)
class SignalReport:
    num_train: int
    num_validation: int
    x0_variance: float  # per-value variance of validation x0 around its own mean
    mean_predictor_mse: float
    oracle_mse: float
    clip_probe_mse: float

    @property
    def oracle_ratio(self) -> float:
        return self.oracle_mse / self.mean_predictor_mse

    @property
    def probe_ratio(self) -> float:
        return self.clip_probe_mse / self.mean_predictor_mse

    def summary(self) -> str:
        return (
            f"x0 MSE on {self.num_validation} validation samples: "
            f"dataset-mean predictor {self.mean_predictor_mse:.4f}, "
            f"CLIP ridge probe {self.clip_probe_mse:.4f} ({self.probe_ratio:.2f}x), oracle {self.oracle_mse:.4f} "
            f"({self.oracle_ratio:.2f}x); x0 variance {self.x0_variance:.4f}"
        )


def _read(dataset: FluxArrowDataset, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(clip float32 [N, D], x0 float32 [N, C*H*W]) of the first `count` samples."""
    clips, x0s = [], []
    for start in range(0, count, _BATCH):
        batch = dataset.get_batch(np.arange(start, min(start + _BATCH, count)))
        clips.append(batch.clip.float().numpy())
        x0s.append(((batch.mean.float() - LATENT_SHIFT) * LATENT_SCALE).flatten(1).numpy())
    return np.concatenate(clips), np.concatenate(x0s)


def check_planted_signal(dataset_dir: str | Path, *, max_train: int = 2048, ridge: float = 1.0) -> SignalReport:
    dataset_dir = Path(dataset_dir)
    info = read_generator_info(dataset_dir)
    if info is None:
        raise FileNotFoundError(
            f"{dataset_dir / layout.GENERATOR_INFO_FILE} is missing: not a finished synthetic dataset"
        )
    world = PlantedWorld(size_from_info(info), seed=int(info["seed"]))
    paths = layout.synthetic_paths(dataset_dir)
    train = FluxArrowDataset(paths.train)
    validation = FluxArrowDataset(paths.validation)
    train_clip, train_x0 = _read(train, min(len(train), max_train))
    val_clip, val_x0 = _read(validation, len(validation))

    mean_x0 = train_x0.mean(axis=0)
    oracle = np.stack([world.predictable_x0(world.truth("validation", i)).reshape(-1) for i in range(len(validation))])

    def features(clip: np.ndarray) -> np.ndarray:
        return np.concatenate([clip, np.ones((len(clip), 1), dtype=np.float32)], axis=1).astype(np.float64)

    x = features(train_clip)
    weights = np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ train_x0.astype(np.float64))
    probe = features(val_clip) @ weights

    def mse(prediction: np.ndarray) -> float:
        return float(np.mean((prediction - val_x0) ** 2))

    return SignalReport(
        num_train=len(train_x0),
        num_validation=len(val_x0),
        x0_variance=float(val_x0.var(axis=0).mean()),
        mean_predictor_mse=mse(mean_x0[None]),
        oracle_mse=mse(oracle),
        clip_probe_mse=mse(probe),
    )


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "flux.data.signal_check", __doc__.splitlines()[0],
        example="python -m flux.data.signal_check --dataset-dir $MLPERF_DATA_ROOT/flux",
        docs="flux/README.md")
    parser.add_argument("--dataset-dir", required=True, type=Path)
    parser.add_argument("--max-train", type=int, default=2048, help="train samples used to fit the mean and the probe")
    args = parser.parse_args(argv)
    report = check_planted_signal(args.dataset_dir, max_train=args.max_train)
    print(report.summary())
    print(json.dumps(dataclasses.asdict(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
