"""Many concurrent connections, each sending a few frames and waiting, frame by frame, for
an answer or a close; a frame that gets neither within the timeout is a hang.

Produce frames are followed by an ApiVersions probe on the same connection: an acks=0
Produce is never answered, so the probe's answer tells "no answer due" from "hung".
Fetch, JoinGroup, SyncGroup, CreateTopics and DeleteTopics may be parked by the broker for
as long as the request asks (as Kafka parks them); unanswered, they count as ``parked``, not
hung.
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

PARKABLE = frozenset({1, 11, 14, 19, 20})  # Fetch, JoinGroup, SyncGroup, Create/DeleteTopics
HUNG_CASES_KEPT = 50
WRITE_TIMEOUT = 30.0


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
    # client port -> (wall-clock start, connection number), to match broker log lines
    ports: dict[int, list[tuple[float, int]]] = field(default_factory=dict)

    def connection_at(self, port: int, when: float) -> int | None:
        """The connection that had ``port`` at wall-clock time ``when``."""
        started = [conn for t, conn in self.ports.get(port, ()) if t <= when + 0.5]
        return started[-1] if started else None

    def record(self, frame: Frame, outcome: str) -> None:
        self.outcomes[outcome] += 1
        self.by_kind[f"{frame.kind}|{outcome}"] += 1

    def record_hang(self, conn: int, style: str, frames: list[Frame], outcome: str) -> None:
        """``frames``: the one unanswered frame, or a pipeline's frames in order."""
        self.record(frames[-1], outcome)
        if outcome == "hung" and len(self.hung_cases) < HUNG_CASES_KEPT:
            last = frames[-1]
            self.hung_cases.append({"connection": conn, "style": style, "kind": last.kind,
                                    "api_key": last.api_key, "api_version": last.api_version,
                                    "hex": "".join(f.data.hex() for f in frames)})

    def count_sent(self, conn: int, frame: Frame) -> None:
        self.sent += 1
        self.kinds[frame.kind] += 1
        self.recent.append((conn, frame))


@dataclass(frozen=True)
class Target:
    """A listener to connect to; ``sasl`` ones get a quarter of the connections and a SASL
    prelude on half of them."""

    host: str
    port: int
    sasl: bool = False


# How a connection behaves around its frames, with its weight.
STYLES = {
    "plain": 70,
    "pipeline": 10,  # every frame and a probe in one write, answers read after
    "dribble": 8,  # each frame written a few bytes at a time
    "half_close": 7,  # the write side shut after the last frame
    "abandon": 5,  # closed right after the last frame is written, nothing read
}


