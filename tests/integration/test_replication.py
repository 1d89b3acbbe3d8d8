"""Replication between three brokers on a real ZooKeeper (issue 16): followers fetch from
leaders over the inter-broker listener, the ISR and the high watermark follow them, acks=all
waits for the ISR, and a leader's death loses no acknowledged record."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kplane.protocol.errors import ErrorCode
from kplane.protocol.records import build_batch
from kplane.testing.broker_view import PartitionInfo
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import produce, recs, wait_until

RECEIVE_BUFFER = 200_000


@pytest.fixture
def cluster(broker_factory, zookeeper, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Three brokers (file logs, so a restarted one keeps its log) and a way to restart."""
    common = {
        "zookeeper.connect": zookeeper,
        # Long enough that a busy CI machine does not expire a session mid-test (these
        # brokers stop cleanly; the kill -9 test below has its own, shorter, timeout).
        "zookeeper.session.timeout.ms": "10000",
        "kplane.log.storage": "file",
        "replica.fetch.wait.max.ms": "100",
        "replica.fetch.backoff.ms": "100",
        "replica.lag.time.max.ms": "2000",
        "default.replication.factor": "3",
        # Small fetches: answers end inside a batch, as they do at the 1 MiB default.
        "replica.fetch.max.bytes": "30000",
        "replica.socket.receive.buffer.bytes": str(RECEIVE_BUFFER),
    }

    def start(broker_id: int) -> RunningBroker:
        return broker_factory(
            {**common, "broker.id": str(broker_id), "log.dirs": str(tmp_path / f"b{broker_id}")}
        )

    brokers = {i: start(i) for i in range(3)}
    for b in brokers.values():
        wait_until(lambda b=b: len(b.alive_brokers()) == 3, what="three brokers")
    return brokers, start


