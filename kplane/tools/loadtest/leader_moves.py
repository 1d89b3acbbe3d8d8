"""The real controller moves leaders in ``kplane loadtest``'s cluster scenarios (KIP-291's case).

Steps alternate, one at a time, at most ``rate`` per second:

* ``AlterPartitionReassignments`` gives every partition of the move topic its replicas in a
  rotated order (the same brokers: the controller stores the new order, bumps the leader
  epoch and sends LeaderAndIsr and UpdateMetadata);
* ``ElectLeaders`` (preferred) then moves each leader to its new first replica (LeaderAndIsr
  and UpdateMetadata again).

Both go to the controller's client listener. After sending, the mover asks every broker for
Metadata until all of them show the step's result: the time from the send to then is the
step's ``propagation`` row. It then scrapes every broker's ``/metrics``: the growth of
``TotalTimeMs`` (``kafka_network_requestmetrics_totaltimems``) ``_sum``/``_count`` of
LeaderAndIsr and UpdateMetadata since the previous scrape, per ``plane`` label, is what each
broker measured for the controller's requests of that step: one row per request, exact when
one request arrived, each the mean when several did (``averaged``). Metrics are never scraped
while a step's controller requests are in flight, so scraping (which holds a broker's
interpreter for milliseconds) never delays one.
"""

from __future__ import annotations

import asyncio
import datetime
import http.client
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kio.static.primitive import i8, i32

from kplane.common.network.connection import BrokerConnection, BrokerConnectionError
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.tools.loadtest.controller import (
    DISCONNECTED_ERROR,
    TIMEOUT_ERROR,
    ControlResult,
    paced,
    response_errors,
)
from kplane.tools.loadtest.metrics import Sample, parse_scrape, scrape, split_metric
from kplane.tools.loadtest.scenarios import Target
from kplane.tools.loadtest.topics import PartitionState, TopicError, TopicState, topic_metadata

REASSIGN = "AlterPartitionReassignments"
ELECT = "ElectLeaders"
STEPS = (REASSIGN, ELECT)
"""The order steps alternate in."""
STEP_KEYS = {REASSIGN: ApiKey.ALTER_PARTITION_REASSIGNMENTS, ELECT: ApiKey.ELECT_LEADERS}
MOVE_APIS = ("LeaderAndIsr", "UpdateMetadata")
"""The controller requests measured, by the brokers' metric names."""
PREFERRED_ELECTION = 0
POLL_INTERVAL_S = 0.005
"""Pause between two Metadata requests to one broker while a step propagates."""
SETTLE_TIMEOUT_S = 2.0
"""How long a broker's metrics may lag behind its Metadata (the last UpdateMetadata is
counted when its response has been written, just after the cache changed)."""
SETTLE_INTERVAL_S = 0.01
TOTAL_COUNT = "TotalTimeMs_count"
TOTAL_SUM = "TotalTimeMs_sum"

Totals = dict[tuple[str, str], tuple[float, float]]
"""(request, plane) -> (count, sum of milliseconds) of a broker's TotalTimeMs."""


def rotated(replicas: Sequence[int]) -> tuple[int, ...]:
    """The replicas with the first moved to the end: the next one becomes preferred."""
    return (*replicas[1:], *replicas[:1])


@dataclass(frozen=True)
class Step:
    """One move: the request and what every broker's Metadata shows once it took effect."""

    api: str
    expected: Mapping[int, PartitionState]
    """Partition -> leader, replicas and the lowest leader epoch that shows the step."""

    @property
    def changed(self) -> int:
        return len(self.expected)


def next_step(api_name: str, states: Mapping[int, PartitionState]) -> Step:
    """The step ``api_name`` from ``states``: a rotation of every partition's replicas (its
    leader stays), or the election of every partition's first replica."""
    expected = {}
    for partition, s in states.items():
        if api_name == REASSIGN:
            want = replace(s, replicas=rotated(s.replicas))
        else:
            want = replace(s, leader=s.replicas[0])
        expected[partition] = replace(want, leader_epoch=s.leader_epoch + 1)
    return Step(api_name, expected)


