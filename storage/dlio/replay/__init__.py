"""The replays: DLIO run on an exported workload and compared with the measured run. The generic replay
(generic.py, one record per sample), the choice of replay by reader (choice.py), the object and MLPerf
Storage workload replays on DLIO 3.0.x, the command line (cli.py), and the count of what DLIO's ranks read
(counted_dlio.py, run by DLIO's python; dlio_reads.py)."""
