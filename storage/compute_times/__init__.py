"""Compute times: the seconds one training step takes per accelerator, which an emulated accelerator sleeps
instead of training. tables.py reads each benchmark's tables (compute_times.csv, and the one from MLPerf
Training result logs); training_logs.py derives those figures from published logs. Not to be confused with
storage.compute, which computes a step's FLOPs, memory and collectives from the model."""
