"""Synthetic OpenImages-MLPerf dataset: real JPEG files and COCO json in the reference layout.

    python -m retinanet.data.synthetic --size tiny --seed 0 --out DIR
    python -m retinanet.data.synthetic --size reference --out DIR --workers 8 --shard 0/2   # one node of two

Every image is a pure function of (seed, split, index), so the output is byte-identical for a
seed whatever the number of worker processes or shards (common/data/generation.py: files
written whole, resumable, the COCO json and generator.json written once all images exist).
Objects of each class share a shape and colour (see synthetic_drawing.py) at annotated boxes,
so a detector's mAP rises as it learns.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from common import command_line
from common.config.paths import DEFAULT_DATA_ROOT
from common.data import generation, generation_to_objects
from common.data.generation import LEARNABLE, STORAGE, FileJob, write_text_whole
from retinanet.data import layout
from retinanet.data.jpeg_bank import JpegBank
from retinanet.data.openimages_classes import MLPERF_OPENIMAGES_CLASSES
from retinanet.data.synthetic_drawing import class_appearances, render_image, sample_object_boxes

_SPLIT_CODES = {layout.TRAIN_SPLIT: 0, layout.VALIDATION_SPLIT: 1}
# Landscape photos dominate OpenImages; portrait, wide and square ones make up the rest.
_ASPECT_RATIOS = ((4, 3), (3, 4), (3, 2), (2, 3), (16, 9), (1, 1))
_ASPECT_WEIGHTS = (0.35, 0.15, 0.15, 0.1, 0.15, 0.1)


@dataclasses.dataclass(frozen=True)
class SyntheticSize:
    """How much to generate and what the pictures look like."""

    num_train: int
    num_validation: int
    num_classes: int
    long_side: tuple[int, int]  # inclusive range of the longer image side, pixels
    jpeg_quality: tuple[int, int]
    noise_std: tuple[float, float]  # pixel noise amplitude range; drives JPEG size
    max_objects: int
    object_fraction: tuple[float, float]  # object side as a fraction of the shorter image side

    def __post_init__(self) -> None:
        if self.num_train < 1 or self.num_validation < 1:
            raise ValueError("num_train and num_validation must be >= 1")
        if not 1 <= self.num_classes <= len(MLPERF_OPENIMAGES_CLASSES):
            raise ValueError(f"num_classes must be in [1, {len(MLPERF_OPENIMAGES_CLASSES)}], got {self.num_classes}")
        if not 32 <= self.long_side[0] <= self.long_side[1]:
            raise ValueError(f"long_side must be an increasing range >= 32, got {self.long_side}")
        if not 1 <= self.jpeg_quality[0] <= self.jpeg_quality[1] <= 100:
            raise ValueError(f"jpeg_quality must be a range within [1, 100], got {self.jpeg_quality}")
        if self.max_objects < 1:
            raise ValueError("max_objects must be >= 1")


_BENCH_LOOK = dict(
    num_classes=264,
    long_side=(1024, 1536),
    jpeg_quality=(85, 95),
    noise_std=(5.0, 10.0),
    max_objects=6,
    object_fraction=(0.08, 0.45),
)
SYNTHETIC_SIZES: dict[str, SyntheticSize] = {
    # Seconds to generate: unit tests and the tiny CPU training config.
    "tiny": SyntheticSize(
        num_train=32,
        num_validation=16,
        num_classes=4,
        long_side=(160, 320),
        jpeg_quality=(75, 95),
        noise_std=(2.0, 8.0),
        max_objects=3,
        object_fraction=(0.2, 0.5),
    ),
    # A few minutes of CPU training on small pictures.
    "small": SyntheticSize(
        num_train=1024,
        num_validation=128,
        num_classes=6,
        long_side=(192, 384),
        jpeg_quality=(75, 95),
        noise_std=(2.0, 8.0),
        max_objects=4,
        object_fraction=(0.15, 0.5),
    ),
    # Reference-like files (~1-1.5k px, ~320 KB mean) for loader throughput.
    "bench": SyntheticSize(num_train=512, num_validation=64, **_BENCH_LOOK),
    # The reference subset's image counts: about 380 GB, for storage sizing runs.
    "reference": SyntheticSize(
        num_train=layout.REFERENCE_NUM_TRAIN_IMAGES,
        num_validation=layout.REFERENCE_NUM_VALIDATION_IMAGES,
        **_BENCH_LOOK,
    ),
}


@dataclasses.dataclass(frozen=True)
class ByteSizeStats:
    count: int
    total: int
    mean: float
    p50: float
    p90: float
    min: int
    max: int

    @classmethod
    def of(cls, sizes: list[int]) -> ByteSizeStats:
        values = np.asarray(sizes, dtype=np.int64)
        return cls(
            count=len(values),
            total=int(values.sum()),
            mean=float(values.mean()),
            p50=float(np.percentile(values, 50)),
            p90=float(np.percentile(values, 90)),
            min=int(values.min()),
            max=int(values.max()),
        )


@dataclasses.dataclass(frozen=True)
class GenerationReport:
    out_dir: Path
    size: SyntheticSize
    seed: int
    num_boxes: dict[str, int]
    jpeg_bytes: dict[str, ByteSizeStats]

    def summary(self) -> str:
        lines = [
            f"synthetic OpenImages-MLPerf dataset at {self.out_dir} (seed {self.seed}, {self.size.num_classes} classes)"
        ]
        for split, stats in self.jpeg_bytes.items():
            lines.append(
                f"  {split}: {stats.count} images, {self.num_boxes[split]} boxes, JPEG bytes mean {stats.mean:,.0f} "
                f"p50 {stats.p50:,.0f} p90 {stats.p90:,.0f} "
                f"(min {stats.min:,}, max {stats.max:,}, total {stats.total:,})"
            )
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class _ImageResult:
    file_name: str
    width: int
    height: int
    objects: list[tuple[int, tuple[int, int, int, int]]]  # (label, inclusive pixel box)
    num_bytes: int


def image_file_stem(*, seed: int, split: str, index: int) -> str:
    """16 hex digits, like OpenImages image ids, stable for (seed, split, index)."""
    return hashlib.blake2b(f"{seed}:{split}:{index}".encode(), digest_size=8).hexdigest()


def _image_layout(size: SyntheticSize, *, seed: int, split: str, index: int):
    """The image's random stream, its size and its annotated objects (cheap: no pixels). The
    stream continues into the drawing, so the annotations are recomputed from it exactly."""
    rng = np.random.default_rng([seed, _SPLIT_CODES[split], index])
    long_side = int(rng.integers(size.long_side[0], size.long_side[1] + 1))
    ratio_w, ratio_h = _ASPECT_RATIOS[int(rng.choice(len(_ASPECT_RATIOS), p=_ASPECT_WEIGHTS))]
    if ratio_w >= ratio_h:
        width, height = long_side, max(16, round(long_side * ratio_h / ratio_w))
    else:
        width, height = max(16, round(long_side * ratio_w / ratio_h)), long_side
    boxes = sample_object_boxes(
        rng,
        width=width,
        height=height,
        num_objects=int(rng.integers(1, size.max_objects + 1)),
        min_fraction=size.object_fraction[0],
        max_fraction=size.object_fraction[1],
    )
    objects = [(int(rng.integers(0, size.num_classes)), box) for box in boxes]
    return rng, width, height, objects


def _encode_image(size: SyntheticSize, *, seed: int, split: str, index: int) -> bytes:
    """The learnable content: the picture drawn (objects in their class's look) and encoded."""
    rng, width, height, objects = _image_layout(size, seed=seed, split=split, index=index)
    picture = render_image(
        rng,
        width=width,
        height=height,
        objects=objects,
        appearances=class_appearances(size.num_classes),
        noise_std=float(rng.uniform(*size.noise_std)),
    )
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=int(rng.integers(size.jpeg_quality[0], size.jpeg_quality[1] + 1)))
    return buffer.getvalue()


