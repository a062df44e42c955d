"""COCO box mAP@[.5:.95] of RetinaNet detections with pycocotools, across ranks.

Each rank adds its detections (in the model's square input frame; add() maps them back to each
original image), compute() gathers every rank's rows on rank 0, runs COCOeval there and hands
the result to all ranks, so every rank can decide whether the quality target is reached.

An image evaluated on several ranks (the reference's evaluation order pads the images to a
multiple of the world size by repeating some: retinanet.data.eval_order) is scored once, with the
detections of the first rank that has it: the reference's coco_eval.merge keeps the first of each
image id over the ranks' results in rank order (np.unique with return_index).

The ground truth is parsed once per run, at the first evaluation, and kept: the reference
evaluates against the COCO object its dataset parsed at start (a deep copy per evaluation), and
reads the file no more. COCOeval only adds an `ignore` flag to the kept annotations, recomputed
from `iscrowd` at every evaluation, so one parse scores every evaluation alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

import numpy as np
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from common.distributed.collectives import object_from_rank0, objects_on_rank0
from common.object_store.location import Location, ObjectPath
from retinanet.data.coco_annotations import CategoryMap

# Row layout handed to COCO.loadRes: image_id, x, y, w, h (original pixels), score, category_id.
_ROW_WIDTH = 7


@dataclasses.dataclass(frozen=True)
class DetectionMetrics:
    map: float  # AP averaged over IoU 0.50:0.95, all areas, 100 detections per image (COCO stats[0])
    ap50: float  # AP at IoU 0.50 (COCO stats[1])
    num_images: int
    num_detections: int


def load_coco_quietly(annotations_file: Location, *, content: bytes | None = None) -> COCO:
    """pycocotools' COCO of the file, or of `content`, the file's bytes already read."""
    with contextlib.redirect_stdout(io.StringIO()):
        if content is None and not isinstance(annotations_file, ObjectPath):
            coco = COCO(str(annotations_file))
        else:  # pycocotools opens paths only: hand it the parsed json
            coco = COCO()
            coco.dataset = json.loads(annotations_file.read_bytes() if content is None else content)
            coco.createIndex()
    # COCO.loadRes copies the optional top-level "info" and fails on files that omit it.
    coco.dataset.setdefault("info", {})
    return coco


def detections_to_coco_rows(
    detections: list[dict[str, torch.Tensor]],
    *,
    image_ids: torch.Tensor,
    original_hw: torch.Tensor,
    input_hw: tuple[int, int],
    categories: CategoryMap,
) -> np.ndarray:
    """float64 [K, 7] rows; boxes scaled from the input frame back to each original image."""
    rows = []
    input_h, input_w = input_hw
    for detection, image_id, (height, width) in zip(detections, image_ids.tolist(), original_hw.tolist(), strict=True):
        boxes = detection["boxes"].detach().to("cpu", torch.float64).numpy()
        if len(boxes) == 0:
            continue
        boxes = boxes * np.array([width / input_w, height / input_h, width / input_w, height / input_h])
        xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
        scores = detection["scores"].detach().to("cpu", torch.float64).numpy()
        category_ids = categories.category_ids_of(detection["labels"].detach().cpu().numpy())
        rows.append(np.column_stack([np.full(len(boxes), image_id), xywh, scores, category_ids]).astype(np.float64))
    return np.concatenate(rows) if rows else np.zeros((0, _ROW_WIDTH))


def first_rank_rows(gathered: list[tuple[np.ndarray, list[int]]]) -> tuple[np.ndarray, set[int]]:
    """The ranks' (rows, image ids), in rank order, merged: an image evaluated on several ranks
    keeps the rows of the first, as the reference's merge keeps the first of each image id."""
    seen: set[int] = set()
    kept = []
    for rows, ids in gathered:
        new = set(ids) - seen
        if len(new) < len(ids):  # a padded image this rank evaluated again: its rows are already in
            rows = rows[np.isin(rows[:, 0], np.fromiter(new, dtype=np.float64, count=len(new)))]
        kept.append(rows)
        seen |= new
    return (np.concatenate(kept) if kept else np.zeros((0, _ROW_WIDTH))), seen