def shows(step: Step, topic: TopicState) -> bool:
    """Whether ``topic``'s Metadata shows ``step`` done."""
    for partition, want in step.expected.items():
        got = topic.states.get(partition)
        if (
            got is None
            or got.leader != want.leader
            or got.replicas != want.replicas
            or got.leader_epoch < want.leader_epoch
        ):
            return False
    return True


def reassign_request(
    version: int, topic: str, targets: Mapping[int, Sequence[int]], timeout_ms: int
) -> Any:
    """AlterPartitionReassignments ``version``: ``topic``'s partitions to ``targets``."""
    module = api.request_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version)
    partitions = tuple(
        api.make(
            module.ReassignablePartition,
            partition_index=i32(p),
            replicas=tuple(i32(r) for r in replicas),
        )
        for p, replicas in sorted(targets.items())
    )
    return api.make(
        api.request_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version),
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topics=(api.make(module.ReassignableTopic, name=topic, partitions=partitions),),
    )


def elect_request(version: int, topic: str, partitions: Iterable[int], timeout_ms: int) -> Any:
    """ElectLeaders ``version``, preferred: ``topic``'s ``partitions``."""
    module = api.request_module(ApiKey.ELECT_LEADERS, version)
    wanted = api.make(
        module.TopicPartitions, topic=topic, partitions=tuple(i32(p) for p in sorted(partitions))
    )
    return api.make(
        api.request_class(ApiKey.ELECT_LEADERS, version),
        election_type=i8(PREFERRED_ELECTION),
        topic_partitions=(wanted,),
        timeout=datetime.timedelta(milliseconds=timeout_ms),
    )


def request_totals(samples: Iterable[Sample], apis: Sequence[str] = MOVE_APIS) -> Totals:
    """The TotalTimeMs count and sum of ``apis`` per plane in one broker's scrape."""
    totals: Totals = {}
    for s in samples:
        name, labels = split_metric(s.metric)
        if name not in (TOTAL_COUNT, TOTAL_SUM) or labels.get("request") not in apis:
            continue
        key = (labels["request"], labels.get("plane", "?"))
        count, total = totals.get(key, (0.0, 0.0))
        totals[key] = (s.value, total) if name == TOTAL_COUNT else (count, s.value)
    return totals


def growth(before: Totals, after: Totals) -> dict[tuple[str, str], tuple[int, float]]:
    """(request, plane) -> requests completed between two scrapes and their mean TotalTimeMs
    (only those that grew)."""
    grown = {}
    for key, (count, total) in after.items():
        count0, total0 = before.get(key, (0.0, 0.0))
        n = round(count - count0)
        if n > 0:
            grown[key] = (n, (total - total0) / n)
    return grown


def settled(
    grown: Mapping[tuple[str, str], tuple[int, float]], expected: Mapping[str, int]
) -> bool:
    """Whether at least ``expected[request]`` requests (over all planes) were counted."""
    counts: dict[str, int] = {}
    for (request, _plane), (n, _mean) in grown.items():
        _add(counts, request, n)
    return all(counts.get(request, 0) >= n for request, n in expected.items())


def _add(counts: dict[str, int], key: str, n: int) -> None:
    counts[key] = counts.get(key, 0) + n


@dataclass
class BrokerScrape:
    """A broker's latest scrape: when, its kept samples, its controller-request totals."""

    at: float
    samples: list[Sample]
    totals: Totals


