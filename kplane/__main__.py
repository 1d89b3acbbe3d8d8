"""``python -m kplane``: the ``kplane`` command."""

import sys

from kplane.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
