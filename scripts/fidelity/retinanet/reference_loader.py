"""What the reference's train loader does per sample (mlcommons/training 803adc1a ssd, per
shared/reference/loader_fidelity_facts.md): torchvision CocoDetection (pycocotools COCO of the json,
Image.open(path).convert("RGB") per image), DistributedSampler(shuffle=True, seed=0) -> BatchSampler(
drop_last=True) -> DataLoader(num_workers, prefetch 2, not persistent). Written here, not copied."""
import os
import sys

import torch
import torchvision
import torchvision.transforms.functional as TF

root, world, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
batch, workers = int(sys.argv[4]), int(sys.argv[5])


def to_tensor(image, target):
    return TF.to_tensor(image), target  # the reference's ToTensor: float pixels of the full image


def collate(samples):
    return tuple(zip(*samples))


def main():
    dataset = torchvision.datasets.CocoDetection(os.path.join(root, "train", "data"),
                                                 os.path.join(root, "train", "labels", "openimages-mlperf.json"),
                                                 transforms=to_tensor)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=world, rank=rank)
    sampler.set_epoch(0)
    batches = torch.utils.data.BatchSampler(sampler, batch, drop_last=True)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches, num_workers=workers, collate_fn=collate)
    images = sum(len(images) for images, _ in loader)
    print(f"reference-style loader: {images} images", flush=True)


if __name__ == "__main__":
    main()
