"""Baseline JPEGs composed from a bank of pre-encoded pieces: the storage content of the synthetic
RetinaNet dataset (`--content storage`), written ~90x faster than drawing and encoding each picture
(471 against 5.0 MB/s in one process, `scripts/generation_bench.py`, 2026-11-27).

A baseline JPEG with a restart interval of R MCUs is a header and then independent entropy-coded
segments of R MCUs each, separated by RST0..RST7 markers: at every restart the decoder resets its
DC predictors, so a segment decodes the same wherever it sits. With the header's quantisation and
Huffman tables fixed (one quality, libjpeg's standard tables), any segments encoded at that quality
can be strung together under a header whose SOF0 gives the wanted width and height, as long as the
segments hold exactly ceil(W/16) * ceil(H/16) MCUs (4:2:0 sampling: an MCU is 16 x 16 pixels).

The bank holds, for every quality, the segments of a few drawn pictures (background, objects and
noise as the learnable content draws them, at noise levels spread over the size's range) cut at
their restart markers, in order of noise level. An image at noise s takes its segments from the
window of the bank drawn nearest s, without replacement: bytes per pixel follow noise and quality
as drawn pictures do, no segment repeats inside a file (so zstd finds nothing to take out of it),
and two files share no 4 KiB block (each file's segment order is its own). The picture is a
patchwork of texture with nothing to learn; the annotations still say where objects would be.
"""

from __future__ import annotations

import dataclasses
import io
import re

import numpy as np
from PIL import Image

from retinanet.data.synthetic_drawing import class_appearances, render_image, sample_object_boxes

MCU_PIXELS = 16  # 4:2:0 chroma subsampling: one MCU is 16 x 16 pixels
RESTART_MCUS = 8  # MCUs per restart interval: segments of ~0.5 KB, markers ~0.4% of the bytes
_MAX_SOURCE_SIDE = 1024  # pixels: 64 MCUs per row, 8 segments per MCU row
_SOURCES = 12  # drawn pictures per bank, at noise levels spread over the size's range
_WINDOW_SOURCES = 2  # an image's segments come from this many neighbouring pictures' segments
_SUBSAMPLING_420 = 2  # PIL's code for 4:2:0
_RESTART = re.compile(rb"\xff[\xd0-\xd7]")
_EOI = b"\xff\xd9"
_RST_MARKERS = tuple(bytes((0xFF, 0xD0 + k)) for k in range(8))


def _encode(pixels: np.ndarray, *, quality: int, restart_mcus: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality, subsampling=_SUBSAMPLING_420,
                                 optimize=False, restart_marker_blocks=restart_mcus)
    return buffer.getvalue()


def _split_header(encoded: bytes) -> tuple[bytes, bytes]:
    """(everything up to and including the SOS segment, the entropy-coded data up to EOI)."""
    position = 2  # after SOI
    while True:
        if encoded[position] != 0xFF:
            raise ValueError(f"not a marker at byte {position} of a JPEG PIL wrote")
        marker = encoded[position + 1]
        length = int.from_bytes(encoded[position + 2:position + 4], "big")
        position += 2 + length
        if marker == 0xDA:  # SOS: entropy-coded data follows its header
            if not encoded.endswith(_EOI):
                raise ValueError("a JPEG PIL wrote does not end with EOI")
            return encoded[:position], encoded[position:-2]


def _tables(header: bytes) -> bytes:
    """The DQT, DHT and DRI segments of a header: what segments from another file must share."""
    kept, position = [], 2
    while position < len(header):
        marker = header[position + 1]
        length = int.from_bytes(header[position + 2:position + 4], "big")
        if marker in (0xDB, 0xC4, 0xDD):
            kept.append(header[position:position + 2 + length])
        position += 2 + length
    return b"".join(kept)


def _with_dimensions(header: bytes, *, width: int, height: int) -> bytes:
    """The header with its SOF0 frame's height and width replaced."""
    position = 2
    while True:
        marker = header[position + 1]
        length = int.from_bytes(header[position + 2:position + 4], "big")
        if marker == 0xC0:
            # SOF0: length (2), precision (1), height (2), width (2), ...
            at = position + 5
            return header[:at] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + header[at + 4:]
        position += 2 + length


@dataclasses.dataclass(frozen=True)
class _QualityBank:
    header: bytes  # SOI .. SOS of a baseline 4:2:0 JPEG at this quality, restart interval RESTART_MCUS
    segments: tuple[bytes, ...]  # full intervals, in order of their picture's noise level
    tails: dict[int, tuple[bytes, ...]]  # segments of 1 .. RESTART_MCUS - 1 MCUs, for a last interval


