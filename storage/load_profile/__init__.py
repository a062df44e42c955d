"""The measured storage load of a training run, in load_profile.json beside it.

- `profiler`, `session`, `merge`: one rank's profile while it trains; all ranks' in load_profile.json.
  The reads themselves are recorded where the loaders read (common.data.reads).
- `block_device`: what the block devices under the data served (/proc/diskstats).
- `stats`, `plots`: distributions, and the PNGs beside the profile.
- `phases`: what the data path read and wrote outside its batches (a cache build, a window's scan:
  common.data.phases), every rank's with totals per name, and its settings beside the reference's.

Its export and replays as DLIO workloads are storage.dlio.
"""
