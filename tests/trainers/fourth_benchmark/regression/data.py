"""The regression's dataset: sample_<i>.npy files of 16 features and a target, written on first use."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from common.data.phases import ONE_TIME, PER_WINDOW, measure_phase
from common.data.reads import note_reads, note_records

FEATURES = 16


class MissingData(FileNotFoundError):
    """The dataset is not there; names the folder."""


def generate(folder: Path, *, samples: int, seed: int = 0) -> Path:
    """Writes `samples` files with target = features . w + noise (w fixed by the seed)."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=FEATURES).astype(np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(samples):
        x = rng.normal(size=FEATURES).astype(np.float32)
        y = np.float32(x @ weights + 0.01 * rng.normal())
        np.save(folder / f"sample_{index:06d}.npy", np.append(x, y))
    return folder


class NpySamples:
    """One file per sample, read whole, as the shared loader's source."""

    def __init__(self, folder: Path) -> None:
        self.files = sorted(Path(folder).glob("sample_*.npy"))
        if not self.files:
            raise MissingData(f"{folder}: no sample_*.npy files (generate them with regression.data.generate)")
        self.folder = Path(folder)

    def __len__(self) -> int:
        return len(self.files)

    def get_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for index in np.asarray(indices, dtype=np.int64):
            path = self.files[index]
            raw = path.read_bytes()
            note_reads(str(path), 0, len(raw))
            note_records([len(raw)])
            rows.append(np.load(path))
        batch = torch.from_numpy(np.stack(rows))
        return batch[:, :FEATURES], batch[:, FEATURES]

    def storage_description(self) -> dict:
        sizes = [path.stat().st_size for path in self.files]
        return {"format": "npy", "access": "read", "root": str(self.folder), "files": len(self.files),
                "bytes": sum(sizes), "bytes_exact": True, "samples": len(self.files),
                "file_bytes_mean": float(np.mean(sizes)), "file_bytes_stdev": float(np.std(sizes))}


def build_index(folder: Path) -> Path:
    """A one-time phase on first use: every sample file read once, their sizes written to index.npy beside them."""
    index = folder / "index.npy"
    if index.exists():
        return index
    with measure_phase("index_build", ONE_TIME) as phase:
        sizes = []
        for path in sorted(folder.glob("sample_*.npy")):
            sizes.append(len(path.read_bytes()))
            phase.read(sizes[-1])
        np.save(index, np.asarray(sizes, dtype=np.int64))
        phase.wrote(index)
    return index


def scanning_index(index: Path, build_window: Callable[[int], list]) -> Callable[[int], list]:
    """`build_window` with a per-window phase before it: the whole index read, as a window's selection would."""
    def build(key: int) -> list:
        with measure_phase("window_scan", PER_WINDOW, window=key) as phase:
            phase.read(len(index.read_bytes()))
            return build_window(key)

    return build
