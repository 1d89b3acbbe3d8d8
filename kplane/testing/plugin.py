"""kplane's pytest plugin: real brokers on loopback ports for client tests.

Registered through the ``pytest11`` entry point, so installing kplane gives these fixtures
with no conftest: ``kafka_broker`` (an in-process broker), ``kafka_broker_factory``,
``kafka_cluster`` (brokers on a real ZooKeeper), ``kafka_broker_process`` (a ``kplane serve``
child), and ``zookeeper``. kplane's own suite uses the same fixtures under their short
names (``broker``, ``broker_factory``, ``broker_process``). An in-process broker is a
``RunningBroker``: tests read and fault it through its ``BrokerView`` methods
(``kplane/testing/broker_view.py``). Loading the plugin imports neither the broker nor any
client library: fixtures import what they start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kplane.testing.broker_view import BrokerView

if TYPE_CHECKING:
    from kplane.broker.config.kafka_config import KafkaConfig
    from kplane.testing.wire import WireClient
    from kplane.tools.zookeeper import ZooKeeperServer

TEST_DEFAULTS: dict[str, str] = {
    "broker.id": "0",
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "kplane.log.storage": "memory",  # fast fixtures; tests of the file log override it
    "controlled.shutdown.retry.backoff.ms": "100",  # a cluster's teardown does not wait 5 s
}


DEFAULT_SERVE_CONFIG = (
    "broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:9092\nnum.partitions=1\n"
    "group.initial.rebalance.delay.ms=0\n"
)
"""What ``kafka_broker_process`` serves when given no config file."""


@dataclass
class RunningBroker(BrokerView):
    """A broker started for a test, in this process: read and fault it through
    BrokerView's methods; ``server``, the KafkaServer itself, is internal, not a stable
    seam."""

    config: KafkaConfig

    def bootstrap(self, listener: str | None = None) -> str:
        """``host:port`` for a client's bootstrap.servers."""
        host, port = self.address(listener)
        return f"{host}:{port}"

    @property
    def bootstrap_servers(self) -> str:
        """``bootstrap.servers`` of the first listener."""
        return self.bootstrap()

    def stop(self) -> None:
        """Shut the broker down (idempotent)."""
        self.server.shutdown()

    def wire(self, listener: str | None = None) -> WireClient:
        """A raw wire connection to ``listener``."""
        from kplane.testing.wire import WireClient

        return WireClient(*self.address(listener))

    def topic_metadata(
        self, topic: str, allow_auto: bool = False, listener: str | None = None
    ) -> Any:
        """The MetadataResponseTopic of ``topic`` (Metadata v12 on the wire)."""
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        with self.wire(listener) as client:
            response = client.request(
                MetadataRequest(
                    topics=(MetadataRequestTopic(name=TopicName(topic), topic_id=None),),
                    allow_auto_topic_creation=allow_auto,
                    include_topic_authorized_operations=False,
                )
            )
        (found,) = response.topics
        return found

    def wait_for_partitions(self, topic: str, count: int, timeout: float = 30.0) -> Any:
        """Wait until Metadata shows ``topic`` with ``count`` partitions, each led."""
        from kplane.protocol.errors import ErrorCode

        deadline = time.monotonic() + timeout
        while True:
            found = self.topic_metadata(topic)
            if (
                found.error_code == ErrorCode.none
                and len(found.partitions) == count
                and all(
                    p.leader_id >= 0 and p.error_code == ErrorCode.none for p in found.partitions
                )
            ):
                return found
            assert time.monotonic() < deadline, f"{topic}: not {count} led partitions: {found}"
            time.sleep(0.05)

    def create_topic(
        self, topic: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> None:
        """Create ``topic`` with CreateTopics over the wire and wait until it is led."""
        from kio.schema.create_topics.v7.request import (
            CreatableTopic,
            CreatableTopicConfig,
            CreateTopicsRequest,
        )
        from kio.schema.types import TopicName
        from kio.static.primitive import i16, i32

        from kplane.protocol.errors import ErrorCode

        request = CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=TopicName(topic),
                    num_partitions=i32(partitions),
                    replication_factor=i16(1),
                    assignments=(),
                    configs=tuple(
                        CreatableTopicConfig(name=k, value=v) for k, v in (config or {}).items()
                    ),
                ),
            ),
        )
        with self.wire() as client:
            (result,) = client.request(request).topics
        assert result.error_code == ErrorCode.none, (topic, result.error_message)
        self.wait_for_partitions(topic, partitions)


