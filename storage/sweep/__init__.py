"""The storage sweep: how many emulated accelerators a storage keeps above MLPerf Storage's AU bar,
on one client host or many (`python -m storage.sweep`, storage/sweep/cli.py), and what the data path's
storage phases cost on it (storage/sweep/phases.py)."""
