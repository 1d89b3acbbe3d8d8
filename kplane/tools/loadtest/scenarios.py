"""The brokers of ``kplane loadtest``: one scenario's ``kplane serve`` process, a cluster of
them on a real ZooKeeper, or a running broker.

Each scenario starts fresh brokers on loopback with ephemeral ports and learns their endpoints
and metrics URLs from their JSON log lines ("listener bound", "metrics exposed", "started").
A cluster scenario (``CLUSTER_SCENARIOS``) starts ZooKeeper (``tools.zookeeper``) and three
brokers laid out as ``kplane cluster up`` lays them out (``tools.cluster.broker_overrides``).
Everything started is stopped: brokers with SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``,
then ZooKeeper.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kplane.tools.cluster import SINGLE_REQUEST_QUEUE, broker_overrides
from kplane.tools.loadtest.controller import Endpoint
from kplane.tools.serve_process import ServeFailed, ServeProcess, spawn_serve
from kplane.tools.zookeeper import ZooKeeperServer, unavailable_reason

LOOPBACK = "127.0.0.1"
DATA_LISTENER = "CLIENT"
INTER_BROKER_LISTENER = "INTERNAL"
CONTROL_LISTENER = "CONTROLLER"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class ScenarioError(Exception):
    """A scenario could not run; the message is one line for the user."""


@dataclass(frozen=True)
class ScenarioSpec:
    """A broker layout and whether data load runs against it."""

    name: str
    listeners: tuple[str, ...]
    control_plane: bool
    """Whether ``control.plane.listener.name`` separates CONTROLLER (KIP-291)."""
    data_load: bool
    brokers: int = 1
    """More than one: a cluster on ZooKeeper whose own controller moves leaders."""

    @property
    def control_listener(self) -> str:
        """Where the fake controller sends: CONTROLLER when separated, else the
        inter-broker listener (the data plane)."""
        return CONTROL_LISTENER if self.control_plane else INTER_BROKER_LISTENER


SEPARATED_LISTENERS = (DATA_LISTENER, INTER_BROKER_LISTENER, CONTROL_LISTENER)
SCENARIOS: Mapping[str, ScenarioSpec] = {
    "idle": ScenarioSpec("idle", SEPARATED_LISTENERS, control_plane=True, data_load=False),
    "shared": ScenarioSpec(
        "shared", (DATA_LISTENER, INTER_BROKER_LISTENER), control_plane=False, data_load=True
    ),
    "separated": ScenarioSpec("separated", SEPARATED_LISTENERS, control_plane=True, data_load=True),
}
CLUSTER_BROKERS = 3
CLUSTER_SCENARIOS: Mapping[str, ScenarioSpec] = {
    "cluster-shared": ScenarioSpec(
        "cluster-shared",
        (DATA_LISTENER, INTER_BROKER_LISTENER),
        control_plane=False,
        data_load=True,
        brokers=CLUSTER_BROKERS,
    ),
    "cluster-separated": ScenarioSpec(
        "cluster-separated",
        SEPARATED_LISTENERS,
        control_plane=True,
        data_load=True,
        brokers=CLUSTER_BROKERS,
    ),
}
ALL_SCENARIOS: Mapping[str, ScenarioSpec] = {**SCENARIOS, **CLUSTER_SCENARIOS}
SCENARIO_GROUPS: Mapping[str, tuple[str, ...]] = {"cluster": tuple(CLUSTER_SCENARIOS)}
"""Names that stand for several scenarios on the command line."""
CLUSTER_PROPERTIES = (
    "auto.leader.rebalance.enable=false",  # leaders move when the load test moves them
    "controlled.shutdown.enable=false",  # the cluster is torn down whole, after measuring
)


@dataclass(frozen=True)
class Target:
    """A broker to load: its data endpoint, where controller requests go, all its endpoints."""

    broker_id: int
    data: Endpoint
    control: Endpoint
    endpoints: tuple[Endpoint, ...]
    metrics_url: str | None
    controller_epoch: int
    """The broker's controller epoch: the fake controller speaks as that controller, so it
    never fences the broker's own (a higher epoch would)."""