def _create(broker: RunningBroker, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    admin.create_topics([NewTopic(topic, partitions, 3, config=configs)])[topic].result(15)


def _partition(broker: RunningBroker, topic: str, index: int = 0) -> PartitionInfo | None:
    return broker.partitions(topic).get(index)


def _all_in_sync(brokers: dict[int, RunningBroker], topic: str) -> bool:
    return all(
        (p := _partition(b, topic)) is not None and len(p.isr) == 3 and p.leader >= 0
        for b in brokers.values()
    )


def _bootstrap(brokers: dict[int, RunningBroker]) -> str:
    return ",".join(b.bootstrap() for b in brokers.values())


def _read_all(bootstrap: str, topic: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replication-reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def test_every_replica_joins_the_isr_and_holds_the_records(cluster) -> None:  # type: ignore[no-untyped-def]
    brokers, _start = cluster
    _create(brokers[0], "replicated", **{"min.insync.replicas": "2"})
    wait_until(lambda: _all_in_sync(brokers, "replicated"), what="ISR of three")
    p = Producer({"bootstrap.servers": _bootstrap(brokers), "acks": "all", "linger.ms": 5})
    for i in range(200):
        p.produce("replicated", f"r-{i}".encode())
    assert p.flush(30) == 0
    wait_until(
        lambda: all(
            (replica := b.replica("replicated", 0)) is not None
            and replica.log_end_offset == 200
            and replica.high_watermark == 200
            for b in brokers.values()
        ),
        what="every replica at offset 200",
    )
    # replica.socket.receive.buffer.bytes is the fetch connections' SO_RCVBUF (Linux
    # reports twice what was set, capped by net.core.rmem_max)
    rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
    buffers = {
        fetcher.receive_buffer
        for b in brokers.values()
        for fetcher in b.replica_fetchers()
        if fetcher.receive_buffer is not None
    }
    assert buffers == {2 * min(RECEIVE_BUFFER, rmem_max)}


def test_a_follower_far_behind_catches_up_through_partial_fetches(cluster) -> None:  # type: ignore[no-untyped-def]
    """Fetch answers cut inside a batch (replica.fetch.max.bytes) still move the follower
    on: it appends the whole batches and fetches the rest next."""
    brokers, _start = cluster
    topic = "far-behind"
    _create(brokers[0], topic)
    wait_until(lambda: _all_in_sync(brokers, topic), what="ISR of three")
    p = Producer(
        {
            "bootstrap.servers": _bootstrap(brokers),
            "acks": "1",
            "linger.ms": 20,
            "batch.size": 12000,
        }
    )
    for i in range(2000):
        p.produce(topic, f"{i:06d}".encode() * 40)
    assert p.flush(30) == 0
    wait_until(
        lambda: all(
            (replica := b.replica(topic, 0)) is not None and replica.log_end_offset == 2000
            for b in brokers.values()
        ),
        what="every replica at offset 2000",
    )


def test_leader_death_loses_no_acknowledged_record(cluster) -> None:  # type: ignore[no-untyped-def]
    brokers, start = cluster
    topic = "failover"
    _create(brokers[0], topic, **{"min.insync.replicas": "2"})
    wait_until(lambda: _all_in_sync(brokers, topic), what="ISR of three")
    acked: list[int] = []
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(int(msg.value().decode().split("-")[1]))
        else:
            failed.append(str(err))

    p = Producer(
        {
            "bootstrap.servers": _bootstrap(brokers),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
        }
    )
    for i in range(300):
        p.produce(topic, f"v-{i}".encode(), on_delivery=delivered)
    p.flush(30)
    leader = _partition(brokers[0], topic).leader
    brokers[leader].stop()
    survivors = {i: b for i, b in brokers.items() if i != leader}
    wait_until(
        lambda: all(
            (part := _partition(b, topic)) is not None and part.leader in survivors
            for b in survivors.values()
        ),
        what="a new leader",
    )
    for i in range(300, 600):
        p.produce(topic, f"v-{i}".encode(), on_delivery=delivered)
    assert p.flush(60) == 0, failed
    assert not failed
    records = _read_all(_bootstrap(survivors), topic, 600)
    values = [int(v.decode().split("-")[1]) for _, v in records]
    assert sorted(values) == sorted(acked) == list(range(600))  # none lost, none twice
    assert [o for o, _ in records] == list(range(600))

    # The old leader comes back, truncates what it had alone, and rejoins the ISR.
    brokers[leader] = start(leader)
    wait_until(lambda: _all_in_sync(brokers, topic), what="the old leader back in the ISR")


def test_acks_all_needs_min_insync_replicas(cluster) -> None:  # type: ignore[no-untyped-def]
    brokers, _start = cluster
    topic = "min-isr"
    _create(brokers[0], topic, **{"min.insync.replicas": "2"})
    wait_until(lambda: _all_in_sync(brokers, topic), what="ISR of three")
    leader = _partition(brokers[0], topic).leader
    for i, b in brokers.items():
        if i != leader:
            b.stop()
    wait_until(
        lambda: (
            (part := _partition(brokers[leader], topic)) is not None
            and part.isr == (leader,)
            # the leader's own replica has taken the LeaderAndIsr that said so (a controller
            # that shrinks the ISR moves the leader epoch on), not only its metadata cache
            and (own := brokers[leader].replica(topic, 0)) is not None
            and own.leader_epoch == part.leader_epoch
        ),
        what="the ISR down to the leader",
    )
    under_replicated = "kafka_server_replicamanager_underreplicatedpartitions 1.0"
    assert under_replicated in brokers[leader].metrics_text().splitlines()
    with brokers[leader].wire() as client:
        refused = produce(client, topic, build_batch(recs("k", 1)), acks=-1)
        assert refused.error_code == ErrorCode.not_enough_replicas
        accepted = produce(client, topic, build_batch(recs("k", 1)), acks=1)
        assert accepted.error_code == ErrorCode.none


def test_controlled_shutdown_moves_leadership_without_producer_errors(cluster) -> None:  # type: ignore[no-untyped-def]
    brokers, _start = cluster
    topic = "controlled"
    _create(brokers[0], topic, **{"min.insync.replicas": "2"})
    wait_until(lambda: _all_in_sync(brokers, topic), what="ISR of three")
    leader = _partition(brokers[0], topic).leader
    errors: list[Any] = []
    acked: list[int] = []
    p = Producer(
        {
            "bootstrap.servers": _bootstrap(brokers),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
        }
    )

    def delivered(err: Any, msg: Any) -> None:
        (errors if err is not None else acked).append(err if err is not None else msg.offset())

    stop_at = 150
    for i in range(400):
        p.produce(topic, f"c-{i}".encode(), on_delivery=delivered)
        p.poll(0)
        if i == stop_at:
            brokers[leader].stop()  # controlled shutdown first: the leadership moves
        time.sleep(0.002)
    assert p.flush(60) == 0
    assert errors == []
    assert sorted(acked) == list(range(400))
    survivors = {i: b for i, b in brokers.items() if i != leader}
    assert _partition(survivors[min(survivors)], topic).leader in survivors


def test_replication_over_a_sasl_ssl_inter_broker_listener(
    broker_factory, zookeeper, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from kplane.common.certs import create_test_pki

    pki = create_test_pki(tmp_path / "pki", ["127.0.0.1", "localhost"])
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="broker" password="broker-secret" user_broker="broker-secret";'
    )
    common = {
        "zookeeper.connect": zookeeper,
        "zookeeper.session.timeout.ms": "4000",
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": jaas,
        "listener.name.internal.ssl.keystore.type": "PKCS12",
        "listener.name.internal.ssl.keystore.location": str(pki.broker_p12),
        "listener.name.internal.ssl.keystore.password": pki.password,
        "listener.name.internal.ssl.truststore.type": "PKCS12",
        "listener.name.internal.ssl.truststore.location": str(pki.truststore_p12),
        "listener.name.internal.ssl.truststore.password": pki.password,
        "replica.fetch.wait.max.ms": "100",
        # With an authorizer on, a follower's Fetch needs ClusterAction: the brokers
        # authenticate as User:broker, a super user; clients (ANONYMOUS) are let through.
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker",
        "allow.everyone.if.no.acl.found": "true",
    }
    brokers = {i: broker_factory({**common, "broker.id": str(i)}) for i in range(2)}
    for b in brokers.values():
        wait_until(lambda b=b: len(b.alive_brokers()) == 2, what="two brokers")
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap("PLAINTEXT")})
    # An ACL on the cluster: from now on only its principals have ClusterAction there.
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )
    from confluent_kafka.admin import ResourceType as AclResourceType

    binding = AclBinding(
        AclResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        "User:broker",
        "*",
        AclOperation.CLUSTER_ACTION,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([binding]).values():
        future.result(10)
    admin.create_topics([NewTopic("secure-replicated", 1, 2)])["secure-replicated"].result(15)
    wait_until(
        lambda: (p := _partition(brokers[0], "secure-replicated")) is not None and len(p.isr) == 2,
        what="ISR of two over SASL_SSL",
    )
    p = Producer({"bootstrap.servers": brokers[0].bootstrap("PLAINTEXT"), "acks": "all"})
    for i in range(50):
        p.produce("secure-replicated", f"s-{i}".encode())
    assert p.flush(30) == 0
    wait_until(
        lambda: all(
            (replica := b.replica("secure-replicated", 0)) is not None
            and replica.log_end_offset == 50
            for b in brokers.values()
        ),
        what="both replicas at offset 50",
    )
    # A follower's Fetch from an anonymous client is refused (no ClusterAction).
    import dataclasses

    from tests.integration.helpers import fetch_partition, fetch_request

    leader = _partition(brokers[0], "secure-replicated").leader
    request = dataclasses.replace(fetch_request("secure-replicated", 0), replica_id=7)
    with brokers[leader].wire("PLAINTEXT") as client:
        refused = fetch_partition(client, request)
    assert refused.error_code == ErrorCode.topic_authorization_failed


def test_kill_9_of_the_leader_under_an_idempotent_producer(
    broker_process, zookeeper, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """``kplane serve`` processes: the leader killed with SIGKILL mid-stream, a new leader
    from the ISR, every acknowledged record once; the killed broker comes back (truncating
    what only it had) and rejoins the ISR."""
    from tests.integration.test_zookeeper_cluster import _wait as wait_value

    ports: dict[int, int] = {}

    def serve(broker_id: int) -> Any:
        extra = [
            f"zookeeper.connect={zookeeper}",
            "zookeeper.session.timeout.ms=4000",
            f"broker.id={broker_id}",
            f"log.dirs={tmp_path / f'kill-{broker_id}'}",
            "replica.fetch.wait.max.ms=100",
            "replica.fetch.backoff.ms=200",
            "replica.lag.time.max.ms=3000",
        ]
        if broker_id in ports:
            extra.append(f"listeners=PLAINTEXT://127.0.0.1:{ports[broker_id]}")
            handle = broker_process("configs/server.properties", *extra, plaintext_port=False)
            handle.port = ports[broker_id]
        else:
            handle = broker_process("configs/server.properties", *extra)
            ports[broker_id] = handle.port
        return handle

    procs = {i: serve(i) for i in range(3)}
    bootstrap = ",".join(f"127.0.0.1:{ports[i]}" for i in range(3))
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def broker_count() -> int:
        try:
            return len(admin.list_topics(timeout=5).brokers)
        except KafkaException:
            return 0

    # A listening port is not a registered broker yet: wait for all three in Metadata.
    wait_value(lambda: broker_count() == 3, timeout=30)
    admin.create_topics([NewTopic("killed", 1, 3, config={"min.insync.replicas": "2"})])[
        "killed"
    ].result(30)

    def isr_and_leader() -> tuple[int, tuple[int, ...]] | None:
        try:  # a broker just killed or starting may not answer in time: ask again
            md = admin.list_topics("killed", timeout=5).topics["killed"].partitions.get(0)
        except KafkaException:
            return None
        return (md.leader, tuple(sorted(md.isrs))) if md is not None else None

    settled = wait_value(
        lambda: s if (s := isr_and_leader()) is not None and s[1] == (0, 1, 2) else None,
        timeout=30,
    )
    leader = settled[0]  # the state seen, not a second ask that may time out
    acked: list[int] = []
    failed: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(int(msg.value().decode().split("-")[1]))
        else:
            failed.append(err)

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
        }
    )
    for i in range(1000):
        p.produce("killed", f"k-{i}".encode(), on_delivery=delivered)
        p.poll(0)
        if i == 300:
            procs[leader].kill()
        time.sleep(0.001)
    assert p.flush(90) == 0
    assert failed == []
    others = ",".join(f"127.0.0.1:{ports[i]}" for i in range(3) if i != leader)
    records = _read_all(others, "killed", 1000)
    assert sorted(int(v.decode().split("-")[1]) for _, v in records) == sorted(acked)
    assert sorted(acked) == list(range(1000))  # every record acknowledged exactly once

    procs[leader] = serve(leader)
    wait_value(lambda: (s := isr_and_leader()) is not None and s[1] == (0, 1, 2), timeout=60)


