"""TorchRec's TrainPipelineSparseDist for DLRM-HSTU, driven one step at a time by the common loop.

- `PipelinedDlrmTask.train_next` is the loop's `BatchPullingTask` hook: three batches in flight,
  each step reports the index of the batch it trained, so the loop's position counts trained batches.
- Evaluation first calls `pause`: pulled, untrained batches go back to the front of the feed, so
  training sees exactly the batches, in the order, that the plain loop would.
- How it traces the model and overlaps the all-to-all: README.md beside this file.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Iterator

import torch
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from torchrec.distributed.train_pipeline.runtime_forwards import PipelinedForward
from torchrec.optim.keyed import CombinedOptimizer

from common.run.task import EvalOutput, EvalPoint, StepContext, StepOutput
from recommendation_v4.data.batch import HSTUBatch
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.task import DlrmTask, global_max_sequence_length


def uses_sparse_dist(choice: str, device: torch.device) -> bool:
    """`recommendation_v4.TrainConfig.train_pipeline`: "auto" pipelines on GPUs only; on a CPU there
    are no side streams for the copy and the all-to-all to run on, so nothing would overlap."""
    if choice == "auto":
        return device.type == "cuda"
    return choice == "sparse_dist"


def dlrm_task_class(choice: str, device: torch.device) -> type[DlrmTask]:
    return PipelinedDlrmTask if uses_sparse_dist(choice, device) else DlrmTask


class _ClipThenStep:
    """The optimizer the pipeline steps: clips the dense gradients first, as the plain step does.

    The pipeline calls only `zero_grad()` and `step()` on it, between which it runs the backward.
    """

    def __init__(self, optimizer: CombinedOptimizer, dense_params: list[torch.nn.Parameter], max_norm: float) -> None:
        self._optimizer = optimizer
        self._dense_params = dense_params
        self._max_norm = max_norm

    def zero_grad(self) -> None:
        self._optimizer.zero_grad()

    def step(self) -> None:
        if self._max_norm > 0:
            torch.nn.utils.clip_grad_norm_(self._dense_params, self._max_norm)
        self._optimizer.step()


class _Feed:
    """What the pipeline pulls from: one window's `(index, batch)` iterator, with the batches handed
    back by a pause served first, the index of each batch pulled kept in order, and the time spent
    waiting for the loader added up."""

    def __init__(self, source: Iterator[tuple[int, HSTUBatch]], *, pin: bool) -> None:
        self.source = source
        self.pin = pin
        self.handed_back: collections.deque[tuple[int, HSTUBatch]] = collections.deque()
        self.in_flight: collections.deque[int] = collections.deque()  # pulled, not trained yet; oldest first
        self.wait_s = 0.0

    def __iter__(self) -> "_Feed":
        return self

    def __next__(self) -> HSTUBatch:
        if self.handed_back:
            index, batch = self.handed_back.popleft()  # already on the device: no second pin or copy
        else:
            t0 = time.perf_counter()
            index, batch = next(self.source)  # StopIteration: the window is done, for the pipeline too
            if self.pin:
                # the loader's batches live in shared (pageable) memory: the copy to the GPU only runs
                # asynchronously from page-locked memory
                batch = batch.pin_memory()
            self.wait_s += time.perf_counter() - t0
        self.in_flight.append(index)
        return batch


@dataclasses.dataclass
class _Trained:
    loss: torch.Tensor  # this rank's loss, detached
    batch: HSTUBatch


class SparseDistPipeline:
    """TrainPipelineSparseDist over the DMP, one `step` per loop step."""

    def __init__(self, *, dmp: DistributedModelParallel, model: DlrmHSTU, optimizer: CombinedOptimizer,
                 dense_params: list[torch.nn.Parameter], grad_clip_norm: float, device: torch.device) -> None:
        self._dmp = dmp
        self._model = model
        self._pin = device.type == "cuda"
        self._pipeline = TrainPipelineSparseDist(
            model=dmp,
            optimizer=_ClipThenStep(optimizer, dense_params, grad_clip_norm),  # type: ignore[arg-type]
            device=device,
            execute_all_batches=True,  # train the batches still in flight when the window's iterator ends
            custom_model_fwd=self._forward,
        )
        self._feed: _Feed | None = None

    def _forward(self, batch: HSTUBatch) -> tuple[torch.Tensor, _Trained]:
        # the pipeline sums what comes first over dim 0 and calls backward on it: a scalar stays itself
        max_len = global_max_sequence_length(self._model, batch)
        logits = self._dmp(batch, max_seq_len=max_len)
        loss = self._model.loss(logits, batch.labels)
        return loss, _Trained(loss=loss.detach(), batch=batch)

    def step(self, batches: Iterator[tuple[int, HSTUBatch]]) -> tuple[int, _Trained, float]:
        """Trains the next batch of `batches`: (its index in the window, what it trained, seconds waited
        for data). Raises StopIteration when the window has no batch left."""
        if self._feed is None or self._feed.source is not batches:
            # a new window: whatever is still in flight came from an iterator the loop has left
            self.pause()
            self._feed = _Feed(batches, pin=self._pin)
        waited = self._feed.wait_s
        trained: _Trained = self._pipeline.progress(self._feed)
        if not isinstance(self._model.embedding_collection.forward, PipelinedForward):
            # TorchRec only logs a warning when its trace cannot follow the lookup's input and then
            # trains without overlap; this option exists for the overlap, so say it plainly
            raise RuntimeError(
                "recommendation_v4.TrainConfig.train_pipeline='sparse_dist': TorchRec did not pipeline the "
                "EmbeddingCollection (its input must be read from the batch as `batch.features`, see DlrmHSTU.forward)"
            )
        return self._feed.in_flight.popleft(), trained, self._feed.wait_s - waited

    def pause(self) -> None:
        """Gives the model its own forward back (for evaluation) and the feed the batches pulled ahead.

        The next `step` traces the model again and refills the pipeline from the feed; the batch whose
        input all-to-all had already run gets it once more (every rank alike), nothing is trained twice.
        """
        pipeline, feed = self._pipeline, self._feed
        for context in pipeline.contexts:
            # the all-to-alls started for the next batch are completed, not abandoned: every rank waits
            # for the same collectives and no buffer is released under a running one
            for request in context.input_dist_tensors_requests.values():
                request.wait()
        if feed is not None and pipeline.batches:
            pulled = list(pipeline.batches)
            if len(pulled) != len(feed.in_flight):
                raise RuntimeError(f"train pipeline holds {len(pulled)} batches but pulled {len(feed.in_flight)}")
            feed.handed_back = collections.deque(zip(feed.in_flight, pulled)) + feed.handed_back
            feed.in_flight.clear()
        pipeline.detach()  # the EmbeddingCollection's own forward and input all-to-all are back
        pipeline.reset()  # no batch in flight: the next progress() re-attaches and refills


@dataclasses.dataclass
class PipelinedDlrmTask(DlrmTask):
    """DlrmTask whose training runs through TrainPipelineSparseDist (`recommendation_v4.TrainConfig.
    train_pipeline`); evaluation and checkpoints are the plain task's. Nothing of the pipeline goes
    into a checkpoint: the batches it holds are not trained yet, and the loop's position points at
    the first of them."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.pipeline = SparseDistPipeline(dmp=self.dmp, model=self.model, optimizer=self.optimizer,
                                           dense_params=self._dense_params, grad_clip_norm=self.grad_clip_norm,
                                           device=self.device)

    def train_next(self, batches: Iterator[tuple[int, HSTUBatch]], step: StepContext) -> tuple[int, StepOutput]:
        self.dmp.train()
        index, trained, waited = self.pipeline.step(batches)
        return index, StepOutput(loss=trained.loss, samples=trained.batch.batch_size,
                                 sample_ids=trained.batch.sample_ids, data_wait_s=waited)

    def train_step(self, batch: HSTUBatch, step: StepContext) -> StepOutput:
        self.pipeline.pause()  # a batch the pipeline did not prepare must meet the model's own forward
        return super().train_step(batch, step)

    def evaluate(self, at: EvalPoint) -> EvalOutput:
        self.pipeline.pause()
        return super().evaluate(at)
