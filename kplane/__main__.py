"""``python -m kplane``: the ``kplane`` command."""

import signal
import sys

if __name__ == "__main__":
    # Ctrl-C while importing: quiet, as in every kplane command. The interrupt is only
    # noted while the modules load: raised there, it could land in a finaliser and be
    # ignored, and the broker would start regardless.
    interrupted: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:
        signal.signal(signal.SIGINT, lambda signum, _frame: interrupted.append(signum))
    try:
        from kplane.tools.cli import main
    except KeyboardInterrupt:
        sys.exit(130)
    if previous is signal.default_int_handler:
        signal.signal(signal.SIGINT, previous)  # from here on Ctrl-C raises again
    if interrupted:
        sys.exit(130)
    sys.exit(main())
