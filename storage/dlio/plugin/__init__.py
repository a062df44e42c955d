"""The reader plugin replay: the read plan a DLIO reader follows to make, per sample, the reads the profile
recorded (plan.py), the reader DLIO loads (dlio_reader.py, with sample_reader.py) and its workload."""
