"""``python -m planner``: the command line (see ``planner.cli``)."""

import sys

from planner.cli import main

if __name__ == "__main__":
    sys.exit(main())
