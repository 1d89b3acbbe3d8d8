"""``python -m kplane``: the ``kplane`` command."""

import sys

if __name__ == "__main__":
    try:
        from kplane.tools.interrupts import interrupts_deferred

        with interrupts_deferred():
            from kplane.tools.cli import main
    except KeyboardInterrupt:  # Ctrl-C while importing: quiet, as in every kplane command
        sys.exit(130)
    sys.exit(main())
