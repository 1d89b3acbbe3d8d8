"""A Ctrl-C while a command's modules load is held until they are loaded."""

from __future__ import annotations

import os
import signal
import time

import pytest

from kplane.tools.interrupts import interrupts_deferred


def test_a_sigint_inside_the_block_is_raised_on_leaving_it() -> None:
    reached_the_end = False
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler has run by now; it only noted the signal
        reached_the_end = True
    assert reached_the_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_a_sigint_the_block_leaves_quietly() -> None:
    with interrupts_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