@dataclass(frozen=True)
class Plan:
    """One connection: where, how, and which frames."""

    target: Target
    style: str
    frames: list[Frame]


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

    def plan(self, conn: int) -> Plan:
        """Connection ``conn``: the same for the same seed."""
        rng = random.Random(f"{self.seed}:{conn}")
        target = rng.choices(self.targets, [1 if t.sasl else 3 for t in self.targets])[0]
        style = rng.choices(list(STYLES), list(STYLES.values()))[0]
        frames: list[Frame] = []
        if target.sasl and rng.random() < 0.5:
            frames += self.source.sasl_prelude(rng)
        frames += [self.source.frame(rng) for _ in range(rng.randint(1, self.per_connection))]
        return Plan(target, style, frames)

    async def run(self, deadline: float, stop: Callable[[], bool]) -> Tally:
        self._start = time.monotonic()
        workers = [asyncio.create_task(self._worker(deadline, stop))
                   for _ in range(self.concurrency)]
        await asyncio.gather(*workers)
        return self.tally

    async def replay(self, plans: list[Plan], concurrency: int) -> Tally:
        """Run the given connections, ``concurrency`` at a time."""
        gate = asyncio.Semaphore(concurrency)

        async def one(conn: int, plan: Plan) -> None:
            async with gate:
                await self._connection(conn, plan)

        await asyncio.gather(*(one(i, plan) for i, plan in enumerate(plans)))
        return self.tally

    async def _worker(self, deadline: float, stop: Callable[[], bool]) -> None:
        while self.tally.sent < self.frames and time.monotonic() < deadline and not stop():
            if self.rate:  # at most ``rate`` frames a second on average
                ahead = self.tally.sent / self.rate - (time.monotonic() - self._start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
            conn = next(self._numbers)
            plan = self.plan(conn)
            left = self.frames - self.tally.sent
            await self._connection(conn, Plan(plan.target, plan.style, plan.frames[:left]))

    async def _connection(self, conn: int, plan: Plan) -> None:
        try:
            reader, writer = await asyncio.open_connection(plan.target.host, plan.target.port)
        except OSError:
            self.tally.connect_errors += 1
            return
        self.tally.connections += 1
        port = writer.get_extra_info("sockname")[1]
        self.tally.ports.setdefault(port, []).append((time.time(), conn))
        try:
            if plan.style == "pipeline" and not any(
                f.sent_api_key in PARKABLE for f in plan.frames
            ):
                await self._pipeline(conn, plan.frames, reader, writer)
                return
            for i, frame in enumerate(plan.frames):
                last = i == len(plan.frames) - 1
                if not await self._exchange(conn, plan.style if last else "plain", frame,
                                            reader, writer, last):
                    return
        finally:
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), self.timeout)

    async def _exchange(self, conn: int, style: str, frame: Frame,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        last: bool) -> bool:
        """Send one frame and wait for its outcome; False when the connection is done."""
        probe = frame.api_key == PRODUCE
        data = frame.data + PROBE if probe else frame.data
        self.tally.count_sent(conn, frame)
        try:
            # a dribble takes its time to write; the deadline counts from the last byte
            await asyncio.wait_for(_write(writer, data, style == "dribble"), WRITE_TIMEOUT)
            outcome = await asyncio.wait_for(_wait(reader, writer, frame, style, probe),
                                             self.timeout)
        except TimeoutError:
            # what the broker parks is what the bytes name, not what the frame was meant to be
            hang = "parked" if frame.sent_api_key in PARKABLE else "hung"
            self.tally.record_hang(conn, style, [frame], hang)
            return False
        except (OSError, RuntimeError):  # RuntimeError: uvloop's write on a closed socket
            outcome = "closed"
        self.tally.record(frame, outcome)
        return outcome != "closed" and not last


    async def _pipeline(self, conn: int, frames: list[Frame], reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        """All frames and a probe in one write; then answers in order until the probe's or
        a close. Frames past the last answer count as closed (or, with the probe answered,
        as ``no_answer_due``); an answer out of order counts as ``answered_other``."""
        for frame in frames:
            self.tally.count_sent(conn, frame)
        writer.write(b"".join(f.data for f in frames) + PROBE)
        try:
            got, probed = await asyncio.wait_for(_answers(reader), self.timeout)
        except TimeoutError:
            self.tally.record_hang(conn, "pipeline", frames, "hung")
            return
        expected = iter(f.correlation_id for f in frames)
        in_order = all(any(c == e for e in expected) for c in got)
        for i, frame in enumerate(frames):
            if i < len(got):
                self.tally.record(frame, "answered" if in_order else "answered_other")
            else:
                self.tally.record(frame, "no_answer_due" if probed else "closed")


async def _answers(reader: asyncio.StreamReader) -> tuple[list[int | None], bool]:
    """Correlation ids of the responses before the probe's, and whether the probe's came."""
    got: list[int | None] = []
    while True:
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            response = await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return got, False
        correlation = struct.unpack_from(">i", response)[0] if len(response) >= 4 else None
        if correlation == PROBE_CORRELATION:
            return got, True
        got.append(correlation)


async def _wait(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                frame: Frame, style: str, probe: bool) -> str:
    """The outcome of a frame just written, as ``style`` asks."""
    if style == "abandon":
        return "abandoned"
    if style == "half_close" and writer.can_write_eof():
        writer.write_eof()
    return await _outcome(reader, frame, probe)


async def _write(writer: asyncio.StreamWriter, data: bytes, dribble: bool) -> None:
    """Write ``data``; ``dribble`` writes up to its first 4 KiB a few bytes at a time."""
    if not dribble:
        writer.write(data)
        return
    pos = 0
    while pos < min(len(data), 4096) and not writer.is_closing():
        step = 1 + (pos * 7 + len(data)) % 13  # uneven, but the same for the same frame
        writer.write(data[pos:pos + step])
        await writer.drain()
        await asyncio.sleep(0.001)
        pos += step
    if pos < len(data) and not writer.is_closing():
        writer.write(data[pos:])


async def _outcome(reader: asyncio.StreamReader, frame: Frame, probe: bool) -> str:
    """``answered``, ``answered_other`` (a response with another correlation id, or a
    frame too short to have one),
    ``no_answer_due`` (only the probe came back) or ``closed``."""
    wanted = frame.correlation_id
    got_answer = False
    while True:
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            response = await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return "answered" if got_answer else "closed"
        if len(response) < 4:  # a raw SASL token (SaslHandshake v0) or an empty frame
            return "answered_other"
        (correlation,) = struct.unpack_from(">i", response, 0)
        if probe and correlation == PROBE_CORRELATION:
            return "answered" if got_answer else "no_answer_due"
        if correlation != wanted:
            return "answered_other"
        if not probe:
            return "answered"
        got_answer = True