def test_preferred_leader_election(cluster) -> None:  # type: ignore[no-untyped-def]
    """The preferred replica (first assigned) leads again after it came back: by
    ElectLeaders from confluent-kafka's admin client."""
    from confluent_kafka import ElectionType

    brokers, start = cluster
    topic = "preferred"
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[0, 1, 2]])])[
        topic
    ].result(15)
    wait_until(lambda: _all_in_sync(brokers, topic), what="ISR of three")
    assert _partition(brokers[1], topic).leader == 0
    brokers[0].stop()
    wait_until(lambda: _partition(brokers[1], topic).leader in (1, 2), what="leadership moved")
    brokers[0] = start(0)
    wait_until(lambda: _all_in_sync(brokers, topic), what="broker 0 back in the ISR")
    assert _partition(brokers[1], topic).leader != 0
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
    results = elected.result(15)
    assert results[TopicPartition(topic, 0)] is None
    wait_until(lambda: _partition(brokers[1], topic).leader == 0, what="preferred leader back")
    again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(15)
    assert again[TopicPartition(topic, 0)].code() == 84  # ELECTION_NOT_NEEDED


def test_partition_reassignment_with_kafka_python(cluster) -> None:  # type: ignore[no-untyped-def]
    """AlterPartitionReassignments moves a partition from brokers (0, 1) to (1, 2): broker 2
    catches up, joins the ISR, broker 0's replica is stopped and deleted, no record lost."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTp

    brokers, _start = cluster
    topic = "moving"
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[0, 1]])])[
        topic
    ].result(15)
    wait_until(
        lambda: (p := _partition(brokers[2], topic)) is not None and len(p.isr) == 2,
        what="ISR of two",
    )
    p = Producer({"bootstrap.servers": _bootstrap(brokers), "acks": "all"})
    for i in range(100):
        p.produce(topic, f"m-{i}".encode())
    assert p.flush(30) == 0

    kadmin = KafkaAdminClient(bootstrap_servers=_bootstrap(brokers))
    try:
        accepted = kadmin.alter_partition_reassignments({KTp(topic, 0): [1, 2]})
        assert accepted == {KTp(topic, 0): None}
        wait_until(
            lambda: (
                (part := _partition(brokers[0], topic)) is not None
                and part.replicas == (1, 2)
                and set(part.isr) == {1, 2}
            ),
            what="replicas (1, 2) in sync",
        )
        assert kadmin.list_partition_reassignments() == {}
    finally:
        kadmin.close()
    wait_until(lambda: brokers[0].replica(topic, 0) is None, what="deleted")
    moved = brokers[2].replica(topic, 0)
    assert moved is not None and moved.log_end_offset == 100
    values = sorted(v for _, v in _read_all(_bootstrap(brokers), topic, 100))
    assert values == sorted(f"m-{i}".encode() for i in range(100))


def test_leader_replication_throttle(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """leader.replication.throttled.rate holds back an out-of-sync follower of a throttled
    replica once the rate is used up; raising the rate (a dynamic broker config) lets it
    fetch again (KIP-73). The follower is a Fetch with a replica id not in the ISR."""
    import dataclasses

    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from tests.integration.helpers import fetch_partition, fetch_request

    broker = broker_factory({"leader.replication.throttled.rate": "1"})
    topic = "throttled"
    broker.create_topic(topic, config={"leader.replication.throttled.replicas": "*"})
    with broker.wire() as client:
        for _ in range(10):
            produce(client, topic, build_batch(recs("t", 10, size=100)), acks=1)

    def follower_fetch() -> int:
        request = dataclasses.replace(fetch_request(topic, 0), replica_id=5)
        with broker.wire() as client:
            part = fetch_partition(client, request)
        assert part.error_code == ErrorCode.none
        return len(part.records or b"")

    assert follower_fetch() > 0  # within the rate: served, and counted
    assert follower_fetch() == 0  # 1 B/s used up: nothing for the throttled follower
    admin = AdminClient({"bootstrap.servers": broker.bootstrap()})
    resource = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry(
                "leader.replication.throttled.rate",
                str(2**63 - 1),
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(10)
    wait_until(lambda: follower_fetch() > 0, what="the throttle lifted")


def test_fetch_checks_the_current_leader_epoch(broker: RunningBroker) -> None:
    """KIP-320: a Fetch naming an older leader epoch gets FENCED_LEADER_EPOCH, a newer one
    UNKNOWN_LEADER_EPOCH; -1 skips the check."""
    import dataclasses

    from tests.integration.helpers import fetch_partition, fetch_request

    broker.create_topic("epochs")
    replica = broker.replica("epochs", 0)
    assert replica is not None
    epoch = replica.leader_epoch

    def fetch(current: int) -> int:
        request = fetch_request("epochs", 0)
        (topic,) = request.topics
        (part,) = topic.partitions
        part = dataclasses.replace(part, current_leader_epoch=current)
        request = dataclasses.replace(
            request, topics=(dataclasses.replace(topic, partitions=(part,)),)
        )
        with broker.wire() as client:
            return int(fetch_partition(client, request).error_code)

    assert fetch(epoch) == ErrorCode.none
    assert fetch(-1) == ErrorCode.none
    assert fetch(epoch + 1) == ErrorCode.unknown_leader_epoch
    # As if a newer LeaderAndIsr had come: the client's epoch is now the older one.
    broker.set_leader("epochs", 0, broker.broker_id, epoch + 1)
    assert fetch(epoch) == ErrorCode.fenced_leader_epoch


def test_num_replica_fetchers_changes_live(cluster) -> None:  # type: ignore[no-untyped-def]
    """num.replica.fetchers is a dynamic cluster-wide config (KIP-226): the followed
    partitions spread over more threads per leader, and replication goes on."""
    from tests.integration.test_dynamic_config import _set

    brokers, _start = cluster
    topic = "refetched"
    _create(brokers[0], topic, partitions=6)
    wait_until(
        lambda: all(
            len(found := b.partitions(topic)) == 6 and all(len(p.isr) == 3 for p in found.values())
            for b in brokers.values()
        ),
        what="six partitions in sync",
    )
    _set(brokers[0], "", {"num.replica.fetchers": "2"})  # the cluster-wide default
    wait_until(
        lambda: all(b.current_config("num.replica.fetchers") == 2 for b in brokers.values()),
        what="num.replica.fetchers=2 everywhere",
    )
    wait_until(
        lambda: any(
            len({f.fetcher_id for f in b.replica_fetchers()}) == 2 for b in brokers.values()
        ),
        what="two fetchers for a leader",
    )
    p = Producer({"bootstrap.servers": _bootstrap(brokers), "acks": "all"})
    for i in range(120):
        p.produce(topic, f"f-{i}".encode(), partition=i % 6)
    assert p.flush(30) == 0
