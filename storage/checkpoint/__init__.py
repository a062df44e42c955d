"""Emulated checkpoints: a benchmark's save and restore at the reference flavor and world size, through
DCP's own planner and FileSystemWriter and the project's checkpoint manager, without the real tensors
(README.md beside this file). `planning` makes a plan (`plan`, `rank_items`); `emulated` saves and
restores one rank's share; `python -m storage.checkpoint` runs one host's ranks; `layout` compares a
checkpoint with a real save's."""
