"""Random numbers: keyed per-purpose generators and the run's streams."""
