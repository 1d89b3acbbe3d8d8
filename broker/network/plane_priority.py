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

import os
import threading

import structlog

log = structlog.get_logger(__name__)


class ControlPlanePriority:
    """Counts control-plane requests in flight; data-plane threads yield while any is.

    ``data_thread_nice`` (``kplane.data.plane.thread.nice``) also lowers the OS scheduling
    priority of every data-plane thread, so that on a busy machine the control plane's
    threads run first when they and data-plane threads are all waiting for a CPU (and for
    the interpreter a releasing thread hands over).
    """

    def __init__(self, max_pause_s: float = 0.05, data_thread_nice: int = 0) -> None:
        self.max_pause_s = max_pause_s
        self.data_thread_nice = data_thread_nice
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

    def enter_data_thread(self) -> None:
        """Called first by each data-plane thread: lower its scheduling priority."""
        if self.data_thread_nice <= 0:
            return
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.data_thread_nice)
        except (OSError, AttributeError) as exc:  # a platform without per-thread nice
            log.warning("data-plane thread priority not lowered", error=str(exc))
