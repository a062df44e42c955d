from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from retinanet.data.synthetic_drawing import SHAPES, class_appearances, draw_object, sample_object_boxes


def test_every_reference_class_has_its_own_look() -> None:
    appearances = class_appearances(264)
    assert len({(a.shape, a.rgb) for a in appearances}) == 264
    assert {a.shape for a in appearances[: len(SHAPES)]} == set(SHAPES)


@pytest.mark.parametrize("shape", SHAPES)
def test_drawn_shape_touches_every_edge_of_its_box(shape: str) -> None:
    canvas = Image.new("RGB", (120, 100))
    box = (17, 11, 93, 80)
    draw_object(ImageDraw.Draw(canvas), shape=shape, box=box, rgb=(255, 255, 255))
    ys, xs = np.nonzero(np.asarray(canvas)[..., 0])
    assert (xs.min(), ys.min(), xs.max(), ys.max()) == box


def test_sampled_boxes_fit_the_image_and_barely_overlap() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        boxes = sample_object_boxes(rng, width=300, height=200, num_objects=5, min_fraction=0.1, max_fraction=0.5)
        assert boxes
        for x0, y0, x1, y1 in boxes:
            assert 0 <= x0 < x1 < 300 and 0 <= y0 < y1 < 200
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                inter = max(0, min(a[2], b[2]) - max(a[0], b[0]) + 1) * max(0, min(a[3], b[3]) - max(a[1], b[1]) + 1)
                area_a = (a[2] - a[0] + 1) * (a[3] - a[1] + 1)
                area_b = (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
                assert inter / (area_a + area_b - inter) <= 0.2
