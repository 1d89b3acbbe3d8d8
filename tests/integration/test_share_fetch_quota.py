"""ShareFetch under a client's fetch quota (Kafka's handleShareFetchRequest): a share
group's client id with ``consumer_byte_rate`` set through ``kplane configs --entity-type
clients`` reads a big backlog with confluent-kafka's ShareConsumer held near the bound by
the broker's own measure, throttled, while a client the quota does not name reads beside
it unthrottled."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer, ShareConsumer

from kplane.testing.plugin import RunningBroker

from .test_client_quotas import metric
from .test_kafka_cli import ok
from .test_share_groups import set_group_config, share_config

BOUND = 1048576
"""consumer_byte_rate of the held client: 1 MiB/s."""
RECORDS, RECORD_BYTES = 40_000, 1024
"""The backlog: ~40 MB, far more than either client reads at the bound in the run."""
WARM_S = 11.0
"""A client's first quota.window.num one-second samples: its rate is measured over at
least 10 s from its first bytes, so it may take 10 s worth at once, and each response
until then adds to the measure (Kafka's Rate and throttle time): the measure settles
after."""
RUN_S = 16.0
"""How long both read."""


def test_a_share_consumer_is_held_by_its_client_quota(broker: RunningBroker) -> None:
    topic = "share-quota"
    broker.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 20})
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, f"{i:08d}".encode().ljust(RECORD_BYTES, b"q"))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0
    ok(
        "configs",
        "--bootstrap-server",
        broker.bootstrap(),
        "--entity-type",
        "clients",
        "--entity-name",
        "share-slow",
        "--alter",
        "--add-config",
        f"consumer_byte_rate={BOUND}",
    )
    read = {"share-slow": 0, "share-fast": 0}
    errors: list[BaseException] = []
    stop = threading.Event()

    def consume(client_id: str) -> None:
        group = f"{client_id}-group"
        try:
            set_group_config(broker, group, share_auto_offset_reset="earliest")
            with ShareConsumer(share_config(broker, group, **{"client.id": client_id})) as c:
                c.subscribe([topic])
                while not stop.is_set():
                    for msg in c.poll(0.2) or []:
                        assert msg.error() is None, msg.error()
                        read[client_id] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(c,), daemon=True) for c in read]
    for t in threads:
        t.start()
    # the broker's own measure of each client's rate, looked at while they read: the
    # highest of the whole run, and of the held client's once its measure settled
    rates: dict[str, float] = dict.fromkeys(read, 0.0)
    settled = 0.0
    start = time.monotonic()
    while time.monotonic() < start + RUN_S:
        time.sleep(0.5)
        for client_id in rates:
            rate = metric(broker, "kafka_server_fetch_byte_rate", user="", client_id=client_id)
            rates[client_id] = max(rates[client_id], rate or 0.0)
            if client_id == "share-slow" and time.monotonic() > start + WARM_S:
                settled = max(settled, rate or 0.0)
    stop.set()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert read["share-slow"] > 0, read
    # held near the bound, while the client beside it reads faster
    assert 0 < settled < 1.5 * BOUND, (settled, rates, read)
    assert rates["share-fast"] > rates["share-slow"], (rates, read)
    throttled = metric(broker, "kafka_server_fetch_throttle_time", user="", client_id="share-slow")
    assert throttled is not None and throttled > 0
    # the client the quota does not name is never throttled
    assert not metric(broker, "kafka_server_fetch_throttle_time", user="", client_id="share-fast")
