"""The progress line of ``kplane loadtest`` on stderr.

On a terminal one line is rewritten in place with ``\\r``; otherwise a plain line is printed
every ``interval_s`` seconds, so logs of CI runs stay short.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Shows scenario, elapsed/total seconds, messages sent, control requests, current p99."""

    def __init__(self, stream: TextIO | None = None, interval_s: float = 5.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.interval_s = interval_s
        self._last_line = float("-inf")
        self._width = 0

    def update(
        self,
        scenario: str,
        elapsed_s: float,
        total_s: float,
        messages: int,
        control_requests: int,
        control_p99_ms: float | None,
    ) -> None:
        p99 = "-" if control_p99_ms is None else f"{control_p99_ms:.1f} ms"
        line = (
            f"{scenario}: {min(elapsed_s, total_s):.0f}/{total_s:.0f} s, "
            f"{messages} messages, {control_requests} control requests, control p99 {p99}"
        )
        if self.tty:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
            self.stream.flush()
            return
        now = time.monotonic()
        if now - self._last_line >= self.interval_s:
            self._last_line = now
            print(line, file=self.stream, flush=True)

    def message(self, text: str) -> None:
        """A line of its own (a scenario starting or ending)."""
        self.done()
        print(text, file=self.stream, flush=True)

    def done(self) -> None:
        """End the in-place line, if one is shown."""
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