def broker_properties(spec: ScenarioSpec, log_dir: Path, partitions: int) -> dict[str, str]:
    """server.properties of ``spec``'s broker: loopback listeners on ephemeral ports,
    metrics exposed, no group rebalance delay; with shared planes, Kafka's single request
    queue (KIP-291's baseline)."""
    props = {
        "broker.id": "0",
        "listeners": ",".join(f"{name}://{LOOPBACK}:0" for name in spec.listeners),
        "listener.security.protocol.map": ",".join(f"{n}:PLAINTEXT" for n in spec.listeners),
        "inter.broker.listener.name": INTER_BROKER_LISTENER,
        "log.dirs": str(log_dir),
        "num.partitions": str(partitions),
        "group.initial.rebalance.delay.ms": "0",
        "kplane.metrics.host": LOOPBACK,
        "kplane.metrics.port": "0",
    }
    if spec.control_plane:
        props["control.plane.listener.name"] = CONTROL_LISTENER
    else:
        key, value = SINGLE_REQUEST_QUEUE
        props[key] = value
    return props


def target_from_events(
    events: list[dict[str, Any]], broker_id: int, control_listener: str
) -> Target:
    """The Target a started broker announced in its "listener bound" and "metrics exposed"
    lines (advertised host and port)."""
    endpoints = []
    for e in events:
        if e.get("event") != "listener bound":
            continue
        host, port = e["advertised"].split("://", 1)[1].rsplit(":", 1)
        endpoints.append(Endpoint(e["listener"], host, int(port), e["security_protocol"]))
    by_name = {e.listener: e for e in endpoints}
    missing = {DATA_LISTENER, control_listener} - set(by_name)
    if missing:
        raise ScenarioError(f"the broker did not bind the listener(s) {', '.join(sorted(missing))}")
    urls = [e["url"] for e in events if e.get("event") == "metrics exposed"]
    epochs = [int(e["controller_epoch"]) for e in events if e.get("event") == "controller elected"]
    return Target(
        broker_id,
        by_name[DATA_LISTENER],
        by_name[control_listener],
        tuple(endpoints),
        urls[0] if urls else None,
        epochs[-1] if epochs else 1,
    )


@contextmanager
def started_broker(
    spec: ScenarioSpec,
    workdir: Path,
    log_path: Path,
    partitions: int,
    overrides: Sequence[str],
    preexec: Callable[[], None] | None = None,
) -> Iterator[Target]:
    """Run ``kplane serve`` for ``spec`` (its log in ``log_path``) until the block ends;
    ``preexec`` runs in the child before it starts (CPU pinning)."""
    workdir.mkdir(parents=True, exist_ok=True)
    props_path = workdir / f"{spec.name}.properties"
    props = broker_properties(spec, workdir / f"{spec.name}-data", partitions)
    props_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    serve = spawn_serve(str(props_path), overrides, log_path, preexec=preexec)
    try:
        try:
            events = serve.wait_started(START_TIMEOUT_S)
        except ServeFailed as exc:
            raise ScenarioError(str(exc)) from None
        yield target_from_events(events, int(props["broker.id"]), spec.control_listener)
    finally:
        serve.stop(STOP_TIMEOUT_S)


@dataclass(frozen=True)
class ClusterTarget:
    """A started cluster: its brokers by id, and ZooKeeper's address."""

    brokers: tuple[Target, ...]
    zookeeper: str

    @property
    def bootstrap(self) -> str:
        """Every broker's data endpoint, as ``bootstrap.servers``."""
        return ",".join(f"{t.data.host}:{t.data.port}" for t in self.brokers)


