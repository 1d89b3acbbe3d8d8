"""ControlPlanePriority: control-plane requests run ahead of data-plane work.

KIP-291 gives controller requests their own listener, Processor, queue and handler so they
never wait behind client traffic. In one CPython process there is one more shared queue:
the GIL, which a control-plane thread otherwise waits for behind a dozen busy data-plane
threads (measured: tens of milliseconds at p99 under load). So while a control-plane request
is in flight, data-plane threads pause at their next safe point — a handler before its next
request, a Processor before reading or writing — and the control plane has the interpreter
to itself. A pause is bounded (``max_pause_s``), so a lost request cannot stall clients.
"""

from __future__ import annotations

import threading


class ControlPlanePriority:
    """Counts control-plane requests in flight; data-plane threads yield while any is."""

    def __init__(self, max_pause_s: float = 0.05) -> None:
        self.max_pause_s = max_pause_s
        self._in_flight = 0
        self._lock = threading.Lock()
        self._clear = threading.Event()
        self._clear.set()

    def begin(self) -> None:
        """A control-plane request entered the control plane."""
        with self._lock:
            self._in_flight += 1
            self._clear.clear()

    def end(self) -> None:
        """A control-plane request's response left (or was dropped)."""
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            if self._in_flight == 0:
                self._clear.set()

    def yield_to_control(self) -> None:
        """Called by data-plane threads at safe points: wait while control work runs."""
        if not self._clear.is_set():
            self._clear.wait(self.max_pause_s)
