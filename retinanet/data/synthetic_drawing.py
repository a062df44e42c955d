"""Draws one synthetic OpenImages-like picture: a textured background with class-coded objects.

Each class has a fixed (shape, colour) pair, so a detector can learn it; backgrounds mix a
gradient, low-frequency blotches and pixel noise, which also makes JPEG sizes vary the way
photographs do. Everything is a pure function of the numpy Generator passed in.
"""

from __future__ import annotations

import colorsys
import dataclasses
import math

import numpy as np
from PIL import Image, ImageDraw

SHAPES: tuple[str, ...] = ("rectangle", "ellipse", "triangle", "diamond", "cross", "ring", "hexagon", "star")
_GOLDEN_RATIO_CONJUGATE = 0.6180339887498949


@dataclasses.dataclass(frozen=True)
class ClassAppearance:
    shape: str
    rgb: tuple[int, int, int]


def class_appearances(num_classes: int) -> tuple[ClassAppearance, ...]:
    """A distinct (shape, colour) for each class: shapes cycle, hues spread by the golden ratio."""
    appearances = []
    for label in range(num_classes):
        hue = (label * _GOLDEN_RATIO_CONJUGATE) % 1.0
        # Vary saturation/value in slow cycles so that classes with nearby hues still differ.
        saturation = (0.95, 0.7, 0.5)[(label // len(SHAPES)) % 3]
        value = (0.95, 0.75)[(label // (3 * len(SHAPES))) % 2]
        red, green, blue = colorsys.hsv_to_rgb(hue, saturation, value)
        appearances.append(
            ClassAppearance(
                shape=SHAPES[label % len(SHAPES)], rgb=(round(red * 255), round(green * 255), round(blue * 255))
            )
        )
    return tuple(appearances)


def _unit_polygon(shape: str) -> list[tuple[float, float]]:
    """Vertices of `shape` normalised to touch all four edges of the unit square."""
    if shape == "triangle":
        points = [(0.5, 0.0), (1.0, 1.0), (0.0, 1.0)]
    elif shape == "diamond":
        points = [(0.5, 0.0), (1.0, 0.5), (0.5, 1.0), (0.0, 0.5)]
    elif shape == "cross":
        a, b = 1.0 / 3.0, 2.0 / 3.0
        points = [(a, 0), (b, 0), (b, a), (1, a), (1, b), (b, b), (b, 1), (a, 1), (a, b), (0, b), (0, a), (a, a)]
    elif shape == "hexagon":
        points = [(0.25, 0.0), (0.75, 0.0), (1.0, 0.5), (0.75, 1.0), (0.25, 1.0), (0.0, 0.5)]
    elif shape == "star":
        points = []
        for k in range(10):
            radius = 1.0 if k % 2 == 0 else 0.45
            angle = -math.pi / 2 + k * math.pi / 5
            points.append((radius * math.cos(angle), radius * math.sin(angle)))
    else:
        raise ValueError(f"{shape!r} is not a polygon shape")
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    return [((x - min(xs)) / (max(xs) - min(xs)), (y - min(ys)) / (max(ys) - min(ys))) for x, y in points]


def draw_object(
    draw: ImageDraw.ImageDraw, *, shape: str, box: tuple[int, int, int, int], rgb: tuple[int, int, int]
) -> None:
    """Fills `shape` so that it touches every edge of the inclusive pixel box (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = box
    if shape == "rectangle":
        draw.rectangle(box, fill=rgb)
    elif shape == "ellipse":
        draw.ellipse(box, fill=rgb)
    elif shape == "ring":
        draw.ellipse(box, outline=rgb, width=max(2, min(x1 - x0, y1 - y0) // 5))
    else:
        width, height = x1 - x0, y1 - y0
        draw.polygon([(x0 + u * width, y0 + v * height) for u, v in _unit_polygon(shape)], fill=rgb)


def textured_background(rng: np.random.Generator, *, width: int, height: int) -> np.ndarray:
    """float32 [H, W, 3] in 0..255: a two-colour gradient plus low-frequency blotches."""
    start, end = rng.uniform(30, 225, size=(2, 3)).astype(np.float32)
    angle = rng.uniform(0, 2 * math.pi)
    # a row and a column broadcast: the same float32 values as full coordinate grids, a third of the time
    xs = np.arange(width, dtype=np.float32)[None, :]
    ys = np.arange(height, dtype=np.float32)[:, None]
    ramp = xs * math.cos(angle) + ys * math.sin(angle)
    ramp = (ramp - ramp.min()) / max(float(ramp.max() - ramp.min()), 1.0)
    image = start + ramp[..., None] * (end - start)
    # Blotches: a coarse random grid upsampled bilinearly (PIL keeps it fast and deterministic).
    grid = rng.uniform(-40, 40, size=(int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3)).astype(np.float32)
    coarse = Image.fromarray(((grid + 40) * (255 / 80)).astype(np.uint8)).resize(
        (width, height), Image.Resampling.BILINEAR
    )
    image += np.asarray(coarse, dtype=np.float32) * (80 / 255) - 40
    return image


def sample_object_boxes(
    rng: np.random.Generator, *, width: int, height: int, num_objects: int, min_fraction: float, max_fraction: float
) -> list[tuple[int, int, int, int]]:
    """Inclusive integer boxes that overlap each other by IoU <= 0.2 (fewer if placement fails)."""
    boxes: list[tuple[int, int, int, int]] = []
    short_side = min(width, height)
    for _ in range(num_objects * 20):
        if len(boxes) == num_objects:
            break
        side = rng.uniform(min_fraction, max_fraction) * short_side
        aspect = rng.uniform(0.6, 1.6)
        box_w = max(8, min(width - 1, int(side * math.sqrt(aspect))))
        box_h = max(8, min(height - 1, int(side / math.sqrt(aspect))))
        x0 = int(rng.integers(0, width - box_w))
        y0 = int(rng.integers(0, height - box_h))
        candidate = (x0, y0, x0 + box_w - 1, y0 + box_h - 1)
        if all(_inclusive_iou(candidate, other) <= 0.2 for other in boxes):
            boxes.append(candidate)
    return boxes


def _inclusive_iou(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    inter_w = min(a[2], b[2]) - max(a[0], b[0]) + 1
    inter_h = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if inter_w <= 0 or inter_h <= 0:
        return 0.0
    inter = inter_w * inter_h
    area_a = (a[2] - a[0] + 1) * (a[3] - a[1] + 1)
    area_b = (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    return inter / (area_a + area_b - inter)


def render_image(
    rng: np.random.Generator,
    *,
    width: int,
    height: int,
    objects: list[tuple[int, tuple[int, int, int, int]]],
    appearances: tuple[ClassAppearance, ...],
    noise_std: float,
) -> Image.Image:
    """Background, then each (label, inclusive box) object, then pixel noise over everything."""
    canvas = Image.fromarray(textured_background(rng, width=width, height=height).clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    for label, box in objects:
        appearance = appearances[label]
        jitter = rng.integers(-12, 13, size=3)
        rgb = tuple(int(np.clip(c + j, 0, 255)) for c, j in zip(appearance.rgb, jitter, strict=True))
        draw_object(draw, shape=appearance.shape, box=box, rgb=rgb)
    pixels = np.asarray(canvas, dtype=np.float32)
    pixels += rng.standard_normal(size=pixels.shape, dtype=np.float32) * noise_std
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
