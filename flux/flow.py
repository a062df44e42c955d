"""Rectified flow, as the MLPerf FLUX.1 reference trains and scores it, and its random draws.

A train sample's draws: a fresh posterior sample eps (z = mean + exp(logvar / 2) * eps), the
noise, the time t ~ U[0, 1) and whether classifier-free guidance drops its text (p = 0.1). A
validation sample is scored at its own fixed t = timestep / 8 with no drop.

    x0     = (z - shift) * scale
    x_t    = (1 - t) * x0 + t * noise           t = 0 is the data, t = 1 pure noise
    target = noise - x0                         the velocity the model predicts
    loss   = mean squared error, in fp32

Two ways to draw (`flux.TrainConfig.noise`):
- per sample (default): each sample's numbers come from a generator keyed on (seed, purpose,
  step, sample id), so they do not depend on the world size, the batch split or a resume point;
  a validation sample gets the same numbers at every evaluation, so evaluations differ only by
  the model;
- per rank: each rank draws its batch from its own stream (`RandomStreams.rank`, the evaluation
  from `RandomStreams.eval`), as the reference's per-rank seeds do; the streams are checkpointed.
"""

from __future__ import annotations

import dataclasses

import torch

from common.randomness.keyed import keyed_generator

# second keys of the per-sample generators
TRAIN_DRAWS = 0x54524E  # "TRN"
EVAL_DRAWS = 0x45564C  # "EVL"
NUM_EVAL_TIMESTEPS = 8


@dataclasses.dataclass
class FlowDraws:
    posterior: torch.Tensor  # [B, C, H, W]: eps of the VAE posterior sample
    noise: torch.Tensor  # [B, C, H, W]
    t: torch.Tensor  # [B] fp32 in [0, 1)
    drop_text: torch.Tensor  # [B] bool: replace both text encodings by the empty prompt's


def keyed_draws(*, seed: int, purpose: int, step: int, sample_ids: torch.Tensor, latent_shape: tuple[int, ...],
                cfg_dropout: float) -> FlowDraws:
    """Each sample's draws from its own generator, in a fixed order (t, drop, posterior, noise)."""
    ts, drops, posteriors, noises = [], [], [], []
    for sample in sample_ids.tolist():
        generator = keyed_generator(seed, purpose, step, sample)
        ts.append(torch.rand((), generator=generator))
        drops.append(torch.rand((), generator=generator) < cfg_dropout)
        posteriors.append(torch.randn(latent_shape, generator=generator))
        noises.append(torch.randn(latent_shape, generator=generator))
    return FlowDraws(posterior=torch.stack(posteriors), noise=torch.stack(noises), t=torch.stack(ts),
                     drop_text=torch.stack(drops))


def stream_draws(generator: torch.Generator, *, batch: int, latent_shape: tuple[int, ...],
                 cfg_dropout: float) -> FlowDraws:
    """A batch's draws from one rank's stream (on the generator's device)."""
    device = generator.device
    t = torch.rand(batch, generator=generator, device=device)
    drop = torch.rand(batch, generator=generator, device=device) < cfg_dropout
    posterior = torch.randn((batch, *latent_shape), generator=generator, device=device)
    noise = torch.randn((batch, *latent_shape), generator=generator, device=device)
    return FlowDraws(posterior=posterior, noise=noise, t=t, drop_text=drop)


def clean_latents(mean: torch.Tensor, logvar: torch.Tensor, posterior: torch.Tensor, *, shift: float,
                  scale: float) -> torch.Tensor:
    """x0: a sample of the VAE posterior, shifted and scaled into the space the model learns."""
    z = mean + torch.exp(0.5 * logvar) * posterior
    return (z - shift) * scale


def noised(x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_t, target) at per-sample times t [B]."""
    t = t.to(x0.dtype).view(-1, *([1] * (x0.ndim - 1)))
    return (1 - t) * x0 + t * noise, noise - x0