@functools.cache
def _jpeg_bank(size: SyntheticSize, seed: int) -> JpegBank:
    """One bank per process and (look, seed): drawn on first use (~1 s), then every image is cut from it."""
    return JpegBank(seed=seed, qualities=range(size.jpeg_quality[0], size.jpeg_quality[1] + 1),
                    noise_std=size.noise_std, num_classes=size.num_classes, max_objects=size.max_objects,
                    object_fraction=size.object_fraction, long_side=size.long_side[1])


def _compose_image(size: SyntheticSize, *, seed: int, split: str, index: int) -> bytes:
    """The storage content: the same width, height, noise level and quality as the learnable
    image, its bytes strung together from the bank's pre-encoded segments (nothing to learn)."""
    rng, width, height, _ = _image_layout(size, seed=seed, split=split, index=index)
    noise_std = float(rng.uniform(*size.noise_std))
    quality = int(rng.integers(size.jpeg_quality[0], size.jpeg_quality[1] + 1))
    return _jpeg_bank(size, seed).compose(rng, width=width, height=height, quality=quality, noise_std=noise_std)


# Bytes per pixel of the JPEGs, for estimates only (progress, --dry-run, --help): measured mean
# 324,401 B for the `bench` look (1024-1536 px long side, ~1.2 Mpx).
_ESTIMATED_BYTES_PER_PIXEL = 0.26


