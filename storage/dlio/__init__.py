"""A run's load profile as DLIO workloads: the export (MLPerf Storage's schema and DLIO 2.0.0's),
the replays (generic and the reader plugin), DLIO's environment and its data-generation rate; the
data path's storage phases as DLIO workloads (phase_workloads, phase_commands).
`python -m storage.dlio {export,replay} RUN_DIR`."""
