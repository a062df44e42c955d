"""`python -m storage.compute_times`: the compute time per step of each benchmark and accelerator (tables.py)."""

import sys

from storage.compute_times.tables import main

sys.exit(main())
