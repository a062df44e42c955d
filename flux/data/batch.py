"""FluxBatch: what the reader hands the trainer, one preallocated tensor per field."""

from __future__ import annotations

import dataclasses

import torch

from common.data.batch_arena import batch_empty


@dataclasses.dataclass
class FluxBatch:
    t5: torch.Tensor  # bf16 [B, L, D]: T5 token encodings (the model's txt)
    clip: torch.Tensor  # bf16 [B, D]: CLIP pooled encoding (the model's y)
    mean: torch.Tensor  # bf16 [B, 16, H, W]: VAE posterior mean (unscaled latent space)
    logvar: torch.Tensor  # bf16 [B, 16, H, W]: VAE posterior log-variance
    timestep: torch.Tensor | None  # int64 [B]: eval timestep index 0..7; None if the split has no column
    sample_ids: torch.Tensor  # int64 [B]: global sample index in the split
    num_bytes: int  # bytes of the binary cells read (npy headers included), for the load profile

    def __len__(self) -> int:
        return self.sample_ids.shape[0]

    def _map(self, fn) -> FluxBatch:
        return dataclasses.replace(
            self,
            t5=fn(self.t5),
            clip=fn(self.clip),
            mean=fn(self.mean),
            logvar=fn(self.logvar),
            timestep=None if self.timestep is None else fn(self.timestep),
            sample_ids=fn(self.sample_ids),
        )

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> FluxBatch:
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> FluxBatch:
        """Called by DataLoader(pin_memory=True)."""
        return self._map(torch.Tensor.pin_memory)


def batch_buffer(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor for one batch field: a view of the batch's reused slab when a
    loader builds the batch (common.data.batch_arena; shared memory inside a loader worker)."""
    return batch_empty(shape, dtype)
