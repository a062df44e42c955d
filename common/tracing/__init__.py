"""torch.profiler traces of chosen training steps, captured from config, and their merge.

    common.TraceConfig.steps = [52]         # gin: a window starts at global step 52 (1-based)
    common.TraceConfig.active_steps = 5     # records steps 52..56 after 1 warm-up step (51)

    tracer = StepTracer(config, run_dir=run_dir, rank=rank, device=device)
    tracer.step_begins(step); <train step>; tracer.step_ends(step)   # each step
    tracer.close()                                                   # at the end, or preemption

    python -m common.tracing list RUN_DIR
    python -m common.tracing merge RUN_DIR [--step S]

capture.py has the config and the tracer (per-rank files `traces/step<S>_rank<r>.json.gz`),
merge.py the merged file (`traces/step<S>_merged.json.gz`, one process row per rank),
__main__.py the command.
"""

from common.tracing.capture import (
    TRACES_DIR,
    StepTracer,
    TraceConfig,
    TraceExportWarning,
    trace_file,
)
from common.tracing.merge import RANK_PID_BASE, TraceFileError, merge_step, merge_traces, merged_file, rank_files, read_trace

__all__ = [
    "RANK_PID_BASE",
    "TRACES_DIR",
    "StepTracer",
    "TraceConfig",
    "TraceExportWarning",
    "TraceFileError",
    "merge_step",
    "merge_traces",
    "merged_file",
    "rank_files",
    "read_trace",
    "trace_file",
]
