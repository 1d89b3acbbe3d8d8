"""Client telemetry (KIP-714): subscriptions through `kplane client-metrics`, librdkafka's
pushes decoded onto the broker's Prometheus endpoint, and Kafka's errors for bad pushes."""

from __future__ import annotations

import gc
import gzip
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.static.primitive import i32
from prometheus_client.parser import text_string_to_metric_families

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker
from kplane.tools.cli import main
from tests.integration.helpers import command_config, secured_broker_overrides, wait_until

PRODUCER_PREFIX = "org.apache.kafka.producer."
ZERO = uuid.UUID(int=0)


def cli(
    capsys: pytest.CaptureFixture[str],
    broker: RunningBroker,
    *args: str,
    listener: str | None = None,
) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["client-metrics", "--bootstrap-server", broker.bootstrap(listener), *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def samples(broker: RunningBroker) -> list[Any]:
    url = broker.metrics_url()
    assert url is not None
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def pushed(broker: RunningBroker, client_id: str) -> list[Any]:
    """The samples of ``client_id``'s pushed producer metrics."""
    return [
        s
        for s in samples(broker)
        if s.name.startswith("org_apache_kafka_producer_")
        and s.labels.get("client_id") == client_id
    ]


def requests_of(broker: RunningBroker, api: str) -> float:
    return sum(
        s.value
        for s in samples(broker)
        if s.name == "kafka_network_requestmetrics_requestspersec_total"
        and s.labels.get("request") == api
    )


def producing(broker: RunningBroker, client_id: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "client.id": client_id,
            "linger.ms": 5,
        }
    )


