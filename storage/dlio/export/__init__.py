"""The export: a run's load profile written as MLPerf Storage and DLIO 2.0.0 workloads (workloads.py), the
mlpstorage commands that run them, the storage phases' and the object store's workloads, and the DLIO
checkpoint workloads closest to an emulated checkpoint."""
