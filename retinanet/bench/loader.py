"""Decoded + augmented images per second per loader worker, at the training image size.

    python -m retinanet.bench.loader --num-workers 1 --image-size 800

Without --dataset-dir it measures on the synthetic "bench" dataset (JPEGs of ~1-1.5k px and
~320 KB mean, like the MLPerf Storage retinanet_b200 record size), generating it on first use.
The goal per worker is 65 images/s: 8 workers then feed the 505 images/s one B200 consumes.
`--output` picks what the workers deliver (`OUTPUTS`): the reference's pixels (the default), or
the uint8 antialiased resize, normalised in the loader or left uint8 for the accelerator.
"""

from __future__ import annotations

import dataclasses
import gc
import resource
import time
from pathlib import Path

import numpy as np
import torch
import torchvision.transforms.v2.functional as TF

from common import command_line
from common.data.loader import stream_batches

from retinanet.data import layout
from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset
from retinanet.data.transforms import IMAGENET_MEAN, IMAGENET_STD, decode_jpeg_rgb, normalize_imagenet
from retinanet.data.synthetic import SYNTHETIC_SIZES, ensure_synthetic_dataset

# Under the repository's git-ignored data/ folder, wherever the command runs from.
DEFAULT_BENCH_DIR = Path(__file__).resolve().parents[2] / "data" / "retinanet" / "synthetic-bench-seed0"
GOAL_IMAGES_PER_S_PER_WORKER = 65.0
_PREFETCH_FACTOR = 2
# what a worker delivers -> its LoaderSettings
OUTPUTS: dict[str, dict] = {
    "reference": dict(resize="reference", normalize=True),  # float32, the reference's pixels
    "float32_normalised": dict(resize="uint8_antialias", normalize=True),
    "uint8": dict(resize="uint8_antialias", normalize=False),  # normalised on the accelerator
}


@dataclasses.dataclass(frozen=True)
class LoaderThroughput:
    images_per_s: float
    images_per_s_per_worker: float
    num_workers: int
    num_images: int
    seconds: float
    # Images per CPU-second of loader process time: what one worker reaches on a core of its
    # own, independent of other jobs sharing the machine (wall-clock rates are not).
    images_per_cpu_s: float
    mean_jpeg_bytes: float
    image_size: int
    output: str  # a key of OUTPUTS

    def summary(self) -> str:
        return (
            f"retinanet loader: {self.images_per_s_per_worker:.1f} images/s per worker wall-clock, "
            f"{self.images_per_cpu_s:.1f} images per worker CPU-second "
            f"({self.images_per_s:.1f} images/s with {self.num_workers} worker(s), {self.num_images} images, "
            f"{self.image_size}x{self.image_size}, mean JPEG {self.mean_jpeg_bytes:,.0f} B, "
            f"{self.output} output; "
            f"goal {GOAL_IMAGES_PER_S_PER_WORKER:.0f}/s per worker)"
        )


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timing_records(dataset_dir: str | Path, *, split: str, image_size: int, output: str, count: int):
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(OUTPUTS)}, got {output!r}")
    source = OpenImagesDetectionDataset.from_split(
        Path(dataset_dir), split, settings=LoaderSettings(image_size=image_size, augment=True, **OUTPUTS[output])
    )
    # Cycle the split when it is smaller than the run; files then come from the page cache, which
    # is what a loader-bound (not storage-bound) measurement wants.
    records = source.records.take(np.arange(count) % len(source.records))
    return OpenImagesDetectionDataset(records, images_dir=source.images_dir, categories=source.categories,
                                      settings=source.settings)