@dataclass
class BrokerProcess:
    """A ``kplane serve`` child process."""

    process: subprocess.Popen[bytes]
    port: int | None
    log_path: Path
    stopped: bool = field(default=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def bootstrap_servers(self) -> str:
        """``bootstrap.servers`` of its PLAINTEXT listener."""
        return self.bootstrap

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.stopped = True

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.stopped = True


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float = 30.0) -> None:
    """Wait until ``host:port`` accepts a TCP connection."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{host}:{port} did not accept connections within {timeout}s")


def _config_keys(configs: Mapping[str, str]) -> dict[str, str]:
    """Keyword configs as Kafka spells them: ``num_partitions`` -> ``num.partitions``."""
    return {key.replace("_", "."): str(value) for key, value in configs.items()}


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., RunningBroker]]:
    """Start in-process brokers with test defaults plus overrides (a mapping of Kafka's
    keys, and/or keywords with ``_`` for ``.``); all stop at teardown."""
    from kplane.broker.config.kafka_config import KafkaConfig
    from kplane.broker.logging_setup import configure_logging
    from kplane.broker.server.kafka_server import KafkaServer

    configure_logging(cache_loggers=False)
    started: list[RunningBroker] = []

    def start(overrides: Mapping[str, str] | None = None, **configs: str) -> RunningBroker:
        props = dict(TEST_DEFAULTS)
        props["log.dirs"] = str(tmp_path / f"broker-{len(started)}")
        props.update(overrides or {})
        props.update(_config_keys(configs))
        config = KafkaConfig.from_properties(props)
        server = KafkaServer(config)
        server.startup()
        running = RunningBroker(server, config)
        started.append(running)
        return running

    yield start
    for running in reversed(started):
        running.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., RunningBroker]) -> RunningBroker:
    """One started broker with a PLAINTEXT listener on an ephemeral 127.0.0.1 port."""
    return broker_factory()


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start ``kplane serve`` as a child process; killed at teardown if still running."""
    processes: list[BrokerProcess] = []

    def start(
        config_file: str | None = None, *overrides: str, plaintext_port: bool = True
    ) -> BrokerProcess:
        """``config_file`` is a path (relative ones from the working directory), by default
        a broker with ``broker.id=0``; with ``plaintext_port`` the listeners become one
        PLAINTEXT listener on a free port, waited for; without it the config's listeners
        stay as given."""
        index = len(processes)
        if config_file is None:
            config_file = str(tmp_path / f"server-{index}.properties")
            Path(config_file).write_text(DEFAULT_SERVE_CONFIG)
        port = free_port() if plaintext_port else None
        log_path = tmp_path / f"kplane-{index}.log"
        args = [sys.executable, "-m", "kplane", "serve", str(Path(config_file).resolve())]
        args += ["--override", f"log.dirs={tmp_path / f'proc-{index}'}"]
        if port is not None:
            args += ["--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"]
        for item in overrides:
            args += ["--override", item]
        env = dict(os.environ, KPLANE_LOG_FORMAT="json")
        with open(log_path, "wb") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        handle = BrokerProcess(process, port, log_path)
        processes.append(handle)
        if port is not None:
            wait_for_port("127.0.0.1", port)
        return handle

    yield start
    for handle in processes:
        handle.kill()


# ZooKeeper ----------------------------------------------------------------------------------

REQUIRE_ZOOKEEPER_ENV = "KPLANE_REQUIRE_ZOOKEEPER"


def require_zookeeper() -> None:
    """Skip when java or Debian's zookeeper jar is missing; fail instead under
    ``KPLANE_REQUIRE_ZOOKEEPER=1`` (``make test``, CI), where they must be installed."""
    from kplane.tools.zookeeper import unavailable_reason

    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get(REQUIRE_ZOOKEEPER_ENV) == "1":
        pytest.fail(f"{REQUIRE_ZOOKEEPER_ENV}=1 but no ZooKeeper can run: {reason}")
    pytest.skip(f"no ZooKeeper: {reason}")


@pytest.fixture(scope="session")
def zookeeper_session_server() -> Iterator[ZooKeeperServer]:
    """One ZooKeeper for the session (per xdist worker), shared: don't stop or kill it."""
    from kplane.tools.zookeeper import ZooKeeperServer

    require_zookeeper()
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def zookeeper(zookeeper_session_server: ZooKeeperServer) -> str:
    """Connect string of a running ZooKeeper with a chroot of this test's own, e.g.
    ``127.0.0.1:41234/kplane-test-1f2e3d4c5b6a`` (the store creates the chroot)."""
    return f"{zookeeper_session_server.connect}/kplane-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """A ZooKeeper process of this test's own, to stop, kill or restart."""
    from kplane.tools.zookeeper import ZooKeeperServer

    require_zookeeper()
    with ZooKeeperServer() as server:
        yield server


