"""Per-image work of the loader: JPEG decode, square resize with boxes, flip, ImageNet normalisation.

Two resizes (`RESIZES`):
- "reference" (the default): the MLPerf reference's pixels. Its model transform normalises the
  float image, then resizes it bilinearly without antialiasing (align_corners=False), after the
  dataset flipped the original; `reference_resize` does exactly those operations in that order.
- "uint8_antialias": geometry on uint8 pixels with torchvision's antialiased bilinear resize and
  normalisation last (at collation or on the accelerator), a quarter of the bytes moved; faster,
  but a downscaled photo's pixels differ from the reference's.
"""

from __future__ import annotations

import warnings

import torch
import torchvision.transforms.v2.functional as TF
from torchvision.io import ImageReadMode, decode_jpeg

from common.randomness.keyed import keyed_generator

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
_MEAN = torch.tensor(IMAGENET_MEAN, dtype=torch.float32).view(3, 1, 1)
_STD = torch.tensor(IMAGENET_STD, dtype=torch.float32).view(3, 1, 1)
# (x / 255 - mean) / std == x * scale + shift: one multiply and one add per pixel.
_NORMALIZE_SCALE = 1.0 / (255.0 * _STD)
_NORMALIZE_SHIFT = -_MEAN / _STD


RESIZES: tuple[str, ...] = ("reference", "uint8_antialias")


def decode_jpeg_rgb(encoded: torch.Tensor) -> torch.Tensor:
    """uint8 [3, H, W]; grayscale and CMYK files (OpenImages has both) come out as RGB.

    Raises RuntimeError for corrupt or truncated data.
    """
    with warnings.catch_warnings():
        # torchvision 0.29 warns on every call that torchvision.io is deprecated in favour of TorchCodec.
        warnings.filterwarnings("ignore", message=".*decoding and encoding capabilities of TorchVision.*")
        return decode_jpeg(encoded, mode=ImageReadMode.RGB)


def _resizes_in_place(image: torch.Tensor, out: torch.Tensor | None) -> bool:
    """Whether `out` can take the resize directly: image and `out` of one dtype, both stored pixel
    by pixel (the decoded layout), so the resize kernel is the channels-last one either way (for
    uint8, torchvision's resize is exactly that one antialiased bilinear kernel)."""
    if out is None or image.dtype != out.dtype or image.ndim != 3:
        return False
    channels, _, width = image.shape
    return image.stride() == (1, width * channels, channels) and out.stride()[-3:] == (1, out.shape[-1] * channels, channels)


def resize_square(
    image: torch.Tensor, boxes_xyxy: torch.Tensor, *, size: int, annotated_hw: tuple[int, int],
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bilinear (antialiased) resize of a uint8 image to size x size; boxes scale with it.

    Boxes are in the annotation's pixel frame, so they scale by size / annotated side. With `out`
    (a [3, size, size] slot of a batch) the image is resized straight into it, the same pixels
    without the copy a batch would otherwise make.
    """
    with torch.profiler.record_function("## retinanet.resize ##"):
        if _resizes_in_place(image, out):
            torch.ops.aten._upsample_bilinear2d_aa.out(image.unsqueeze(0), [size, size], False, None, None,
                                                       out=out.unsqueeze(0))
            resized = out
        else:
            resized = TF.resize(image, [size, size], antialias=True)
            if out is not None:
                resized = out.copy_(resized)
    height, width = annotated_hw
    scale = torch.tensor([size / width, size / height, size / width, size / height], dtype=torch.float32)
    return resized, boxes_xyxy * scale


def reference_resize(
    image: torch.Tensor, boxes_xyxy: torch.Tensor, *, size: int, annotated_hw: tuple[int, int], flip: bool,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference's pixels for a decoded uint8 [3, H, W] image: flip (when `flip`), x / 255,
    (x - mean) / std, then bilinear resize to size x size without antialiasing; float32.

    Boxes (annotated frame) are flipped in that frame, then scaled. The operations and their order
    are the reference's; the memory layout is not: the decoded image is stored pixel by pixel and
    stays so (channels last), which halves the time of the normalisation and the resize and gives
    the same pixels (checked against the reference's channels-first arithmetic by
    tests/retinanet/data/test_reference_resize.py). With `out` (a float32 [3, size, size] slot of
    a channels-last batch) the resize writes straight into it.
    """
    if flip:
        image, boxes_xyxy = horizontal_flip(image, boxes_xyxy)  # the decoded size is the annotated one
    with torch.profiler.record_function("## retinanet.normalize ##"):
        pixels = image.to(torch.float32).div_(255.0).sub_(_MEAN).div_(_STD)
    with torch.profiler.record_function("## retinanet.resize ##"):
        if _resizes_in_place(pixels, out):
            torch.ops.aten.upsample_bilinear2d.out(pixels.unsqueeze(0), [size, size], False, None, None,
                                                   out=out.unsqueeze(0))
            resized = out
        else:
            resized = torch.nn.functional.interpolate(pixels.unsqueeze(0), size=[size, size], mode="bilinear",
                                                      align_corners=False).squeeze(0)
            if out is not None:
                resized = out.copy_(resized)
    height, width = annotated_hw
    scale = torch.tensor([size / width, size / height, size / width, size / height], dtype=torch.float32)
    return resized, boxes_xyxy * scale


def horizontal_flip(image: torch.Tensor, boxes_xyxy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mirrors a [C, H, W] image and its xyxy boxes left-right."""
    width = image.shape[-1]
    flipped_boxes = boxes_xyxy[:, [2, 1, 0, 3]] * torch.tensor([-1.0, 1.0, -1.0, 1.0]) + torch.tensor(
        [width, 0.0, width, 0.0]
    )
    return image.flip(-1), flipped_boxes


def normalize_imagenet_(images: torch.Tensor) -> torch.Tensor:
    """In place (x / 255 - mean) / std of float images [..., 3, H, W] holding 0..255 values (any device)."""
    if images.device.type == "cpu":
        return images.mul_(_NORMALIZE_SCALE).add_(_NORMALIZE_SHIFT)
    return images.mul_(_NORMALIZE_SCALE.to(images.device)).add_(_NORMALIZE_SHIFT.to(images.device))


def normalize_imagenet(image: torch.Tensor) -> torch.Tensor:
    """float32 (x / 255 - mean) / std of a uint8 [..., 3, H, W] image."""
    # Convert once, then two in-place passes: measured 3x faster than a mixed-dtype subtract.
    return normalize_imagenet_(image.to(torch.float32))


def flip_decision(*, seed: int, epoch: int, image_id: int, probability: float = 0.5) -> bool:
    """Whether the image is flipped this epoch."""
    # keyed on the image id, not a position: any window blocking, worker count or resume point
    # replays the same flip for an image in an epoch
    return bool(torch.rand((), generator=keyed_generator(seed, epoch, image_id)) < probability)
