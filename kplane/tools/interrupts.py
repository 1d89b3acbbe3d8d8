"""Ctrl-C while a command's modules load: noted there, raised once they are loaded."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Within the block SIGINT is only noted; leaving it, a noted SIGINT raises
    KeyboardInterrupt. Raised inside an import, it could land in a finaliser or an import
    lock's callback, where Python prints and drops it, and the command would run on.
    Only on the main thread and where SIGINT has Python's default handler."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if noted:
        raise KeyboardInterrupt
