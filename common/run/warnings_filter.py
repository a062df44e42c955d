"""Known library noise, silenced narrowly so a new user's first screen shows only the run.

Each entry names the exact message and, where the message alone is not narrow enough, the module
it is attributed to; anything else from the same libraries still shows. Causes the project can remove are removed where they arise instead
(recommendation_v4/parallel/sharding.py builds the planner's topology through TorchRec's factory and
gives it an explicit storage reservation).
"""

from __future__ import annotations

import logging
import warnings

# (category, message prefix as a regex, module the warning is attributed to)
_WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    # TorchRec's data-parallel wrapper passes broadcast_buffers=False to DDP; the replacement
    # flag also syncs buffers at init, which TorchRec has not switched to yet
    (FutureWarning, r"`broadcast_buffers` is deprecated", r"torchrec\.distributed\.model_parallel"),
    # a sharded EmbeddingCollection's state dict is made of ShardedTensors (TorchRec's choice);
    # torch.distributed.checkpoint says so again while it plans the load of a resume, and the
    # warning is attributed to whichever module asked for the state dict (a benchmark's own): the
    # message alone is narrow enough
    (FutureWarning, r"Please use DTensor instead and we are deprecating ShardedTensor", r""),
    # FSDP2 warns, once per module class, that a Linear or reshaped output is a view; it matters only
    # to code that updates such an output in place, which the FLUX model never does (all out of place)
    (UserWarning, r"FSDP2-wrapped module \(\w+\) returned a view tensor", r"torch\.distributed\.fsdp\..*"),
)

# (logger, message prefix): torch logs these once per process through its own loggers
_LOG_RECORDS: tuple[tuple[str, str], ...] = (
    # TorchRec's jagged ops ask is_fx_tracing() in every forward; torch announces its new meaning
    ("torch.fx._symbolic_trace", "is_fx_tracing will return true for both fx.symbolic_trace and torch.export"),
)


class _DropMessages(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


def quiet_known_library_noise() -> None:
    for category, message, module in _WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    by_logger: dict[str, tuple[str, ...]] = {}
    for name, prefix in _LOG_RECORDS:
        by_logger[name] = by_logger.get(name, ()) + (prefix,)
    for name, prefixes in by_logger.items():
        logging.getLogger(name).addFilter(_DropMessages(prefixes))