def measure_loader_images_per_s(
    dataset_dir: str | Path,
    *,
    image_size: int = 800,
    num_images: int = 512,
    num_workers: int = 1,
    batch_size: int = 8,
    split: str = layout.TRAIN_SPLIT,
    output: str = "reference",
) -> LoaderThroughput:
    """Times num_images through the trainers' loader (common.data.loader) once it runs steadily."""
    if num_images < batch_size:
        raise ValueError(f"num_images ({num_images}) must be >= batch_size ({batch_size})")
    # Drain start-up, the batches prefetched meanwhile and the filling of each worker's pool of
    # reused batch buffers (common.data.batch_arena), so the clock starts in steady state.
    warmup_batches = (4 + _PREFETCH_FACTOR) * max(1, num_workers)
    total = batch_size * warmup_batches + num_images
    dataset = _timing_records(dataset_dir, split=split, image_size=image_size, output=output, count=total)
    index_batches = [np.arange(start, start + batch_size) for start in range(0, total - batch_size + 1, batch_size)]
    children_cpu_before = _children_cpu_seconds()
    process_cpu_before = time.process_time()
    batches = stream_batches(dataset, index_batches, num_workers=num_workers, prefetch_factor=_PREFETCH_FACTOR)
    for _ in range(warmup_batches):
        next(batches)
    counted = 0
    num_bytes = 0
    start = time.perf_counter()
    for batch in batches:
        counted += len(batch)
        num_bytes += batch.num_bytes
    seconds = time.perf_counter() - start
    # Closing the loader and collecting it joins the workers; only then is their CPU time in RUSAGE_CHILDREN.
    del batches
    gc.collect()
    if num_workers > 0:
        cpu_seconds = _children_cpu_seconds() - children_cpu_before
    else:
        cpu_seconds = time.process_time() - process_cpu_before
    images_per_s = counted / seconds
    return LoaderThroughput(
        images_per_s=images_per_s,
        images_per_s_per_worker=images_per_s / max(1, num_workers),
        num_workers=num_workers,
        num_images=counted,
        seconds=seconds,
        images_per_cpu_s=total / max(cpu_seconds, 1e-9),
        mean_jpeg_bytes=num_bytes / max(1, counted),
        image_size=image_size,
        output=output,
    )


def plain_loop_images_per_s(
    dataset_dir: str | Path, *, image_size: int = 800, num_images: int = 256, output: str = "reference",
    split: str = layout.TRAIN_SPLIT,
) -> float:
    """What one thread does with torch and torchvision alone, image after image: read, decode_jpeg
    (to RGB), flip every other image, then for "reference" x / 255, normalise and interpolate
    (bilinear, no antialias), else resize(antialias=True) and (float32_normalised) normalise; the
    yardstick a loader worker is held to.

    No dataset, annotations, collation or transport: a worker delivering batches at this rate
    spends nothing on anything but the images. One intra-op thread, as in a loader worker.
    """
    dataset = _timing_records(dataset_dir, split=split, image_size=image_size, output=output, count=num_images)
    paths = [dataset.images_dir / record.file_name for record in dataset.records]
    mean, std = torch.tensor(IMAGENET_MEAN).view(3, 1, 1), torch.tensor(IMAGENET_STD).view(3, 1, 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        images = []
        start = time.perf_counter()
        for i, path in enumerate(paths):
            image = decode_jpeg_rgb(torch.from_numpy(np.fromfile(path, dtype=np.uint8)))
            if i % 2:
                image = image.flip(-1)
            if output == "reference":
                image = (image.to(torch.float32).div(255) - mean) / std
                image = torch.nn.functional.interpolate(image[None], size=[image_size, image_size], mode="bilinear",
                                                        align_corners=False)[0]
            else:
                image = TF.resize(image, [image_size, image_size], antialias=True)
                if output == "float32_normalised":
                    image = normalize_imagenet(image)
            images.append(image)
            if len(images) == 8:  # keep memory flat, as a consumer of batches would
                images.clear()
        return len(paths) / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "retinanet.bench.loader", __doc__.splitlines()[0],
        example="python -m retinanet.bench.loader --num-workers 1",
        docs="retinanet/README.md")
    parser.add_argument("--dataset-dir", type=Path, help=f"dataset to read (default: generate {DEFAULT_BENCH_DIR})")
    parser.add_argument("--image-size", type=int, default=800)
    parser.add_argument("--num-images", type=int, default=512)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--generator-workers", type=int, default=2, help="processes generating the bench dataset")
    parser.add_argument("--output", choices=sorted(OUTPUTS), default="reference",
                        help="reference: the reference's pixels (float32); float32_normalised / uint8: the faster "
                             "uint8 antialiased resize, normalised in the loader or on the accelerator")
    args = parser.parse_args(argv)
    dataset_dir = args.dataset_dir
    if dataset_dir is None:
        dataset_dir = ensure_synthetic_dataset(
            DEFAULT_BENCH_DIR, size=SYNTHETIC_SIZES["bench"], seed=0, workers=args.generator_workers
        )
    result = measure_loader_images_per_s(
        dataset_dir,
        image_size=args.image_size,
        num_images=args.num_images,
        num_workers=args.num_workers,
        batch_size=args.batch_size,
        output=args.output,
    )
    print(result.summary())
    plain = plain_loop_images_per_s(dataset_dir, image_size=args.image_size, num_images=args.num_images,
                                    output=args.output)
    print(f"plain loop (one thread, torchvision alone): {plain:.1f} images/s; loader worker / plain loop = "
          f"{result.images_per_s_per_worker / plain:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