def produce_for(producer: Producer, topic: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        producer.produce(topic, b"v")
        producer.poll(0.1)
    producer.flush(10)


def producing_until(producer: Producer, topic: str, check: Callable[[], Any]) -> Callable[[], Any]:
    """A wait_until predicate: produce for half a second, then ``check()``."""

    def step() -> Any:
        produce_for(producer, topic, 0.5)
        return check()

    return step


def test_pushed_producer_metrics_reach_prometheus_until_the_subscription_goes(
    broker_factory, capsys
) -> None:
    broker = broker_factory({"kplane.metrics.port": "0"})
    broker.create_topic("telemetry", 1)
    # the issue's own subscription: every metric, every second
    code, out = cli(
        capsys, broker, "--alter", "--name", "all", "--metrics", "*", "--interval", "1000"
    )
    assert code == 0 and "Altered client metrics config for all." in out, out
    producer = producing(broker, "measured")
    try:
        found = wait_until(
            producing_until(producer, "telemetry", lambda: pushed(broker, "measured")),
            timeout=30,
            what="the producer's pushed metrics on /metrics",
        )
        labels = found[0].labels
        assert labels["client_software_name"] == "confluent-kafka-python"
        assert labels["client_instance_id"]
        names = {s.name for s in found}
        assert any("request_latency" in n or "rtt" in n for n in names), names
        # The subscription goes: the producer's next push is refused, it asks again, gets
        # no metrics and stops pushing; its series expire after three intervals.
        code, out = cli(capsys, broker, "--delete", "--name", "all")
        assert code == 0 and "Deleted client metrics config for all." in out, out
        wait_until(
            producing_until(producer, "telemetry", lambda: not pushed(broker, "measured")),
            timeout=30,
            what="the producer's metrics to go once unsubscribed",
        )
        pushes = requests_of(broker, "PushTelemetry")
        produce_for(producer, "telemetry", 3)
        assert requests_of(broker, "PushTelemetry") == pushes
    finally:
        producer.flush(10)


def test_without_a_subscription_clients_do_not_push(broker_factory) -> None:
    broker = broker_factory({"kplane.metrics.port": "0"})
    broker.create_topic("quiet", 1)
    producer = producing(broker, "unsubscribed")
    produce_for(producer, "quiet", 1)
    wait_until(
        lambda: requests_of(broker, "GetTelemetrySubscriptions") > 0,
        what="the producer to ask for its subscription",
    )
    produce_for(producer, "quiet", 3)
    assert requests_of(broker, "PushTelemetry") == 0
    assert pushed(broker, "unsubscribed") == []


def test_cli_round_trip(broker_factory, capsys) -> None:
    broker = broker_factory()
    code, out = cli(
        capsys, broker, "--alter", "--name", "slow-ones", "--metrics", "org.apache.kafka.,x.y",
        "--interval", "60000", "--match", "client_id=slow.*,client_software_name=librdkafka",
    )  # fmt: skip
    assert code == 0, out
    code, out = cli(capsys, broker, "--alter", "--name", "all", "--metrics", "*")
    assert code == 0, out
    code, out = cli(capsys, broker, "--list")
    assert code == 0 and out.split() == ["all", "slow-ones"], out
    code, out = cli(capsys, broker, "--describe", "--name", "slow-ones")
    assert code == 0, out
    assert out.splitlines() == [
        "Client metrics configs for slow-ones are:",
        "  interval.ms=60000",
        "  match=client_id=slow.*,client_software_name=librdkafka",
        "  metrics=org.apache.kafka.,x.y",
    ]
    code, out = cli(capsys, broker, "--describe")
    assert "Client metrics configs for all are:\n  metrics=*" in out, out
    code, out = cli(capsys, broker, "--delete", "--name", "all")
    assert code == 0, out
    code, out = cli(capsys, broker, "--list")
    assert out.split() == ["slow-ones"], out
    # Kafka's refusals: an interval out of bounds, a bad selector, a bad command line.
    code, out = cli(capsys, broker, "--alter", "--name", "x", "--interval", "50")
    assert code == 1 and "interval must be between 100 and 3600000" in out, out
    code, out = cli(capsys, broker, "--alter", "--name", "x", "--match", "host=a")
    assert code == 1 and "Illegal client matching pattern: host=a" in out, out
    code, out = cli(capsys, broker, "--delete")
    assert code == 1 and "must be specified with --delete" in out, out
    code, out = cli(capsys, broker, "--list")
    assert out.split() == ["slow-ones"], out


def get_subscriptions(client: Any, instance: uuid.UUID = ZERO) -> Any:
    from kio.schema.get_telemetry_subscriptions.v0.request import (
        GetTelemetrySubscriptionsRequest,
    )

    return client.request(GetTelemetrySubscriptionsRequest(client_instance_id=instance))


def push(client: Any, instance: uuid.UUID, subscription: int, **fields: Any) -> ErrorCode:
    from kio.schema.push_telemetry.v0.request import PushTelemetryRequest

    values: dict[str, Any] = {"terminating": False, "compression_type": 0, "metrics": b""}
    values.update(fields)
    request = PushTelemetryRequest(
        client_instance_id=instance, subscription_id=i32(subscription), **values
    )
    return ErrorCode(client.request(request).error_code)


def test_bad_pushes_get_kafkas_errors(broker_factory) -> None:
    broker = broker_factory({"telemetry.max.bytes": "1024"})
    with broker.wire() as client:
        assert push(client, ZERO, 0) == ErrorCode.invalid_request

        def fresh() -> tuple[uuid.UUID, int]:
            got = get_subscriptions(client)
            assert got.error_code == ErrorCode.none
            assert got.client_instance_id != ZERO
            assert got.requested_metrics == ()  # no subscription: nothing to push
            assert got.telemetry_max_bytes == 1024 and got.delta_temporality
            assert set(got.accepted_compression_types) == {1, 2, 3, 4}
            return got.client_instance_id, int(got.subscription_id)

        instance, subscription = fresh()
        assert push(client, instance, subscription + 1) == ErrorCode.unknown_subscription_id
        instance, subscription = fresh()
        assert push(client, instance, subscription, compression_type=9) == (
            ErrorCode.unsupported_compression_type
        )
        instance, subscription = fresh()
        assert push(client, instance, subscription, metrics=b"\0" * 1025) == (
            ErrorCode.telemetry_too_large
        )
        instance, subscription = fresh()
        garbage = gzip.compress(b"\x0a\xff\xff\xff\x0f")
        assert push(client, instance, subscription, compression_type=1, metrics=garbage) == (
            ErrorCode.invalid_record
        )
        instance, subscription = fresh()
        assert push(client, instance, subscription) == ErrorCode.none
        # Before the push interval (5 minutes without a subscription): throttled, but a
        # terminating push is taken, and nothing after it.
        assert push(client, instance, subscription) == ErrorCode.throttling_quota_exceeded
        assert get_subscriptions(client, instance).error_code == (
            ErrorCode.throttling_quota_exceeded
        )
        assert push(client, instance, subscription, terminating=True) == ErrorCode.none
        assert push(client, instance, subscription, terminating=True) == ErrorCode.invalid_request


def test_a_client_instance_is_forgotten_when_its_connection_closes(broker_factory) -> None:
    """As Kafka's connection-disconnect listener: the instance a connection made goes when
    it closes, so the client's first push on a new connection is a new instance's (taken,
    not throttled as a second push within the interval is)."""
    broker = broker_factory({})
    with broker.wire() as client:
        got = get_subscriptions(client)
        assert got.error_code == ErrorCode.none
        instance, subscription = got.client_instance_id, int(got.subscription_id)
        assert push(client, instance, subscription) == ErrorCode.none
        assert push(client, instance, subscription) == ErrorCode.throttling_quota_exceeded
    with broker.wire() as client:
        wait_until(
            lambda: push(client, instance, subscription) == ErrorCode.none,
            30,
            "the instance forgotten with its connection",
        )
        assert push(client, instance, subscription) == ErrorCode.throttling_quota_exceeded


def test_subscriptions_need_the_clusters_config_acls_pushes_none(
    broker_factory, tmp_path: Path, capsys
) -> None:
    broker = broker_factory(secured_broker_overrides())
    alice = ("--command-config", str(command_config(tmp_path / "alice.properties", "alice")))
    admin = ("--command-config", str(command_config(tmp_path / "admin.properties", "admin")))
    on = {"listener": "SASL_PLAINTEXT"}
    code, out = cli(capsys, broker, *alice, "--alter", "--name", "a", "--metrics", "*", **on)
    assert code == 1 and ErrorCode.cluster_authorization_failed.name in out, out
    code, out = cli(
        capsys,
        broker,
        *admin,
        "--alter",
        "--name",
        "a",
        "--metrics",
        "*",
        "--interval",
        "1000",
        **on,
    )
    assert code == 0, out
    for action in (("--list",), ("--describe", "--name", "a")):
        code, out = cli(capsys, broker, *alice, *action, **on)
        assert code == 1 and ErrorCode.cluster_authorization_failed.name in out, out
    code, out = cli(capsys, broker, *admin, "--describe", **on)
    assert code == 0 and "  metrics=*" in out, out
    # A client needs no ACL to ask for its subscription and push.
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
            "client.id": "alice-app",
        }
    )
    wait_until(
        lambda: (producer.poll(0.2), requests_of_text(broker, "PushTelemetry") > 0)[1],
        timeout=30,
        what="alice's producer to push",
    )
    producer.flush(5)