@dataclass
class MoveCounts:
    """What the mover did and saw, for summary.json."""

    steps: dict[str, int] = field(default_factory=dict)
    step_errors: dict[str, int] = field(default_factory=dict)
    planes: dict[str, dict[str, int]] = field(default_factory=dict)
    """request -> plane label -> requests the brokers counted (the plane that served them)."""
    averaged: int = 0
    """Requests whose row is the mean of several in one scrape interval."""
    unsettled: int = 0
    """Broker scrapes that still lacked a step's requests after ``SETTLE_TIMEOUT_S``."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": dict(self.steps),
            "step_errors": dict(self.step_errors),
            "planes": {k: dict(v) for k, v in sorted(self.planes.items())},
            "averaged_requests": self.averaged,
            "unsettled_scrapes": self.unsettled,
        }


class LeaderMover:
    """Moves the leaders of ``topic``'s partitions with the cluster's real controller and
    records what the brokers measured; ``results`` holds the controller requests (as the
    fake controller's), ``propagation`` the steps, ``samples`` every scrape kept."""

    def __init__(
        self,
        brokers: Sequence[Target],
        topic: str,
        rate: float,
        timeout_s: float,
    ) -> None:
        self.brokers = {t.broker_id: t for t in brokers}
        self.topic = topic
        self.rate = rate
        self.timeout_s = timeout_s
        self.results: list[ControlResult] = []
        self.propagation: list[ControlResult] = []
        self.samples: list[Sample] = []
        self.counts = MoveCounts()
        self.versions: dict[str, int] = {}
        self.controller_id = -1
        self.scrape_failures = 0
        self._states: dict[int, PartitionState] = {}
        self._metadata: dict[int, BrokerConnection] = {}
        self._controller: BrokerConnection | None = None
        self._scrapes: dict[int, BrokerScrape] = {}
        self._baseline_kept = False

    async def connect(self) -> dict[str, int]:
        """Open a Metadata connection to every broker and one to the controller, learn the
        partitions and scrape every broker once; request title -> version used. Raises
        UnsupportedApi when the controller lacks a step's API, TopicError, OSError."""
        for broker_id, target in self.brokers.items():
            conn = self._connection(target.data.host, target.data.port)
            self._metadata[broker_id] = conn
            await conn.connect(self.timeout_s)
        await self._connect_controller()
        for broker_id in self.brokers:
            self._scrapes[broker_id] = await self._scrape(broker_id)
        return self.versions

    def _connection(self, host: str, port: int) -> BrokerConnection:
        return BrokerConnection(host, port, "kplane-loadtest-mover", int(self.timeout_s * 1000))

    async def _connect_controller(self) -> None:
        """(Re)learn the partitions and the controller from Metadata and connect to it."""
        first = next(iter(self._metadata.values()))
        # The topic was created through another broker: this one may learn of it a little
        # later (the controller's UpdateMetadata), so wait for it within the timeout.
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                topic = await topic_metadata(first, self.topic)
                break
            except TopicError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        self._states = dict(topic.states)
        if topic.controller_id not in topic.brokers:
            raise TopicError(f"no controller in the Metadata of {first.address}")
        if self._controller is not None:
            self._controller.close()
        self.controller_id = topic.controller_id
        self._controller = self._connection(*topic.brokers[topic.controller_id])
        await self._controller.connect(self.timeout_s)
        self.versions = {
            title: self._controller.version_for(key) for title, key in STEP_KEYS.items()
        }

    async def run(self, seconds: float, warmup: float = 0.0) -> None:
        """Move for ``warmup`` + ``seconds``, recording the steps begun after ``warmup``."""
        i = 0
        async for measured in paced(self.rate, seconds, warmup):
            if self._controller is None or self._controller.closed:
                try:
                    await self._connect_controller()
                except (OSError, TopicError):
                    _add(self.counts.step_errors, "connect", 1)
                    continue
            await self._step(next_step(STEPS[i % len(STEPS)], self._states), measured)
            i += 1

    async def _step(self, step: Step, measured: bool) -> None:
        assert self._controller is not None
        if measured and not self._baseline_kept:  # the scrape the first step's growth is from
            self._baseline_kept = True
            for s in self._scrapes.values():
                self.samples.extend(s.samples)
        send_time = time.time()
        began = time.perf_counter()
        error = await self._send(step)
        if error is None:
            error = await self._propagated(step)
        latency_ms = (time.perf_counter() - began) * 1000.0
        if error is None:
            self._states = dict(step.expected)
        else:
            await self._resync()
        await self._measure(step, send_time, measured, settle=error is None)
        if measured:
            self.propagation.append(ControlResult(step.api, send_time, latency_ms, error))
            _add(self.counts.steps, step.api, 1)
            if error is not None:
                _add(self.counts.step_errors, f"{step.api}:{error}", 1)

    async def _send(self, step: Step) -> str | None:
        """The step's request to the controller; its error names, or None."""
        assert self._controller is not None
        timeout_ms = int(self.timeout_s * 1000)
        if step.api == REASSIGN:
            targets = {p: s.replicas for p, s in step.expected.items()}

            def build(version: int) -> Any:
                return reassign_request(version, self.topic, targets, timeout_ms)
        else:

            def build(version: int) -> Any:
                return elect_request(version, self.topic, step.expected, timeout_ms)

        try:
            response = await self._controller.request(STEP_KEYS[step.api], build)
        except TimeoutError:
            return TIMEOUT_ERROR
        except BrokerConnectionError:
            return DISCONNECTED_ERROR
        return response_errors(response)

    async def _propagated(self, step: Step) -> str | None:
        """Wait until every broker's Metadata shows ``step``; an error name when that takes
        longer than the timeout or a broker cannot be asked."""

        async def until_shown(conn: BrokerConnection) -> None:
            while not shows(step, await topic_metadata(conn, self.topic)):
                await asyncio.sleep(POLL_INTERVAL_S)

        try:
            await asyncio.wait_for(
                asyncio.gather(*(until_shown(c) for c in self._metadata.values())),
                self.timeout_s,
            )
        except TimeoutError:
            return TIMEOUT_ERROR
        except (BrokerConnectionError, TopicError):
            return DISCONNECTED_ERROR
        return None

    async def _resync(self) -> None:
        """After a failed step: the partitions as the controller's broker describes them,
        and fresh connections."""
        for broker_id, conn in list(self._metadata.items()):
            if conn.closed:
                target = self.brokers[broker_id]
                fresh = self._connection(target.data.host, target.data.port)
                try:
                    await fresh.connect(self.timeout_s)
                except OSError:
                    continue
                self._metadata[broker_id] = fresh
        try:
            await self._connect_controller()
        except (OSError, TopicError):
            if self._controller is not None:
                self._controller.close()

    async def _measure(self, step: Step, send_time: float, measured: bool, settle: bool) -> None:
        """Scrape every broker (when ``settle``, until it counted the step's controller
        requests, at most ``SETTLE_TIMEOUT_S``) and record their latencies as the brokers
        measured them."""
        per_broker = step.changed if step.api == REASSIGN else 1  # one per partition, or batched
        expected = {api_name: per_broker for api_name in MOVE_APIS} if settle else {}
        scrapes = await asyncio.gather(*(self._settled_scrape(b, expected) for b in self.brokers))
        for broker_id, after in zip(self.brokers, scrapes, strict=True):
            if after is None:
                continue
            before = self._scrapes[broker_id]
            self._scrapes[broker_id] = after
            if not measured:
                continue
            self.samples.extend(after.samples)
            for (request, plane), (n, mean) in growth(before.totals, after.totals).items():
                self.results.extend(ControlResult(request, send_time, mean, None) for _ in range(n))
                _add(self.counts.planes.setdefault(request, {}), plane, n)
                if n > 1:
                    self.counts.averaged += n

    async def _settled_scrape(
        self, broker_id: int, expected: Mapping[str, int]
    ) -> BrokerScrape | None:
        before = self._scrapes[broker_id]
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            try:
                after = await self._scrape(broker_id)
            except (OSError, http.client.HTTPException):
                self.scrape_failures += 1
                return None
            if settled(growth(before.totals, after.totals), expected):
                return after
            if time.monotonic() > deadline:
                self.counts.unsettled += 1
                return after
            await asyncio.sleep(SETTLE_INTERVAL_S)

    async def _scrape(self, broker_id: int) -> BrokerScrape:
        url = self.brokers[broker_id].metrics_url
        if url is None:
            raise OSError(f"broker {broker_id} exposes no metrics")
        at = time.time()
        text = await asyncio.to_thread(scrape, url)
        samples = parse_scrape(at, text, {"broker": str(broker_id)})
        return BrokerScrape(at, samples, request_totals(samples))

    def close(self) -> None:
        """Close every connection."""
        for conn in self._metadata.values():
            conn.close()
        if self._controller is not None:
            self._controller.close()
            self._controller = None