def cluster_broker_overrides(
    spec: ScenarioSpec, broker_id: int, zookeeper: str, log_dir: Path, partitions: int
) -> list[str]:
    """The ``--override`` settings of one broker of ``spec``'s cluster: ``kplane cluster
    up``'s layout on ephemeral ports (without CONTROLLER when the planes are shared), no
    leader moves of its own, no controlled shutdown at the teardown."""
    return [
        *broker_overrides(broker_id, 0, zookeeper, log_dir, control_plane=spec.control_plane),
        f"num.partitions={partitions}",
        "kplane.metrics.host=" + LOOPBACK,
        *CLUSTER_PROPERTIES,
    ]


@contextmanager
def started_cluster(
    spec: ScenarioSpec,
    workdir: Path,
    log_dir: Path,
    partitions: int,
    overrides: Sequence[str],
    preexec: Callable[[], None] | None = None,
) -> Iterator[ClusterTarget]:
    """Run ZooKeeper and ``spec.brokers`` brokers (logs ``log_dir/<scenario>-broker-<id>.log``)
    until the block ends; ``preexec`` runs in each broker before it starts (CPU pinning)."""
    reason = unavailable_reason()
    if reason is not None:
        raise ScenarioError(f"no ZooKeeper: {reason}")
    workdir.mkdir(parents=True, exist_ok=True)
    zookeeper = ZooKeeperServer(workdir / f"{spec.name}-zookeeper")
    serves: list[ServeProcess] = []
    try:
        try:
            zookeeper.start()
        except RuntimeError as exc:
            raise ScenarioError(str(exc).splitlines()[0]) from None
        for broker_id in range(spec.brokers):
            props = cluster_broker_overrides(
                spec, broker_id, zookeeper.connect, workdir / f"{spec.name}-{broker_id}", partitions
            )
            log_path = log_dir / f"{spec.name}-broker-{broker_id}.log"
            serves.append(spawn_serve(os.devnull, [*props, *overrides], log_path, preexec=preexec))
        targets = []
        for broker_id, serve in enumerate(serves):
            try:
                events = serve.wait_started(START_TIMEOUT_S)
            except ServeFailed as exc:
                raise ScenarioError(f"broker {broker_id}: {exc}") from None
            targets.append(target_from_events(events, broker_id, spec.control_listener))
        yield ClusterTarget(tuple(targets), zookeeper.connect)
    finally:
        for serve in serves:  # all at once: each stops while the others do
            if serve.process.poll() is None:
                serve.process.send_signal(signal.SIGTERM)
        for serve in serves:
            serve.stop(STOP_TIMEOUT_S)
        zookeeper.stop()


def parse_address(value: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); ValueError unless the host is a loopback address."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{value!r} is not host:port")
    if not is_loopback(host):
        raise ValueError(f"{host} is not a loopback address (kplane loadtest stays on loopback)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos
    )


def external_target(
    bootstrap: str,
    control: str | None,
    listeners: Sequence[str],
    broker_id: int,
    metrics_url: str | None,
    controller_epoch: int = 1,
) -> Target:
    """The Target of a running broker from the command line; ValueError on bad input."""
    data_host, data_port = parse_address(bootstrap)
    control_host, control_port = parse_address(control or bootstrap)
    endpoints = []
    for item in listeners:
        name, sep, address = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--listener {item!r} is not NAME=host:port")
        host, port = parse_address(address)
        endpoints.append(Endpoint(name, host, port))
    if not endpoints:
        raise ValueError(
            "--listener NAME=host:port is required with --bootstrap-server: every listener of "
            "the broker, since UpdateMetadata replaces its endpoints"
        )
    return Target(
        broker_id,
        _named(endpoints, data_host, data_port),
        _named(endpoints, control_host, control_port),
        tuple(endpoints),
        metrics_url,
        controller_epoch,
    )


def _named(endpoints: list[Endpoint], host: str, port: int) -> Endpoint:
    """The listed endpoint at host:port, or an unnamed one when none matches."""
    for e in endpoints:
        if (e.host, e.port) == (host, port):
            return e
    return Endpoint("", host, port)
