"""The measured storage and compute load of a training run, and its export as a DLIO workload.

- `reads`: what a batch source reads, recorded where it reads (note_reads / note_records).
- `profiler`, `session`, `merge`: one rank's profile while it trains; all ranks' in load_profile.json.
- `byte_ranges`: the distinct bytes read (per-file unions of byte ranges); `block_device`: what the
  block devices under the data served (/proc/diskstats).
- `plots`: the PNGs beside it.
- `export`: MLPerf Storage workload/datagen YAMLs and a YAML DLIO 2.0.0 runs.
- `replay`: runs DLIO 2.0.0 on the export and compares (python -m common.load_profile replay RUN_DIR).

This package's __init__ imports nothing heavy: common.data.loader imports `reads` in every loader worker.
"""
