"""FLUX.1's train step and validation, plugged into the common training loop."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F

from common.distributed.collectives import reduce_in_place
from common.run.task import EvalOutput, EvalPoint, StepContext, StepOutput
from common.randomness.streams import RandomStreams
from flux.data.batch import FluxBatch
from flux.data.empty_encodings import EmptyEncodings
from flux.flow import EVAL_DRAWS, NUM_EVAL_TIMESTEPS, TRAIN_DRAWS, FlowDraws, clean_latents, keyed_draws, noised, stream_draws
from flux.model import image_position_ids, pack_latents, text_position_ids, unpack_latents
from flux.parallel import ParallelModel, TrainState
from flux.run_config import TrainConfig


@dataclasses.dataclass
class FluxTask:
    model: ParallelModel
    optimizer: torch.optim.Optimizer
    config: TrainConfig
    empty: EmptyEncodings  # the empty prompt's encodings, for classifier-free guidance dropout
    streams: RandomStreams
    device: torch.device
    eval_batches: Callable[[EvalPoint], Iterable[tuple[int, FluxBatch]]]

    def __post_init__(self) -> None:
        # the latent math runs in the compute precision, as the reference's bf16 tensors do
        self.dtype = torch.bfloat16 if self.config.bf16 else torch.float32
        self._empty_t5 = self.empty.t5.to(self.device, self.dtype)
        self._empty_clip = self.empty.clip.to(self.device, self.dtype)

    def scheduled_optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    def app_state(self) -> dict[str, Any]:
        return {"train": TrainState(self.model, self.optimizer)}

    # ------------------------------------------------------------------------------ training
    def _draws(self, batch: FluxBatch, *, step: int, purpose: int, generator: torch.Generator,
               cfg_dropout: float) -> FlowDraws:
        shape = tuple(batch.mean.shape[1:])
        if self.config.noise == "per_sample":
            draws = keyed_draws(seed=self.streams.seed, purpose=purpose, step=step, sample_ids=batch.sample_ids,
                                latent_shape=shape, cfg_dropout=cfg_dropout)
        else:
            draws = stream_draws(generator, batch=len(batch), latent_shape=shape, cfg_dropout=cfg_dropout)
        return FlowDraws(*(x.to(self.device) for x in (draws.posterior, draws.noise, draws.t, draws.drop_text)))

    def _predict(self, x_t: torch.Tensor, *, t5: torch.Tensor, clip: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        batch, _, height, width = x_t.shape
        img_ids = image_position_ids(batch_size=batch, height=height, width=width, device=self.device)
        txt_ids = text_position_ids(batch_size=batch, length=t5.shape[1], device=self.device)
        with self.model.compute_context():
            tokens = self.model.forward(pack_latents(x_t), img_ids, t5, txt_ids, t.to(x_t.dtype), clip)
        return unpack_latents(tokens, height=height, width=width)

    def _inputs(self, batch: FluxBatch, draws: FlowDraws) -> tuple[torch.Tensor, ...]:
        """(x_t, target, t5, clip) of a batch on the device."""
        mean, logvar = batch.mean.to(self.device, self.dtype), batch.logvar.to(self.device, self.dtype)
        x0 = clean_latents(mean, logvar, draws.posterior.to(self.dtype), shift=self.config.latent_shift,
                           scale=self.config.latent_scale)
        x_t, target = noised(x0, draws.noise.to(self.dtype), draws.t)
        t5, clip = batch.t5.to(self.device, self.dtype), batch.clip.to(self.device, self.dtype)
        drop = draws.drop_text
        if bool(drop.any()):
            t5 = torch.where(drop.view(-1, 1, 1), self._empty_t5, t5)
            clip = torch.where(drop.view(-1, 1), self._empty_clip, clip)
        return x_t, target, t5, clip

    def train_step(self, batch: FluxBatch, step: StepContext) -> StepOutput:
        self.model.module.train()
        draws = self._draws(batch, step=step.step, purpose=TRAIN_DRAWS, generator=self.streams.rank,
                            cfg_dropout=self.config.cfg_dropout)
        x_t, target, t5, clip = self._inputs(batch, draws)
        prediction = self._predict(x_t, t5=t5, clip=clip, t=draws.t)
        loss = F.mse_loss(prediction.float(), target.float())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.module.parameters(), self.config.grad_clip_norm)
        self.optimizer.step()
        return StepOutput(loss=loss.detach(), samples=len(batch), sample_ids=batch.sample_ids)

    # ---------------------------------------------------------------------------- validation
    @torch.no_grad()
    def evaluate(self, at: EvalPoint) -> EvalOutput:
        """Every validation sample at its own t = timestep / 8; the global mean of per-sample MSEs.

        Sums and counts are gathered per timestep, so the per-timestep losses come for free; with
        `eval_unconditional` every sample is also scored with the empty prompt (the same draws).
        """
        self.model.module.eval()
        buckets = 2 if self.config.eval_unconditional else 1
        sums = torch.zeros(buckets, NUM_EVAL_TIMESTEPS, dtype=torch.float64, device=self.device)
        counts = torch.zeros(NUM_EVAL_TIMESTEPS, dtype=torch.float64, device=self.device)
        try:
            for _, batch in self.eval_batches(at):
                draws = self._draws(batch, step=0, purpose=EVAL_DRAWS, generator=self.streams.eval, cfg_dropout=0.0)
                draws.t = batch.timestep.to(self.device, torch.float32) / NUM_EVAL_TIMESTEPS
                bucket = batch.timestep.to(self.device)
                counts.index_add_(0, bucket, torch.ones(len(batch), dtype=torch.float64, device=self.device))
                for which in range(buckets):
                    draws.drop_text = torch.full((len(batch),), which == 1, device=self.device)
                    x_t, target, t5, clip = self._inputs(batch, draws)
                    prediction = self._predict(x_t, t5=t5, clip=clip, t=draws.t)
                    per_sample = F.mse_loss(prediction.float(), target.float(), reduction="none").mean(dim=(1, 2, 3))
                    sums[which].index_add_(0, bucket, per_sample.double())
        finally:
            self.model.after_evaluation()
            self.model.module.train()
        reduce_in_place(sums)
        reduce_in_place(counts)
        total = int(counts.sum().item())
        loss = float(sums[0].sum() / max(total, 1))
        metrics = {"eval_loss": loss}
        for k in range(NUM_EVAL_TIMESTEPS):
            if counts[k] > 0:
                metrics[f"eval_loss_t{k}"] = float(sums[0, k] / counts[k])
        if buckets == 2:
            metrics["unconditional_eval_loss"] = float(sums[1].sum() / max(total, 1))
        return EvalOutput(metrics=metrics, quality=loss, samples=total,
                          shown=("eval_loss", "unconditional_eval_loss"))
