"""FLUX.1's data path beside its reference's (torchtitan 9603aa83 experiments/flux, as MLPerf
Training pins it): one `DataPathSetting` per property that decides what storage sees, with this
run's value, the reference's and the gin binding that sets it here (docs/fidelity.md has the
reference's file:line for each). The load profile writes them into load_profile.json.
"""

from __future__ import annotations

from common.data.fidelity import DataPathSetting
from common.data.loader import StreamingLoader
from flux.run_config import DataConfig, TrainConfig
from flux.schedule import eval_interval_steps

# the closed rules' evaluation interval in samples; the reference evaluates first at ceil(this / GBS)
REFERENCE_EVAL_EVERY_SAMPLES = 262_144
# Hugging Face's save_to_disk writes one record batch per shard (an estimate from its writer's
# code; the published shards are the reference's own files, so for them their own count stands)
REFERENCE_RECORD_BATCHES_PER_SHARD = 1


def flux_data_path(*, train: TrainConfig, data: DataConfig, loader: StreamingLoader,
                   record_batches_per_shard: int) -> list[DataPathSetting]:
    """`train` as this run reads it (its global batch), `loader` the training loader built from `data`."""
    gbs = train.global_batch_size
    on_reference_files = data.dataset == "mlcommons"
    return [
        DataPathSetting("order", "in order", "in order", "none: FLUX.1 always reads in order (flux/schedule.py)"),
        DataPathSetting("rank_split", data.rank_slices, "split", "flux.DataConfig.rank_slices"),
        DataPathSetting("train_workers", loader.num_workers, 0, "flux.DataConfig.num_workers"),
        DataPathSetting("prefetch_per_worker", loader.prefetch_factor, 0, "flux.DataConfig.prefetch_factor"),
        DataPathSetting("next_window_prefetch", loader.prefetch_next_window, False,
                        "flux.DataConfig.prefetch_next_window"),
        DataPathSetting("eval_workers", data.eval_num_workers, 0, "flux.DataConfig.eval_num_workers"),
        DataPathSetting("first_eval_step", eval_interval_steps(train), -(-REFERENCE_EVAL_EVERY_SAMPLES // gbs),
                        "flux.TrainConfig.eval_every_samples"),
        DataPathSetting("untrained_eval", train.evaluate_untrained, False, "flux.TrainConfig.evaluate_untrained"),
        DataPathSetting("final_eval", train.eval_at_end, False, "flux.TrainConfig.eval_at_end"),
        DataPathSetting("record_batches_per_shard", record_batches_per_shard,
                        record_batches_per_shard if on_reference_files else REFERENCE_RECORD_BATCHES_PER_SHARD,
                        "python -m flux.data.synthetic --record-batch-bytes"),
    ]
