"""A run's load profile as DLIO workloads, in four families: export/ (MLPerf Storage's schema and DLIO
2.0.0's, the storage phases' and the checkpoint's workloads, the mlpstorage commands), replay/ (DLIO run on
them and compared with the measured run: generic, object, MLPerf Storage workload), plugin/ (the reader
plugin that makes, per sample, the reads the profile recorded) and environment/ (DLIO's own venvs and its
generator's rate). `python -m storage.dlio {export,replay} RUN_DIR | checkpoint OUT`."""