class CocoDetectionEvaluator:
    """Accumulates detections over an evaluation pass and scores them against a COCO json."""

    def __init__(self, annotations_file: Location, *, categories: CategoryMap,
                 verbose: bool = False, annotations_json: bytes | None = None) -> None:
        """`annotations_json`: the file's bytes as the dataset read them (rank 0), so scoring reads
        the file no more; without them the first scoring reads it."""
        self.annotations_file = annotations_file
        if annotations_json is None and not self.annotations_file.is_file():
            raise FileNotFoundError(f"evaluation annotations file not found: {self.annotations_file}")
        self.categories = categories
        self.verbose = verbose
        self._annotations_json = annotations_json
        self._coco_gt: COCO | None = None
        self._rows: list[np.ndarray] = []
        self._image_ids: set[int] = set()

    def reset(self) -> None:
        self._rows = []
        self._image_ids = set()

    def add(
        self,
        detections: list[dict[str, torch.Tensor]],
        *,
        image_ids: torch.Tensor,
        original_hw: torch.Tensor,
        input_hw: tuple[int, int],
    ) -> None:
        """Detections of one batch; images without detections still count as evaluated."""
        if len(detections) != len(image_ids) or len(detections) != len(original_hw):
            raise ValueError(
                f"{len(detections)} detections for {len(image_ids)} image ids and {len(original_hw)} sizes"
            )
        self._image_ids.update(int(i) for i in image_ids.tolist())
        self._rows.append(
            detections_to_coco_rows(
                detections, image_ids=image_ids, original_hw=original_hw, input_hw=input_hw, categories=self.categories
            )
        )

    def _gathered(self) -> tuple[np.ndarray, set[int]] | None:
        """All ranks' rows and image ids on rank 0 (None on other ranks), each image's rows from
        the first rank that evaluated it."""
        rows = np.concatenate(self._rows) if self._rows else np.zeros((0, _ROW_WIDTH))
        # Only rank 0 scores, so only rank 0 receives (a full val pass is ~7M rows at 300 per image).
        gathered = objects_on_rank0((rows, sorted(self._image_ids)))
        if gathered is None:
            return None
        return first_rank_rows(gathered)

    def ground_truth(self) -> COCO:
        """The parsed validation json: parsed at the first call, kept for the run."""
        if self._coco_gt is None:
            self._coco_gt = load_coco_quietly(self.annotations_file, content=self._annotations_json)
            self._annotations_json = None  # parsed: the bytes are no longer needed
        return self._coco_gt

    def _score(self, rows: np.ndarray, image_ids: set[int]) -> DetectionMetrics:
        coco_gt = self.ground_truth()
        unknown = image_ids - set(coco_gt.getImgIds())
        if unknown:
            raise ValueError(f"detections for image ids {sorted(unknown)[:10]} not in {self.annotations_file}")
        if len(rows) == 0:
            return DetectionMetrics(map=0.0, ap50=0.0, num_images=len(image_ids), num_detections=0)
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            coco_dt = coco_gt.loadRes(rows)
            evaluation = COCOeval(coco_gt, coco_dt, iouType="bbox")
            evaluation.params.imgIds = sorted(image_ids)
            evaluation.evaluate()
            evaluation.accumulate()
            evaluation.summarize()
        if self.verbose:
            print(output.getvalue(), end="")
        # COCOeval reports -1 when no ground truth exists in the evaluated images.
        return DetectionMetrics(
            map=max(0.0, float(evaluation.stats[0])),
            ap50=max(0.0, float(evaluation.stats[1])),
            num_images=len(image_ids),
            num_detections=len(rows),
        )

    def compute(self) -> DetectionMetrics:
        """Gathers across ranks, scores on rank 0, and returns the same metrics on every rank."""
        with torch.profiler.record_function("## retinanet.coco_eval ##"):
            gathered = self._gathered()
            outcome: DetectionMetrics | str | None = None
            if gathered is not None:
                try:
                    outcome = self._score(*gathered)
                except (ValueError, KeyError) as error:
                    # Hand the failure to the other ranks too, so none of them waits forever.
                    outcome = f"{type(error).__name__}: {error}"
            outcome = object_from_rank0(outcome)
        if not isinstance(outcome, DetectionMetrics):
            raise ValueError(f"COCO evaluation failed on rank 0: {outcome}")
        return outcome
