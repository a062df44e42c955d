"""Training images per second of a RetinaNet flavor: forward, backward and an Adam step.

    python -m retinanet.bench.training --flavor tiny --batch-size 8 --steps 5

Inputs are random normalised images with a few random boxes each, so the number isolates the
model's compute from the loader (measured separately by retinanet.bench.loader).
"""

from __future__ import annotations

import dataclasses
import time

import torch

from common import command_line
from retinanet.model.detector import build_retinanet
from retinanet.model.flavors import FLAVORS, RetinaNetFlavor, get_flavor


@dataclasses.dataclass(frozen=True)
class TrainingThroughput:
    flavor: str
    images_per_s: float
    seconds_per_step: float
    batch_size: int
    image_size: int
    num_steps: int
    device: str
    threads: int

    def summary(self) -> str:
        return (
            f"retinanet training ({self.flavor}, {self.image_size}px, batch {self.batch_size}, {self.device}, "
            f"{self.threads} threads): {self.images_per_s:.2f} images/s ({self.seconds_per_step:.3f} s/step)"
        )


def _random_targets(
    generator: torch.Generator, *, batch_size: int, flavor: RetinaNetFlavor, device: torch.device
) -> list[dict[str, torch.Tensor]]:
    targets = []
    size = flavor.image_size
    for _ in range(batch_size):
        count = int(torch.randint(1, 5, (), generator=generator))
        corners = torch.rand(count, 2, generator=generator) * size * 0.7
        sides = torch.rand(count, 2, generator=generator) * size * 0.25 + size * 0.05
        boxes = torch.cat([corners, corners + sides], dim=1).clamp(max=size)
        labels = torch.randint(0, flavor.num_classes, (count,), generator=generator)
        targets.append({"boxes": boxes.to(device), "labels": labels.to(device)})
    return targets


def measure_training_images_per_s(
    *,
    flavor_name: str = "tiny",
    image_size: int | None = None,
    batch_size: int = 8,
    num_steps: int = 5,
    warmup_steps: int = 1,
    device: str = "cpu",
    channels_last: bool = False,
    seed: int = 0,
) -> TrainingThroughput:
    """Times num_steps optimizer steps after warmup_steps untimed ones (at the flavor's size unless image_size)."""
    if batch_size < 1 or num_steps < 1 or warmup_steps < 0:
        raise ValueError("batch_size and num_steps must be >= 1 and warmup_steps >= 0")
    flavor = get_flavor(flavor_name)
    if image_size is not None:
        flavor = dataclasses.replace(flavor, image_size=image_size)
    torch_device = torch.device(device)
    torch.manual_seed(seed)
    model = build_retinanet(flavor, channels_last=channels_last).to(torch_device).train()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch_size, 3, flavor.image_size, flavor.image_size, generator=generator).to(torch_device)
    targets = _random_targets(generator, batch_size=batch_size, flavor=flavor, device=torch_device)

    def step() -> None:
        loss = sum(model(images, targets).values())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(warmup_steps):
        step()
    if torch_device.type == "cuda":
        torch.cuda.synchronize(torch_device)
    start = time.perf_counter()
    for _ in range(num_steps):
        step()
    if torch_device.type == "cuda":
        torch.cuda.synchronize(torch_device)
    seconds = time.perf_counter() - start
    return TrainingThroughput(
        flavor=flavor_name,
        images_per_s=batch_size * num_steps / seconds,
        seconds_per_step=seconds / num_steps,
        batch_size=batch_size,
        image_size=flavor.image_size,
        num_steps=num_steps,
        device=str(torch_device),
        threads=torch.get_num_threads(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "retinanet.bench.training", __doc__.splitlines()[0],
        example="python -m retinanet.bench.training --flavor tiny --threads 1",
        docs="retinanet/README.md")
    parser.add_argument("--flavor", default="tiny", choices=sorted(FLAVORS))
    parser.add_argument("--image-size", type=int, help="square input side (default: the flavor's)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup-steps", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--threads", type=int, help="intra-op CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure_training_images_per_s(
        flavor_name=args.flavor,
        image_size=args.image_size,
        batch_size=args.batch_size,
        num_steps=args.steps,
        warmup_steps=args.warmup_steps,
        device=args.device,
        channels_last=args.channels_last,
    )
    print(result.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
