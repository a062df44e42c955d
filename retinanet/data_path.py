"""RetinaNet's data path beside the reference's, for the load profile (common.data.fidelity).

The reference is mlcommons/training 803adc1a, single_stage_detector/ssd at its DGX-A100 launch
(docs/fidelity.md has the file:line of each). A setting whose binding is "none" has no switch here:
it is what this trainer always does, recorded so a storage answer says so.
"""

from __future__ import annotations

from common.data.fidelity import DataPathSetting
from retinanet.run_config import DataConfig

_DATA = "retinanet.DataConfig"


def _drains(batches_per_window: int) -> str:
    return "once per epoch" if batches_per_window == 0 else f"every {batches_per_window} global batches"


def data_path_settings(config: DataConfig) -> list[DataPathSetting]:
    return [
        # train.py `-j` default; its launch scripts do not set it
        DataPathSetting("train_workers", config.num_workers, 4, f"{_DATA}.num_workers"),
        DataPathSetting("eval_workers", config.eval_num_workers, 4, f"{_DATA}.eval_num_workers"),
        # torch DataLoader's default; the reference does not set it
        DataPathSetting("prefetch_per_worker", config.prefetch_factor, 2, f"{_DATA}.prefetch_factor"),
        # the reference's DataLoaders are not persistent: a fresh set of workers for every epoch and
        # every evaluation (each fork re-reads nothing: the annotations are inherited in memory)
        DataPathSetting("persistent_workers", True, False,
                        "none: common.data.loader.StreamingLoader keeps its workers"),
        # the reference's pipeline runs dry once an epoch (its workers end with it); ours at every
        # window's end, the next window's first batch read ahead on a thread
        DataPathSetting("loader_drains", _drains(config.batches_per_window), "once per epoch",
                        f"{_DATA}.batches_per_window"),
        # both: a fresh permutation of the train images every epoch (ours numpy's with the run
        # seed, the reference's torch's with seed 0 + epoch), cut into whole global batches
        DataPathSetting("train_order", "permutation per epoch", "permutation per epoch", "none"),
        # the same images in every step either way; only which rank reads which image differs
        DataPathSetting("rank_split", "contiguous share of each global batch",
                        "interleaved share (DistributedSampler: indices[rank::world_size])",
                        "none: common.data.epochs rank_slices='batch'"),
        DataPathSetting("eval_order", config.eval_order, "permuted", f"{_DATA}.eval_order"),
        DataPathSetting("eval_padding", config.eval_pad_to_world_size, True, f"{_DATA}.eval_pad_to_world_size"),
        # every rank parses both jsons once; the evaluation scores against the parse it kept
        DataPathSetting("val_json_reads", "once per rank per run", "once per rank per run", "none"),
        # both front to back; "pil" also makes the reference's read() calls (PIL's buffered block,
        # then 64 KiB), which set the kernel's readahead and so the device requests per file
        DataPathSetting("jpeg_read_order", "front to back", "front to back", "none: retinanet.data.file_read"),
        DataPathSetting("jpeg_reads", config.jpeg_reads, "pil", f"{_DATA}.jpeg_reads"),
        DataPathSetting("images_without_boxes_kept", not config.drop_train_images_without_boxes, True,
                        f"{_DATA}.drop_train_images_without_boxes"),
    ]
