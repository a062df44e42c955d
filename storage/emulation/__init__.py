"""Accelerator emulation: each rank one accelerator whose model step is slept for its compute time
(each benchmark's compute_times.csv), while the benchmark's real loader reads the real files.
`extension` joins it to a run; `plan` and `task` are what runs; `report` is emulation.json, with
what the data path's phases cost (`phase_costs`)."""
