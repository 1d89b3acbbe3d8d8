"""The fake controller of ``kplane loadtest``: UpdateMetadata and LeaderAndIsr at a fixed rate.

Like Kafka's ControllerChannelManager it keeps one connection to the broker's control endpoint
and ONE request in flight. Requests alternate UpdateMetadata / LeaderAndIsr, each at the highest
version both sides speak, about the partitions of one topic, with a leader epoch that grows with
every request so the broker applies each one; the controller epoch is the broker's own
controller's (a higher one would fence it). The request builders and the
error extraction are pure; ``FakeController.run`` does the I/O.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.controller.requests import PartitionState, leader_and_isr, update_metadata
from kplane.broker.metadata.kafka_store import BrokerRegistration
from kplane.common.network.connection import BrokerConnection, BrokerConnectionError
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode

API_TITLES: dict[int, str] = {
    ApiKey.UPDATE_METADATA: "UpdateMetadata",
    ApiKey.LEADER_AND_ISR: "LeaderAndIsr",
}
TIMEOUT_ERROR = "REQUEST_TIMED_OUT"
DISCONNECTED_ERROR = "NETWORK_EXCEPTION"


@dataclass(frozen=True)
class Endpoint:
    """One listener of the broker, as UpdateMetadata describes it."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True)
class ControlPlan:
    """What the fake controller tells the broker: one broker, one topic's partitions."""

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    leader_endpoint: Endpoint
    """The endpoint named in LeaderAndIsr's live_leaders (where controller requests go)."""
    topic: str
    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    controller_epoch: int


@dataclass(frozen=True)
class ControlResult:
    """One controller request: api title, send time (unix s), latency, error names or None."""

    api: str
    send_time: float
    latency_ms: float
    error: str | None


def _states(plan: ControlPlan, leader_epoch: int) -> list[PartitionState]:
    """The topic's partitions, all led by the broker at ``leader_epoch`` (which stands in
    for the state znode's version too: this controller writes no znode)."""
    me = (plan.broker_id,)
    return [
        PartitionState(
            plan.topic, p, plan.broker_id, leader_epoch, me, me, plan.topic_id, leader_epoch
        )
        for p in plan.partitions
    ]


def update_metadata_request(version: int, plan: ControlPlan, leader_epoch: int) -> Any:
    """UpdateMetadata ``version`` (kplane's controller's builder): the broker with all its
    endpoints, the topic's partitions led by it at ``leader_epoch``."""
    registration = BrokerRegistration(
        plan.broker_id,
        tuple(
            EndPoint(e.listener, e.host, e.port, SecurityProtocol(e.security_protocol))
            for e in plan.endpoints
        ),
    )
    build = update_metadata(
        plan.broker_id, plan.controller_epoch, _states(plan, leader_epoch), [registration]
    )
    return build(version)


def leader_and_isr_request(version: int, plan: ControlPlan, leader_epoch: int) -> Any:
    """LeaderAndIsr ``version`` (kplane's controller's builder): the broker leads every
    partition of the topic at ``leader_epoch``."""
    leader = (plan.broker_id, plan.leader_endpoint.host, plan.leader_endpoint.port)
    build = leader_and_isr(
        plan.broker_id, plan.controller_epoch, _states(plan, leader_epoch), [leader]
    )
    return build(version)


def response_errors(response: Any) -> str | None:
    """The distinct non-zero error codes anywhere in ``response`` (Kafka's upper-case names,
    comma-separated), or None when every error code is 0."""
    names = sorted({code.name.upper() for code in _error_codes(response)})
    return ",".join(names) or None


def _error_codes(entity: Any) -> Iterator[ErrorCode]:
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if isinstance(value, ErrorCode):
            if value != ErrorCode.none:
                yield value
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    yield from _error_codes(item)


async def paced(rate: float, seconds: float, warmup: float = 0.0) -> AsyncIterator[bool]:
    """Slots at ``rate`` per second for ``warmup`` + ``seconds``, each as whether it is
    measured (past the warm-up). The caller works between two slots; a slot missed
    meanwhile is skipped, not made up with a burst."""
    loop = asyncio.get_running_loop()
    period = 1.0 / rate
    start = loop.time()
    measure_from = start + warmup
    next_at = start
    while next_at < measure_from + seconds:
        await asyncio.sleep(max(0.0, next_at - loop.time()))
        next_at = max(next_at + period, loop.time())
        yield loop.time() >= measure_from


BUILDERS: Mapping[int, Callable[[int, ControlPlan, int], Any]] = {
    ApiKey.UPDATE_METADATA: update_metadata_request,
    ApiKey.LEADER_AND_ISR: leader_and_isr_request,
}
KEYS = tuple(BUILDERS)
"""The order requests alternate in."""


class FakeController:
    """Sends the plan's requests to ``host:port`` at ``rate`` per second, one in flight."""

    def __init__(
        self,
        host: str,
        port: int,
        plan: ControlPlan,
        first_leader_epoch: int,
        rate: float,
        timeout_s: float,
        midway: Callable[[], None] = lambda: None,
    ) -> None:
        """``midway`` runs half a period after every send: between two requests when the
        response came in time, while it is awaited otherwise."""
        self.host = host
        self.port = port
        self.plan = plan
        self.rate = rate
        self.timeout_s = timeout_s
        self.midway = midway
        self.results: list[ControlResult] = []
        self.connect_failures = 0
        self.versions: dict[int, int] = {}
        self._epoch = first_leader_epoch
        self._connection: BrokerConnection | None = None

    async def connect(self) -> dict[int, int]:
        """(Re)connect and negotiate; api key -> version used. Raises UnsupportedApi when the
        broker does not serve UpdateMetadata or LeaderAndIsr."""
        self.close()
        conn = BrokerConnection(
            self.host, self.port, "kplane-loadtest-controller", int(self.timeout_s * 1000)
        )
        try:
            await conn.connect(self.timeout_s)
            self.versions = {key: conn.version_for(key) for key in BUILDERS}
        except BaseException:
            conn.close()
            raise
        self._connection = conn
        return self.versions

    async def run(self, seconds: float, warmup: float = 0.0) -> None:
        """Send for ``warmup`` + ``seconds``, recording what is sent after ``warmup``
        (connecting first if needed). A slot missed while waiting for a response is skipped,
        not made up with a burst; a failed reconnection skips slots until one works. The last
        request is awaited (at most ``timeout_s``)."""
        loop = asyncio.get_running_loop()
        period = 1.0 / self.rate
        i = 0
        async for measured in paced(self.rate, seconds, warmup):
            if self._connection is None or self._connection.closed:
                try:
                    await self.connect()
                except OSError:  # refused, reset, timed out
                    self.connect_failures += 1
                    continue
            key = KEYS[i % len(KEYS)]
            i += 1
            self._epoch += 1
            request = BUILDERS[key](self.versions[key], self.plan, self._epoch)
            loop.call_later(period / 2, self.midway)
            result = await self._send(key, request)
            if measured:
                self.results.append(result)
        self.close()

    async def _send(self, key: int, request: Any) -> ControlResult:
        assert self._connection is not None
        send_time = time.time()
        began = time.perf_counter()
        try:
            response = await self._connection.request(key, lambda _version: request)
            error = response_errors(response)
        except TimeoutError:
            error = TIMEOUT_ERROR
        except BrokerConnectionError:
            error = DISCONNECTED_ERROR
        latency_ms = (time.perf_counter() - began) * 1000.0
        return ControlResult(API_TITLES[key], send_time, latency_ms, error)

    def close(self) -> None:
        """Close the connection, if any."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