def _segments(encoded: bytes, tables: bytes) -> list[bytes]:
    header, data = _split_header(encoded)
    if _tables(header) != tables:
        raise ValueError("PIL encoded the bank's pictures with tables other than the header's: segments would "
                         "not decode under it")
    return _RESTART.split(data)


class JpegBank:
    """Every quality's segments, drawn once per process from (seed, look): a pure function of them."""

    def __init__(self, *, seed: int, qualities: range, noise_std: tuple[float, float], num_classes: int,
                 max_objects: int, object_fraction: tuple[float, float], long_side: int) -> None:
        rng = np.random.default_rng([seed, 7, 0])
        # square pictures of whole segments per row, no bigger than the images need (tiny sizes
        # draw small banks); the window widens for an image bigger than two pictures
        segment_pixels = RESTART_MCUS * MCU_PIXELS
        side = min(_MAX_SOURCE_SIDE, -(-long_side // segment_pixels) * segment_pixels)
        self.noise_levels = np.linspace(noise_std[0], noise_std[1], _SOURCES)
        appearances = class_appearances(num_classes)
        pictures = []
        for noise in self.noise_levels:
            boxes = sample_object_boxes(rng, width=side, height=side,
                                        num_objects=int(rng.integers(1, max_objects + 1)),
                                        min_fraction=object_fraction[0], max_fraction=object_fraction[1])
            objects = [(int(rng.integers(0, num_classes)), box) for box in boxes]
            picture = render_image(rng, width=side, height=side, objects=objects,
                                   appearances=appearances, noise_std=float(noise))
            pictures.append(np.asarray(picture))
        self._banks = {quality: self._quality_bank(pictures, quality) for quality in qualities}

    @staticmethod
    def _quality_bank(pictures: list[np.ndarray], quality: int) -> _QualityBank:
        template = _encode(np.zeros((MCU_PIXELS, MCU_PIXELS, 3), np.uint8), quality=quality,
                           restart_mcus=RESTART_MCUS)
        header, _ = _split_header(template)
        tables = _tables(header)
        segments: list[bytes] = []
        for pixels in pictures:
            segments.extend(_segments(_encode(pixels, quality=quality, restart_mcus=RESTART_MCUS), tables))
        tails: dict[int, tuple[bytes, ...]] = {}
        for mcus in range(1, RESTART_MCUS):
            # a strip of the first picture, `mcus` MCUs wide: one segment per MCU row
            strip = np.ascontiguousarray(pictures[0][:, :mcus * MCU_PIXELS])
            encoded = _encode(strip, quality=quality, restart_mcus=mcus)
            tail_header, _ = _split_header(encoded)
            tails[mcus] = tuple(_segments(encoded, _tables(tail_header)))
        return _QualityBank(header=header, segments=tuple(segments), tails=tails)

    def compose(self, rng: np.random.Generator, *, width: int, height: int, quality: int, noise_std: float) -> bytes:
        """A baseline JPEG of width x height at `quality`, its segments drawn with `rng` from the
        window of the bank nearest `noise_std`."""
        bank = self._banks[quality]
        mcus = -(-width // MCU_PIXELS) * -(-height // MCU_PIXELS)
        full, tail = divmod(mcus, RESTART_MCUS)
        per_source = len(bank.segments) // _SOURCES
        # a picture bigger than the usual window takes its segments from more noise levels
        sources = max(_WINDOW_SOURCES, -(-full // per_source))
        if sources > _SOURCES:
            raise ValueError(f"a {width}x{height} px image needs {full:,} segments; the bank holds "
                             f"{len(bank.segments):,} per quality")
        window = sources * per_source
        nearest = int(np.abs(self.noise_levels - noise_std).argmin())
        first = min(max(nearest - sources // 2, 0), _SOURCES - sources) * per_source
        picked = (rng.permutation(window)[:full] + first).tolist()
        segments = bank.segments
        parts = [_with_dimensions(bank.header, width=width, height=height)]
        for count, index in enumerate(picked):
            if count:
                parts.append(_RST_MARKERS[(count - 1) % 8])
            parts.append(segments[index])
        if tail:
            if full:
                parts.append(_RST_MARKERS[(full - 1) % 8])
            tails = bank.tails[tail]
            parts.append(tails[int(rng.integers(len(tails)))])
        parts.append(_EOI)
        return b"".join(parts)