def requests_of_text(broker: RunningBroker, api: str) -> float:
    """Requests of ``api`` counted by the broker (its registry, no HTTP endpoint)."""
    return sum(
        s.value
        for family in text_string_to_metric_families(broker.metrics_text())
        for s in family.samples
        if s.name == "kafka_network_requestmetrics_requestspersec_total"
        and s.labels.get("request") == api
    )


def test_a_subscription_set_through_one_broker_applies_at_the_other(kafka_cluster, capsys) -> None:
    cluster = kafka_cluster(2)
    first, second = cluster.brokers
    code, out = cli(
        capsys, first, "--alter", "--name", "everyone", "--metrics", "org.apache.kafka.",
        "--interval", "500",
    )  # fmt: skip
    assert code == 0, out

    def subscribed() -> Any:
        with second.wire() as client:
            got = get_subscriptions(client)
        return (
            got.requested_metrics == ("org.apache.kafka.",)
            and got.push_interval.total_seconds() == 0.5
        )

    wait_until(subscribed, what="the second broker to learn the subscription")
    code, out = cli(capsys, first, "--delete", "--name", "everyone")
    assert code == 0, out
    wait_until(lambda: not subscribed(), what="the second broker to drop it")
    code, out = cli(capsys, second, "--list")
    assert out.strip() == "", out


def test_a_closing_producers_terminating_push_removes_its_metrics(broker_factory, capsys) -> None:
    broker = broker_factory({"kplane.metrics.port": "0"})
    broker.create_topic("closing", 1)
    code, out = cli(
        capsys, broker, "--alter", "--name", "slow", "--metrics", PRODUCER_PREFIX,
        "--interval", "15000",
    )  # fmt: skip
    assert code == 0, out
    producer = producing(broker, "closing")
    wait_until(
        producing_until(producer, "closing", lambda: pushed(broker, "closing")),
        timeout=60,
        what="the producer's pushed metrics",
    )
    producer.flush(10)
    del producer  # librdkafka's destroy sends a terminating push
    gc.collect()
    # Without it the series would stay three intervals after the last push: at least 30 s.
    wait_until(lambda: not pushed(broker, "closing"), timeout=25, what="the metrics to go")
