import sys

from storage.whatif.cli import main

sys.exit(main())
