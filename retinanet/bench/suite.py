"""RetinaNet benchmark: the numbers the README quotes, measured on whatever machine runs it.

    python -m retinanet.bench.suite                  # everything
    python -m retinanet.bench.suite --only loader    # loader | train

- loader: decoded + augmented 800x800 images/s per loader worker on the `bench` synthetic data
  (1-1.5k px JPEGs, ~320 KB mean like MLPerf Storage's retinanet record), for each output the
  workers can deliver: the reference's pixels (float32, the default), the uint8 antialiased resize
  normalised to float32 in the worker, and left uint8 for the accelerator; wall-clock and per
  worker CPU-second (goal: 65/s per worker, so 8 workers feed one B200's ~505 images/s), next
  to a plain torchvision loop on one thread and the loader in-process, with the worker's share
  of the plain loop's rate (goal: 0.9);
- train: CPU training images/s (forward, backward, Adam) of the tiny flavor at the debug
  config's shape and at its own, and of the reference flavor (ResNeXt50-FPN, 800 px).
The bench data is generated under --data-root/retinanet on first use.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from common import command_line
from common.config.paths import DEFAULT_DATA_ROOT
from retinanet.data.synthetic import SYNTHETIC_SIZES, ensure_synthetic_dataset
from retinanet.bench.loader import GOAL_IMAGES_PER_S_PER_WORKER, OUTPUTS, measure_loader_images_per_s, plain_loop_images_per_s
from retinanet.data_setup import BENCHMARK_DATA_DIRNAME, synthetic_dataset_name
from retinanet.bench.training import measure_training_images_per_s


@dataclasses.dataclass(frozen=True)
class TrainShape:
    name: str
    flavor: str
    image_size: int | None  # None: the flavor's own
    batch_size: int
    steps: int
    threads: int | None  # None: torch's default
    warmup_steps: int = 1


TRAIN_SHAPES: tuple[TrainShape, ...] = (
    TrainShape("tiny_debug_config", flavor="tiny", image_size=96, batch_size=8, steps=8, threads=1),
    TrainShape("tiny", flavor="tiny", image_size=None, batch_size=8, steps=4, threads=1),
    # one untimed step would double a ~40 s measurement; a single step's allocations are a small share of it
    TrainShape("reference", flavor="reference", image_size=None, batch_size=1, steps=1, threads=None, warmup_steps=0),
)


def bench_dataset(data_root: Path) -> Path:
    return ensure_synthetic_dataset(
        data_root / BENCHMARK_DATA_DIRNAME / synthetic_dataset_name("bench", 0),
        size=SYNTHETIC_SIZES["bench"],
        seed=0,
        workers=2,
    )


def bench_loader(dataset_dir: Path, *, num_images: int, workers: int, image_size: int = 800, rounds: int = 3) -> dict:
    """Per output type: the plain torchvision loop on one thread, the loader in-process and through
    `workers` worker(s), each measured in alternation `rounds` times (a shared machine drifts over
    seconds); the medians, and the worker's rate as a fraction of the plain loop's (goal >= 0.9)."""
    out: dict = {"goal_images_per_s_per_worker": GOAL_IMAGES_PER_S_PER_WORKER, "image_size": image_size}
    for output in OUTPUTS:
        kwargs = dict(image_size=image_size, num_images=num_images, output=output)
        plains, in_process, through_workers = [], [], []
        for _ in range(rounds):
            plains.append(plain_loop_images_per_s(dataset_dir, **kwargs))
            in_process.append(measure_loader_images_per_s(dataset_dir, num_workers=0, **kwargs).images_per_s)
            through_workers.append(measure_loader_images_per_s(dataset_dir, num_workers=workers, **kwargs))
        plain = sorted(plains)[rounds // 2]
        r = sorted(through_workers, key=lambda x: x.images_per_s)[rounds // 2]
        out[output] = {
            "plain_loop_images_per_s": round(plain, 1),
            "in_process_images_per_s": round(sorted(in_process)[rounds // 2], 1),
            "workers": workers,
            "images_per_s_per_worker": round(r.images_per_s_per_worker, 1),
            "images_per_worker_cpu_s": round(r.images_per_cpu_s, 1),
            "worker_over_plain_loop": round(r.images_per_s_per_worker / plain, 3),
            "rounds_plain_and_worker": [[round(p, 1), round(w.images_per_s_per_worker, 1)]
                                        for p, w in zip(plains, through_workers)],
            "mean_jpeg_bytes": round(r.mean_jpeg_bytes),
        }
    return out


def bench_train(shapes: tuple[TrainShape, ...] = TRAIN_SHAPES) -> dict:
    out = {}
    default_threads = torch.get_num_threads()
    for shape in shapes:
        torch.set_num_threads(shape.threads or default_threads)
        try:
            r = measure_training_images_per_s(
                flavor_name=shape.flavor,
                image_size=shape.image_size,
                batch_size=shape.batch_size,
                num_steps=shape.steps,
                warmup_steps=shape.warmup_steps,
            )
        finally:
            torch.set_num_threads(default_threads)
        out[shape.name] = {
            "images_per_s": round(r.images_per_s, 2),
            "s_per_step": round(r.seconds_per_step, 3),
            "image_size": r.image_size,
            "batch_size": r.batch_size,
            "threads": r.threads,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "retinanet.bench.suite", __doc__,
        example="python -m retinanet.bench.suite --only loader",
        docs="retinanet/README.md")
    parser.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT)
    parser.add_argument("--only", choices=["loader", "train"], action="append")
    parser.add_argument("--loader-images", type=int, default=512, help="images timed per loader measurement")
    parser.add_argument("--loader-workers", type=int, default=1)
    args = parser.parse_args(argv)
    results = {}
    for name in args.only or ["loader", "train"]:
        t0 = time.perf_counter()
        if name == "loader":
            dataset_dir = bench_dataset(args.data_root)
            results[name] = bench_loader(dataset_dir, num_images=args.loader_images, workers=args.loader_workers)
        else:
            results[name] = bench_train()
        print(f"[{name}] ({time.perf_counter() - t0:.0f}s) {json.dumps(results[name])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
