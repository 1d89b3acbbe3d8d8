"""ControlPlanePriority: control-plane requests run ahead of data-plane work.

KIP-291 gives controller requests their own listener, Processor, queue and handler so they
never wait behind client traffic. In one CPython process there is one more shared queue:
the GIL. A thread that wants it asks the holder to drop it only after a whole switch
interval in which no other thread took it, so while busy data-plane threads hand the GIL
among themselves the control plane's threads can wait for milliseconds (measured: the
control Processor waited up to 7 ms to read a request that had arrived).

So data-plane threads pause at their next safe point — a handler before its next request, a
Processor before reading or writing — whenever the control plane needs the interpreter:

* a control-plane connection has unread bytes: its Processor has not run yet to read them
  (on a busy CPU it waits for the CPU, then for the GIL). The control connections' sockets
  are in an epoll set that any thread can poll;
* a control-plane request is in flight, from the Processor reading it to its response
  written.

A pause is bounded (``max_pause_s``), so a stuck control plane cannot stall clients.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time

import structlog

log = structlog.get_logger(__name__)

READABLE_PAUSE_S = 0.0001
"""How long a data-plane thread sleeps before looking again at a readable control socket."""
POLL_INTERVAL_NS = 100_000
"""The control sockets are polled at most this often over all data-plane threads. A poll is a
system call that lets go of the GIL, which is part of what lets a waiting control thread in,
and also its cost: with the data queue full (500 connections, one CPU) polling every 100 µs
cost the data plane about a quarter of its throughput, every 500 µs about a sixth, with a
control p99 of 1.1-1.5 ms and 1.8 ms; never polling kept the throughput and gave 18 ms."""


class ControlPlanePriority:
    """What data-plane threads yield to: control requests in flight or waiting to be read.

    ``data_thread_nice`` (``kplane.data.plane.thread.nice``) also lowers the OS scheduling
    priority of every data-plane thread, so that on a busy machine the control plane's
    threads run first when they and data-plane threads are all waiting for a CPU.
    """

    def __init__(
        self,
        max_pause_s: float = 0.05,
        data_thread_nice: int = 0,
        poll_interval_ns: int = POLL_INTERVAL_NS,
    ) -> None:
        self.max_pause_s = max_pause_s
        self.poll_interval_ns = poll_interval_ns
        self.data_thread_nice = data_thread_nice
        self._in_flight = 0
        self._lock = threading.Lock()
        self._clear = threading.Event()
        self._clear.set()
        self._unread = select.epoll()
        self._watched: dict[int, int] = {}
        self._polled_ns = time.monotonic_ns() - poll_interval_ns  # the first call polls
        self._unread_seen = False

    def watch(self, fd: int) -> None:
        """Watch a control-plane connection's socket for unread bytes (Processor thread).

        The epoll set holds a duplicate of ``fd``: a registration lives as long as the open
        file does, so the duplicate (closed only by ``unwatch``) keeps a closed connection's
        number from ever standing for another socket in the set."""
        dup = os.dup(fd)
        self._watched[fd] = dup
        self._unread.register(dup, select.EPOLLIN)

    def unwatch(self, fd: int) -> None:
        """Stop watching a control-plane connection (Processor thread)."""
        dup = self._watched.pop(fd, None)
        if dup is not None:
            self._unread.unregister(dup)
            os.close(dup)

    def pause_watch(self, fd: int, paused: bool) -> None:
        """A control connection stopped (or resumed) reading, holding back a pipelined
        request: its unread bytes do not count meanwhile, or they would stall the data
        plane until the one in flight is answered."""
        dup = self._watched.get(fd)
        if dup is not None:
            self._unread.modify(dup, 0 if paused else select.EPOLLIN)

    def close(self) -> None:
        """Release the epoll set and the duplicates of connections still watched."""
        for fd in list(self._watched):
            with contextlib.suppress(OSError):
                self.unwatch(fd)
        self._unread.close()

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

    def control_waiting(self) -> bool:
        """Whether the control plane needs the interpreter now. Its sockets are looked at
        no more often than every ``poll_interval_ns``; in between, every thread gets the
        last answer, so one thread's look pauses them all."""
        if not self._clear.is_set():
            return True
        now = time.monotonic_ns()
        if now - self._polled_ns >= self.poll_interval_ns:
            self._polled_ns = now  # a race between threads costs at most one extra poll
            self._unread_seen = bool(self._unread.poll(0, 1))
        return self._unread_seen

    def yield_to_control(self) -> None:
        """Called by data-plane threads at safe points: wait while the control plane needs
        the interpreter, at most ``max_pause_s``."""
        if not self.control_waiting():
            return
        deadline = time.monotonic() + self.max_pause_s
        while (left := deadline - time.monotonic()) > 0:
            if not self._clear.is_set():
                self._clear.wait(left)
            elif self.control_waiting():
                time.sleep(READABLE_PAUSE_S)
            else:
                return

    def enter_data_thread(self) -> None:
        """Called first by each data-plane thread: lower its scheduling priority."""
        if self.data_thread_nice <= 0:
            return
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.data_thread_nice)
        except (OSError, AttributeError) as exc:  # a platform without per-thread nice
            log.warning("data-plane thread priority not lowered", error=str(exc))
