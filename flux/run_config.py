"""Gin-configurable settings of a FLUX.1 run: `flux.<Name>.<field>` in gin files.

Seed, run name, step budget and device are the shared `common.RunConfig`. The closed-division
rules pin AdamW's betas (0.9, 0.95), epsilon 1e-8, weight decay 0.1 and gradient clipping 1.0;
the learning rate, its warm-up and the global batch size are free (see configs/flux_schnell.gin
for the RCP pairs).
"""

from __future__ import annotations

import dataclasses

import gin

from common.config.checks import (
    flavor_from,
    read,
    require,
    require_bool,
    require_choice,
    require_int,
    require_number,
)
from common.data.epochs import RANK_SLICES
from common.object_store.location import Location, config_location
from flux.model.flavors import FLAVORS, FluxFlavor

PARALLELISMS = ("fsdp", "ddp")
NOISE_MODES = ("per_sample", "per_rank")


@gin.configurable(module="flux")
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    flavor: str = "flux-tiny"
    model_overrides: dict = dataclasses.field(default_factory=dict)  # FluxFlavor field -> value
    global_batch_size: int = 16
    eval_batch_size: int = 16  # validation samples per rank and batch (the reference's default)
    epochs: int = 1  # passes over the train split at most; the run stops earlier at the target
    learning_rate: float = 1e-4
    warmup_steps: int = 0  # linear, the first step at learning_rate / warmup_steps (torchtitan's rule)
    adamw_betas: tuple[float, float] = (0.9, 0.95)
    adamw_eps: float = 1e-8
    weight_decay: float = 0.1  # on every parameter: one group, as the reference
    grad_clip_norm: float = 1.0
    cfg_dropout: float = 0.1  # per sample, both text encodings replaced by the empty prompt's
    latent_shift: float = 0.1159  # x0 = (z - shift) * scale: the FLUX.1 autoencoder's constants
    latent_scale: float = 0.3611
    # evaluate every ceil(eval_every_samples / GBS) steps (262,144 samples in the closed rules)
    eval_every_samples: int = 262_144
    # The reference's cadence (torchtitan flux train.py): the grid alone. Either extra pass reads
    # the whole validation split (~64 GB at reference scale), the untrained one inside the timed run.
    evaluate_untrained: bool = False  # score the fresh model before the first step (a baseline)
    eval_at_end: bool = False  # score once more when the run stops off the grid (step budget, data end)
    target_eval_loss: float | None = 0.586  # lower is better: the run stops at <= target
    # "per_sample": noise, timestep, posterior sample and CFG drop keyed on (seed, step, sample);
    # "per_rank": drawn from each rank's own stream, as the reference's rank-offset seeds do
    noise: str = "per_sample"
    eval_unconditional: bool = False  # also score every validation sample with the empty prompt
    parallelism: str = "fsdp"  # FSDP2 fully_shard per block; "ddp" replicates the model
    dp_replicate: int = 1  # HSDP: replicas of the FSDP group (a 2-D mesh replicate x shard)
    bf16: bool = False  # bf16 compute (FSDP2 mixed precision, fp32 reduce; autocast under DDP)
    activation_checkpointing: bool = False  # recompute every block in the backward

    def __post_init__(self) -> None:
        require_int(self, "global_batch_size", "eval_batch_size", "epochs", "eval_every_samples", "dp_replicate",
                    minimum=1)
        require_int(self, "warmup_steps", minimum=0)
        require_number(self, "learning_rate", minimum=0.0, strictly=True)
        require_number(self, "adamw_eps", "weight_decay", "grad_clip_norm", minimum=0.0)
        require(self, "adamw_betas", len(tuple(self.adamw_betas)) == 2 and all(0 <= b < 1 for b in self.adamw_betas),
                "two numbers in [0, 1)")
        require(self, "cfg_dropout", 0 <= self.cfg_dropout <= 1, "in [0, 1]")
        require_number(self, "latent_scale", minimum=0.0, strictly=True)
        require(self, "target_eval_loss", self.target_eval_loss is None or self.target_eval_loss > 0, "> 0 or None")
        require_bool(self, "evaluate_untrained", "eval_at_end")
        require_choice(self, "noise", NOISE_MODES)
        require_choice(self, "parallelism", PARALLELISMS)
        require(self, "model_overrides", isinstance(self.model_overrides, dict), "a dict of FluxFlavor fields")

    def model(self) -> FluxFlavor:
        """The flavor with its overrides applied."""
        return flavor_from(self, FLAVORS)


@gin.configurable(module="flux")
@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the data is and how it is read.

    `dataset` names a directory under <data_root>/flux/: "synthetic-<size>-seed<N>" is generated
    there on first use (sizes of flux.data.synthetic_sizes), "mlcommons" is the download
    (flux/download_dataset.sh: cc12m_preprocessed, coco_preprocessed, empty_encodings).
    """

    data_root: str = "data"
    dataset: str = "synthetic-tiny-seed0"
    generate_if_missing: bool = True
    # The defaults are the reference's loader (torchtitan's StatefulDataLoader with its defaults):
    # every sample read in the training thread when the step asks for its batch, nothing ahead.
    num_workers: int = 0  # train loader processes (persistent across windows and epochs)
    prefetch_factor: int = 2  # batches each train worker reads ahead (with num_workers > 0 only)
    prefetch_next_window: bool = False  # read the next window's first batch on a thread meanwhile
    eval_num_workers: int = 0
    batches_per_window: int = 32  # steps per streaming window (on each rank a run of its consecutive samples)
    # "split": each rank one contiguous chunk of the split, in order, every epoch (the reference's
    # split_dataset_by_node); "window": each rank a contiguous slice of every window; "batch": each
    # rank a share of every global batch (1 and N ranks train the same samples per step)
    rank_slices: str = "split"
    validation_max_samples: int = 0  # the first this many validation samples (0: all of them)

    # data_root resolved once, as the config is read: a local Path, or an ObjectPath for s3://bucket/prefix
    location: Location = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "location", config_location(self, "data_root"))
        require(self, "dataset", bool(self.dataset) and "/" not in self.dataset, "a dataset directory name")
        require_int(self, "num_workers", "eval_num_workers", "validation_max_samples", minimum=0)
        require_int(self, "batches_per_window", "prefetch_factor", minimum=1)
        require_bool(self, "prefetch_next_window")
        require_choice(self, "rank_slices", RANK_SLICES)


@dataclasses.dataclass(frozen=True)
class FluxConfigs:
    """Everything gin configures for one FLUX.1 run, read and checked before anything starts."""

    train: TrainConfig
    data: DataConfig

    @classmethod
    def read(cls) -> "FluxConfigs":
        configs = cls(read(TrainConfig), read(DataConfig))
        configs.train.model()  # a bad flavor or override fails here
        return configs
