"""The run every trainer shares: its lifecycle (`lifecycle.main`), the contract with a benchmark
(`benchmark`: Benchmark, its build, DataPlan, TrainingPlan, RunContext), the extension point for
the layers above (`extensions`), settings, loop, logs, run directory and preemption.

This package's __init__ imports nothing: a trainer imports `common.run.early_signals` before its
heavy imports, to catch a preemption signal that arrives while they load.
"""
