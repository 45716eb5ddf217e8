"""``python -m cutover.cli``: the console script without its entry point."""

import sys

from cutover.cli import main

sys.exit(main())
