"""Our train loader as retinanet/train.py builds it at reference.gin: EpochSchedule windows ->
StreamingLoader(4 workers, prefetch 2) over OpenImagesDetectionDataset (decode, reference resize)."""
import os
import sys
from pathlib import Path
# REPO=<another checkout> runs that tree instead of this one (e.g. the code before a change)
sys.path.insert(0, os.environ.get("REPO", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")))
from common.data.epochs import EpochSchedule  # noqa: E402
from common.data.loader import StreamingLoader  # noqa: E402
from retinanet.data import layout  # noqa: E402
from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset  # noqa: E402

root, world, rank = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
batch, workers = int(sys.argv[4]), int(sys.argv[5])


def main():
    dataset = OpenImagesDetectionDataset.from_split(root, layout.TRAIN_SPLIT,
                                                    settings=LoaderSettings(image_size=800, augment=True))
    epochs = EpochSchedule(num_samples=len(dataset), global_batch_size=batch * world, world_size=world, epochs=1)
    loader = StreamingLoader(source=dataset, build_window=lambda key: epochs.window_batches(key, rank=rank),
                             num_workers=workers, prefetch_factor=2)
    try:
        images = sum(len(b.image_ids) for _, b in loader.iterate(0))
    finally:
        loader.close()
    print(f"our loader: {images} images", flush=True)


if __name__ == "__main__":
    main()