def estimated_image_bytes(size: SyntheticSize) -> int:
    long_side = sum(size.long_side) / 2
    return int(_ESTIMATED_BYTES_PER_PIXEL * long_side * long_side * 0.75)


@dataclasses.dataclass(frozen=True)
class SyntheticPlan:
    """The dataset as common.data.generation writes it: one job per JPEG, the COCO json of both
    splits and generator.json at the end. `content`: LEARNABLE draws every picture (objects a
    detector learns), STORAGE cuts it from a bank of pre-encoded segments (jpeg_bank.py)."""

    size: SyntheticSize
    seed: int
    content: str = LEARNABLE

    def __post_init__(self) -> None:
        if self.content not in (LEARNABLE, STORAGE):
            raise ValueError(f"content must be {LEARNABLE!r} or {STORAGE!r}, got {self.content!r}")

    @property
    def name(self) -> str:
        return f"retinanet synthetic (seed {self.seed}{', storage content' if self.content == STORAGE else ''})"

    def settings(self) -> dict[str, Any]:
        settings = {"generator": "retinanet.data.synthetic", "seed": self.seed,
                    "size": json.loads(json.dumps(dataclasses.asdict(self.size)))}
        # named only when it is not the learnable content, so the datasets written before it match
        return settings if self.content == LEARNABLE else {**settings, "content": self.content}

    def _counts(self) -> tuple[tuple[str, int], ...]:
        return ((layout.TRAIN_SPLIT, self.size.num_train), (layout.VALIDATION_SPLIT, self.size.num_validation))

    def jobs(self) -> list[FileJob]:
        estimate = estimated_image_bytes(self.size)
        jobs = []
        for split, count in self._counts():
            images = layout.split_paths(Path(), split).images_dir
            for index in range(count):
                stem = image_file_stem(seed=self.seed, split=split, index=index)
                jobs.append(FileJob(relpath=str(images / f"{stem}.jpg"), nbytes=estimate, key=(split, index)))
        return jobs

    def write(self, job: FileJob, path: Path) -> int:
        split, index = job.key
        encode = _encode_image if self.content == LEARNABLE else _compose_image
        data = encode(self.size, seed=self.seed, split=split, index=index)
        path.write_bytes(data)
        return len(data)

    def results(self, out_dir: Path, split: str, count: int) -> list[_ImageResult]:
        images_dir = layout.split_paths(out_dir, split).images_dir
        results = []
        for index in range(count):
            _, width, height, objects = _image_layout(self.size, seed=self.seed, split=split, index=index)
            file_name = image_file_stem(seed=self.seed, split=split, index=index) + ".jpg"
            results.append(_ImageResult(file_name=file_name, width=width, height=height, objects=objects,
                                        num_bytes=(images_dir / file_name).stat().st_size))
        return results

    def finalize(self, out_dir: Path) -> str:
        return self.report(out_dir).summary()

    def report(self, out_dir: Path) -> GenerationReport:
        jpeg_bytes: dict[str, ByteSizeStats] = {}
        num_boxes: dict[str, int] = {}
        for split, count in self._counts():
            results = self.results(out_dir, split, count)
            paths = layout.split_paths(out_dir, split)
            paths.annotations_file.parent.mkdir(parents=True, exist_ok=True)
            _write_json_atomically(paths.annotations_file,
                                   _coco_json(results, num_classes=self.size.num_classes, split=split, seed=self.seed))
            jpeg_bytes[split] = ByteSizeStats.of([r.num_bytes for r in results])
            num_boxes[split] = sum(len(r.objects) for r in results)
        # last: its presence says the dataset is complete (ensure_synthetic_dataset)
        _write_json_atomically(out_dir / layout.GENERATOR_INFO_FILENAME, {
            **self.settings(),
            "num_boxes": num_boxes,
            "jpeg_bytes": {split: dataclasses.asdict(s) for split, s in jpeg_bytes.items()},
        })
        return GenerationReport(out_dir=out_dir, size=self.size, seed=self.seed, num_boxes=num_boxes,
                                jpeg_bytes=jpeg_bytes)

    def is_complete(self, out_dir: Path) -> bool:
        return (out_dir / layout.GENERATOR_INFO_FILENAME).is_file()


