"""Accelerator emulation: what an accelerator takes per step (compute_times.csv), for storage
measurements whose model step is slept instead of run."""
