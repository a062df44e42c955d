import sys

from storage.sweep.cli import main

sys.exit(main())