def _coco_json(results: list[_ImageResult], *, num_classes: int, split: str, seed: int) -> dict[str, Any]:
    images, annotations = [], []
    for image_id, result in enumerate(results, start=1):
        images.append({"id": image_id, "file_name": result.file_name, "width": result.width, "height": result.height})
        for label, (x0, y0, x1, y1) in result.objects:
            width, height = x1 - x0 + 1, y1 - y0 + 1  # inclusive pixel box -> continuous extent
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": label + 1,
                    "bbox": [x0, y0, width, height],
                    "area": width * height,
                    "iscrowd": 0,
                    "IsGroupOf": 0,
                }
            )
    categories = [
        {"id": label + 1, "name": MLPERF_OPENIMAGES_CLASSES[label], "supercategory": None}
        for label in range(num_classes)
    ]
    info = {"description": f"synthetic OpenImages-MLPerf {split} split", "version": "1.0", "seed": seed}
    return {"info": info, "licenses": [], "categories": categories, "images": images, "annotations": annotations}


def _write_json_atomically(path: Path, content: dict[str, Any]) -> None:
    write_text_whole(path, json.dumps(content, separators=(",", ":")))


def _check_overwrite(out_dir: Path, *, overwrite: bool) -> None:
    info_file = out_dir / layout.GENERATOR_INFO_FILENAME
    if any(layout.split_paths(out_dir, split).annotations_file.exists() for split in layout.SPLITS):
        if not overwrite:
            raise FileExistsError(f"{out_dir} already holds a dataset; pass overwrite=True (--overwrite) to replace it")
        if not info_file.exists():
            # Never delete a directory this generator did not write (it may be the real download).
            raise FileExistsError(
                f"{out_dir} holds a dataset without {layout.GENERATOR_INFO_FILENAME}; refusing to overwrite"
            )
        for split in layout.SPLITS:
            shutil.rmtree(out_dir / split, ignore_errors=True)
        info_file.unlink()


