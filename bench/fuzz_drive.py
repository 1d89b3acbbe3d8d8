"""Many concurrent connections, each sending a few frames and waiting, frame by frame, for
an answer or a close; a frame that gets neither within the timeout is a hang.

Produce frames are followed by an ApiVersions probe on the same connection: an acks=0
Produce is never answered, so the probe's answer tells "no answer due" from "hung".
Fetch, JoinGroup and SyncGroup may be parked by the broker for as long as the request
asks; unanswered, they count as ``parked``, not hung.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import struct
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fuzz_frames import PROBE, PROBE_CORRELATION, PRODUCE, Frame, FrameSource

PARKABLE = frozenset({1, 11, 14})  # Fetch, JoinGroup, SyncGroup
HUNG_CASES_KEPT = 50


@dataclass
class Tally:
    """What the connections saw."""

    sent: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)  # "kind|outcome"
    connections: int = 0
    connect_errors: int = 0
    hung_cases: list[dict[str, object]] = field(default_factory=list)
    recent: deque[tuple[int, Frame]] = field(default_factory=lambda: deque(maxlen=200))

    def record(self, frame: Frame, outcome: str) -> None:
        self.outcomes[outcome] += 1
        self.by_kind[f"{frame.kind}|{outcome}"] += 1

    def record_hang(self, conn: int, frame: Frame, outcome: str) -> None:
        self.record(frame, outcome)
        if outcome == "hung" and len(self.hung_cases) < HUNG_CASES_KEPT:
            self.hung_cases.append({"connection": conn, "kind": frame.kind,
                                    "api_key": frame.api_key, "api_version": frame.api_version,
                                    "hex": frame.data.hex()})


@dataclass(frozen=True)
class Target:
    """A listener to connect to; ``sasl`` ones get a quarter of the connections and a SASL
    prelude on half of them."""

    host: str
    port: int
    sasl: bool = False


class Driver:
    """Runs connections until ``frames`` were sent, ``deadline`` passed or ``stop`` says so."""

    def __init__(self, source: FrameSource, targets: list[Target], seed: int, *,
                 frames: int, concurrency: int, per_connection: int, timeout: float,
                 rate: float = 0) -> None:
        self.source = source
        self.targets = targets
        self.seed = seed
        self.frames = frames
        self.concurrency = concurrency
        self.per_connection = per_connection
        self.timeout = timeout
        self.rate = rate
        self.tally = Tally()
        self._numbers = itertools.count()
        self._start = time.monotonic()

    def plan(self, conn: int) -> tuple[Target, list[Frame]]:
        """Connection ``conn``'s listener and frames: the same for the same seed."""
        rng = random.Random(f"{self.seed}:{conn}")
        target = rng.choices(self.targets, [1 if t.sasl else 3 for t in self.targets])[0]
        frames: list[Frame] = []
        if target.sasl and rng.random() < 0.5:
            frames += self.source.sasl_prelude(rng)
        frames += [self.source.frame(rng) for _ in range(rng.randint(1, self.per_connection))]
        return target, frames

    async def run(self, deadline: float, stop: Callable[[], bool]) -> Tally:
        self._start = time.monotonic()
        workers = [asyncio.create_task(self._worker(deadline, stop))
                   for _ in range(self.concurrency)]
        await asyncio.gather(*workers)
        return self.tally

    async def replay(self, plans: list[tuple[Target, list[Frame]]], concurrency: int) -> Tally:
        """Run the given connections, ``concurrency`` at a time."""
        gate = asyncio.Semaphore(concurrency)

        async def one(conn: int, target: Target, frames: list[Frame]) -> None:
            async with gate:
                await self._connection(conn, target, frames)

        await asyncio.gather(*(one(i, t, f) for i, (t, f) in enumerate(plans)))
        return self.tally

    async def _worker(self, deadline: float, stop: Callable[[], bool]) -> None:
        while self.tally.sent < self.frames and time.monotonic() < deadline and not stop():
            if self.rate:  # at most ``rate`` frames a second on average
                ahead = self.tally.sent / self.rate - (time.monotonic() - self._start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
            conn = next(self._numbers)
            target, frames = self.plan(conn)
            await self._connection(conn, target, frames[: self.frames - self.tally.sent])

    async def _connection(self, conn: int, target: Target, frames: list[Frame]) -> None:
        try:
            reader, writer = await asyncio.open_connection(target.host, target.port)
        except OSError:
            self.tally.connect_errors += 1
            return
        self.tally.connections += 1
        try:
            for frame in frames:
                probe = frame.api_key == PRODUCE
                self.tally.sent += 1
                self.tally.kinds[frame.kind] += 1
                self.tally.recent.append((conn, frame))
                try:
                    writer.write(frame.data + PROBE if probe else frame.data)
                    outcome = await asyncio.wait_for(_outcome(reader, frame, probe), self.timeout)
                except TimeoutError:
                    hang = "parked" if frame.api_key in PARKABLE else "hung"
                    self.tally.record_hang(conn, frame, hang)
                    return
                except OSError:
                    outcome = "closed"
                self.tally.record(frame, outcome)
                if outcome == "closed":
                    return
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _outcome(reader: asyncio.StreamReader, frame: Frame, probe: bool) -> str:
    """``answered``, ``answered_other`` (a response with another correlation id),
    ``no_answer_due`` (only the probe came back) or ``closed``."""
    wanted = frame.correlation_id
    got_answer = False
    while True:
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            response = await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return "answered" if got_answer else "closed"
        (correlation,) = struct.unpack_from(">i", response, 0)
        if probe and correlation == PROBE_CORRELATION:
            return "answered" if got_answer else "no_answer_due"
        if correlation != wanted:
            return "answered_other"
        if not probe:
            return "answered"
        got_answer = True
