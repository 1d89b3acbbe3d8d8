"""Where ``kplane loadtest``'s processes run: CPU sets and the load generator's priority.

On a small machine the load generator, the measuring client and the broker compete for the
same CPUs, and a latency measured there is the scheduler's as much as the broker's. Pinning
the broker to its own CPUs (as a broker would have its own machine) and running the
producers under SCHED_IDLE beside the fake controller (``--load-idle``,
``LoadConfig.idle_priority``) keeps the measurement about the broker: the producers still
take every cycle the fake controller leaves idle, and it preempts them the moment it wakes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass


def parse_cpus(text: str) -> frozenset[int]:
    """A CPU list as ``taskset -c`` takes it ("0", "1-3", "0,2-3"); ValueError when it is
    malformed or names a CPU this process may not use."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, sep, last = part.strip().partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list such as 0 or 1-3 or 0,2")
        low, high = int(first), int(last) if sep else int(first)
        if high < low:
            raise ValueError(f"{text!r} is not a CPU list such as 0 or 1-3 or 0,2")
        cpus.update(range(low, high + 1))
    unavailable = cpus - available_cpus()
    if unavailable:
        raise ValueError(
            f"CPU(s) {','.join(map(str, sorted(unavailable)))} are not available here "
            f"(available: {','.join(map(str, sorted(available_cpus())))})"
        )
    return frozenset(cpus)


def available_cpus() -> frozenset[int]:
    """The CPUs this process may run on."""
    return frozenset(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Placement:
    """CPU sets of the processes (None: wherever the OS puts them)."""

    broker_cpus: frozenset[int] | None = None
    client_cpus: frozenset[int] | None = None
    """The loadtest process (fake controller, metrics scraper) and the load it spawns."""

    def broker_preexec(self) -> Callable[[], None] | None:
        """For ``subprocess.Popen(preexec_fn=...)``: pin a started broker before it runs."""
        cpus = self.broker_cpus
        if cpus is None:
            return None
        return lambda: os.sched_setaffinity(0, cpus)

    @contextmanager
    def client_pinned(self) -> Iterator[None]:
        """Pin the calling thread meanwhile; the threads and processes it starts inherit
        the set."""
        if self.client_cpus is None:
            yield
            return
        previous = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.client_cpus)
        try:
            yield
        finally:
            os.sched_setaffinity(0, previous)


def default_split(cpus: Sequence[int]) -> tuple[str, str] | None:
    """(broker CPUs, client CPUs) of ``kplane loadtest``'s default placement: the first of
    ``cpus`` for started brokers, the others for the fake controller and the load (which
    then runs under SCHED_IDLE); None when there is a single CPU."""
    ordered = sorted(cpus)
    if len(ordered) < 2:
        return None
    return str(ordered[0]), ",".join(map(str, ordered[1:]))


def describe_placement(
    broker_cpus: str | None, client_cpus: str | None, load_idle: bool, cpus: int
) -> str:
    """What ran where, and why, in one line for the summary."""
    if broker_cpus is None and client_cpus is None:
        why = "one CPU: nothing to separate" if cpus < 2 else "--no-placement or external"
        return f"no placement ({why}): every process wherever the OS puts it"
    idle = ", the load under SCHED_IDLE" if load_idle else ""
    return (
        f"brokers on CPU {broker_cpus or 'any'}, fake controller and load on CPU "
        f"{client_cpus or 'any'}{idle}"
    )