def generate_synthetic_dataset(
    out_dir: str | Path,
    *,
    size: SyntheticSize,
    seed: int,
    workers: int = 1,
    progress: bool | None = None,
    overwrite: bool = False,
    content: str = LEARNABLE,
) -> GenerationReport:
    """Writes both splits under `out_dir` in one go (all shards); the COCO json files and
    generator.json are written last, atomically."""
    out_dir = Path(out_dir)
    _check_overwrite(out_dir, overwrite=overwrite)
    show_progress = (size.num_train + size.num_validation > 200) if progress is None else progress
    plan = SyntheticPlan(size=size, seed=seed, content=content)
    generation.generate(plan, out_dir, workers=workers, progress=show_progress, finalize=False, overwrite=overwrite,
                        log=lambda line: None)
    return plan.report(out_dir)


def ensure_synthetic_dataset(out_dir: str | Path, *, size: SyntheticSize, seed: int, workers: int = 1,
                             content: str = LEARNABLE) -> Path:
    """Generates the dataset unless `out_dir` already holds the one these arguments describe."""
    out_dir = Path(out_dir)
    info_file = out_dir / layout.GENERATOR_INFO_FILENAME
    if info_file.exists():
        info = json.loads(info_file.read_text())
        if (info.get("seed") == seed and info.get("size") == json.loads(json.dumps(dataclasses.asdict(size)))
                and info.get("content", LEARNABLE) == content):
            return out_dir
        raise FileExistsError(
            f"{out_dir} holds a synthetic dataset made with other settings ({info_file}); "
            "choose another directory or regenerate it with --overwrite"
        )
    generate_synthetic_dataset(out_dir, size=size, seed=seed, workers=workers, content=content)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "retinanet.data.synthetic", __doc__.splitlines()[0],
        example="python -m retinanet.data.synthetic --size tiny",
        docs="docs/datasets.md",
        epilog=generation.sizes_epilog([
            (name, size.num_train, estimated_image_bytes(size),
            estimated_image_bytes(size) * (size.num_train + size.num_validation))
            for name, size in SYNTHETIC_SIZES.items()]))
    generation.add_arguments(parser, sizes=list(SYNTHETIC_SIZES), default_size="tiny")
    parser.add_argument("--num-classes", type=int, help="override the size's class count (at most 264)")
    args = parser.parse_args(argv)
    name = f"synthetic-{args.size}-seed{args.seed}{'-storage' if args.content == STORAGE else ''}"
    generation_to_objects.default_out(args, DEFAULT_DATA_ROOT, lambda root: root / "retinanet" / name)
    if generation_to_objects.writes_to_objects(args):
        return generation_to_objects.generate_to_objects(main, argv, args)
    overrides = {
        key: value
        for key, value in (
            ("num_train", args.num_train),
            ("num_validation", args.num_validation),
            ("num_classes", args.num_classes),
        )
        if value is not None
    }
    size = dataclasses.replace(SYNTHETIC_SIZES[args.size], **overrides)
    if args.fill_memory_ratio:
        num_train = generation.samples_to_fill(args.fill_memory_ratio, estimated_image_bytes(size))
        print(f"--fill-memory-ratio {args.fill_memory_ratio:g}: {num_train:,} training images of about "
              f"{estimated_image_bytes(size):,} B fill {args.fill_memory_ratio:g} x this host's "
              f"{generation.host_memory_bytes() / 2**30:,.1f} GiB of memory")
        size = dataclasses.replace(size, num_train=num_train)
    out_dir = args.out
    plan = SyntheticPlan(size=size, seed=args.seed, content=args.content)
    if not (args.dry_run or args.finalize):
        if args.overwrite and args.shard.count > 1:
            raise SystemExit("--overwrite replaces the whole dataset: run it once without --shard, or give each "
                             "generation its own --out")
        if args.overwrite:
            _check_overwrite(out_dir, overwrite=True)
        elif plan.is_complete(out_dir) and not args.overwrite:
            raise SystemExit(f"{out_dir} already holds a complete synthetic dataset; pass --overwrite to replace it")
    return generation.run_command(plan, out_dir, args)


if __name__ == "__main__":
    raise SystemExit(main())