# The public names ------------------------------------------------------------------------


@pytest.fixture
def kafka_broker_factory(
    broker_factory: Callable[..., RunningBroker],
) -> Callable[..., RunningBroker]:
    """``kafka_broker_factory(overrides=None, **configs)``: start an in-process broker on
    ephemeral 127.0.0.1 ports with test defaults (memory log, one partition per topic, no
    initial rebalance delay) plus the given configs, e.g. ``listeners``, security settings,
    ``auto_create_topics_enable="false"``. Every broker stops at teardown."""
    return broker_factory


@pytest.fixture
def kafka_broker(broker: RunningBroker) -> RunningBroker:
    """An in-process broker with one PLAINTEXT listener on an ephemeral 127.0.0.1 port:
    ``kafka_broker.bootstrap_servers`` for a client; ``.bootstrap(listener)`` per listener."""
    return broker


@pytest.fixture
def kafka_broker_process(
    broker_process: Callable[..., BrokerProcess],
) -> Callable[..., BrokerProcess]:
    """``kafka_broker_process(config_file=None, *overrides)``: a ``kplane serve`` child
    process on a free PLAINTEXT port (``.bootstrap_servers``), killed at teardown."""
    return broker_process


@dataclass
class KafkaCluster:
    """Brokers registered in one ZooKeeper chroot."""

    brokers: list[RunningBroker]
    zookeeper_connect: str

    @property
    def bootstrap_servers(self) -> str:
        """``bootstrap.servers`` naming every broker."""
        return ",".join(b.bootstrap_servers for b in self.brokers)

    def broker(self, broker_id: int) -> RunningBroker:
        """The broker with ``broker_id``."""
        return next(b for b in self.brokers if b.broker_id == broker_id)

    def move_leader(self, topic: str, partition: int, broker_id: int, timeout: float = 30) -> None:
        """Make ``broker_id`` (a replica in the ISR) the partition's leader as an operator
        would: a reassignment that puts it first, then a preferred-leader election, by the
        cluster's controller; returns once every broker's metadata shows it."""
        controller = next(b for b in self.brokers if b.is_controller())
        controller.elect_leader(topic, partition, broker_id)
        deadline = time.monotonic() + timeout
        while not all(
            (p := b.partitions(topic).get(partition)) is not None and p.leader == broker_id
            for b in self.brokers
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}-{partition}: broker {broker_id} did not lead")
            time.sleep(0.02)

    def move_coordinator(self, group: str, broker_id: int) -> None:
        """Make ``broker_id`` the coordinator of ``group`` on every broker: FindCoordinator
        names it, the old coordinator answers NOT_COORDINATOR, members rejoin there."""
        for b in self.brokers:
            b.move_coordinator(group, broker_id)


CLUSTER_DEFAULTS: dict[str, str] = {
    "zookeeper.session.timeout.ms": "10000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
}


@pytest.fixture
def kafka_cluster(
    broker_factory: Callable[..., RunningBroker], zookeeper: str
) -> Callable[..., KafkaCluster]:
    """``kafka_cluster(brokers=3, overrides=None, **configs)``: in-process brokers 0..n-1 on a
    real ZooKeeper (Debian's package; the test is skipped, with the reason, when Java or the
    jar is missing), returned once every broker sees them all registered.
    ``default.replication.factor`` is the number of brokers, capped at 3."""

    def start(
        brokers: int = 3, overrides: Mapping[str, str] | None = None, **configs: str
    ) -> KafkaCluster:
        common = {
            **CLUSTER_DEFAULTS,
            "zookeeper.connect": zookeeper,
            "default.replication.factor": str(min(brokers, 3)),
            **(overrides or {}),
            **_config_keys(configs),
        }
        started = [broker_factory({**common, "broker.id": str(i)}) for i in range(brokers)]
        deadline = time.monotonic() + 30
        while not all(len(b.alive_brokers()) == brokers for b in started):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not every broker saw {brokers} registered within 30 s")
            time.sleep(0.05)
        return KafkaCluster(started, zookeeper)

    return start
