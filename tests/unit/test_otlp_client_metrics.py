"""Client telemetry without sockets: subscriptions as Kafka checks them, Kafka's subscription
id (values computed by Java's HashSet and CRC32C), the ClientMetricsManager's instances on a
fake clock, the exporter's Prometheus exposition, and the load test reading it back."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kplane.broker.telemetry.exporter import ClientMetricsExporter
from kplane.broker.telemetry.manager import ClientMetricsManager, kafka_uuid_text
from kplane.broker.telemetry.subscriptions import subscription_id, validate
from kplane.protocol.compression import COMPRESSION_ZSTD, compress
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.otlp import decode_metrics_data
from kplane.tools.loadtest.metrics import parse_scrape
from kplane.tools.loadtest.results import client_metric_stats
from tests.unit.test_otlp import gauge, histogram, metrics_data, number_point, total

JAVA_UUID = uuid.UUID(int=0x0123456789ABCDEF << 64 | 0xFEDCBA9876543210)


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [  # jshell: (new HashSet<>(metrics).toString() + 1000) CRC32C ^ Uuid.hashCode()
        (["org.apache.kafka.producer.", "x.y"], 726240715),
        (["*"], 848016057),
        ([], 1788331976),
    ],
)
def test_subscription_id_is_kafkas(metrics: list[str], expected: int) -> None:
    assert subscription_id(metrics, 1000, JAVA_UUID) == expected


@pytest.mark.parametrize(
    ("configs", "code", "words"),
    [
        ({"interval.ms": "99"}, ErrorCode.invalid_request, "between 100 and 3600000"),
        ({"interval.ms": "3600001"}, ErrorCode.invalid_request, "between 100 and 3600000"),
        ({"interval.ms": "soon"}, ErrorCode.invalid_config, "Not a number"),
        ({"color": "red"}, ErrorCode.invalid_request, "Unknown client metrics configuration"),
        ({"match": "client_id"}, ErrorCode.invalid_config, "Illegal client matching pattern"),
        ({"match": "host=a"}, ErrorCode.invalid_config, "Illegal client matching pattern"),
        ({"match": "client_id=("}, ErrorCode.invalid_config, "Illegal client matching pattern"),
    ],
)
def test_bad_subscriptions_are_refused_as_kafka_does(
    configs: dict[str, str], code: ErrorCode, words: str
) -> None:
    with pytest.raises(KafkaError) as caught:
        validate("s", configs)
    assert caught.value.code == code and words in (caught.value.message or "")


def test_match_is_a_whole_value_regex_per_selector() -> None:
    sub = validate("s", {"match": "client_id=slow.*, client_software_name=librdkafka"})
    assert sub.matches({"client_id": "slow-1", "client_software_name": "librdkafka"})
    assert not sub.matches({"client_id": "slow-1", "client_software_name": "librdkafka-x"})
    assert not sub.matches({"client_id": "a-slow", "client_software_name": "librdkafka"})
    assert not sub.matches({"client_software_name": "librdkafka"})  # no client id
    assert validate("s", {"metrics": " a , ,b "}).metrics == {"a", "b"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CLIENT: Mapping[str, str | None] = {
    "client_id": "slow-1",
    "client_software_name": "librdkafka",
    "client_software_version": "2.16.0",
}


def manager_with(subscriptions: dict[str, dict[str, str]], clock: Clock) -> ClientMetricsManager:
    manager = ClientMetricsManager(
        lambda name: subscriptions.get(name, {}),
        lambda: sorted(subscriptions),
        ClientMetricsExporter(clock),
        telemetry_max_bytes=4096,
        clock=clock,
    )
    manager.load()
    return manager


def scrape(exporter: ClientMetricsExporter) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(exporter)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_a_client_instance_from_subscription_to_termination() -> None:
    clock = Clock()
    subs = {
        "slow": {
            "metrics": "org.apache.kafka.producer.",
            "interval.ms": "2000",
            "match": "client_id=slow.*",
        },
        "others": {"metrics": "*", "interval.ms": "100", "match": "client_id=fast.*"},
    }
    manager = manager_with(subs, clock)
    got = manager.get_subscriptions(None, CLIENT)
    assert got.error is ErrorCode.none
    assert got.requested_metrics == ("org.apache.kafka.producer.",)
    assert got.push_interval_ms == 2000
    assert got.subscription_id == subscription_id(
        ["org.apache.kafka.producer."], 2000, got.instance_id
    )
    instance = got.instance_id
    payload = metrics_data(
        gauge("org.apache.kafka.producer.request.latency.avg", number_point(4.5, {"node_id": "0"})),
        total("org.apache.kafka.producer.connection.creation.total", number_point(2, {})),
    )
    push = manager.push
    push(instance, got.subscription_id, False, COMPRESSION_ZSTD, compress(4, payload), CLIENT)
    clock.now += 2.1
    push(instance, got.subscription_id, False, 0, payload, CLIENT)  # a delta sum adds up
    samples = scrape(manager.exporter)
    (labels, value), *_ = samples["org_apache_kafka_producer_request_latency_avg"]
    assert value == 4.5
    assert labels == {
        "client_id": "slow-1",
        "client_instance_id": kafka_uuid_text(instance),
        "client_software_name": "librdkafka",
        "client_software_version": "2.16.0",
        "node_id": "0",
    }
    assert samples["org_apache_kafka_producer_connection_creation_total"][0][1] == 4.0
    # Too early; then the subscription changes: the old id is refused, a new one is given.
    with pytest.raises(KafkaError) as early:
        push(instance, got.subscription_id, False, 0, payload, CLIENT)
    assert early.value.code is ErrorCode.throttling_quota_exceeded
    manager.update_subscription("slow", {})
    clock.now += 2.1
    with pytest.raises(KafkaError) as stale:
        push(instance, got.subscription_id, False, 0, payload, CLIENT)
    assert stale.value.code is ErrorCode.unknown_subscription_id
    clock.now += 0.01
    again = manager.get_subscriptions(instance, CLIENT)  # at once after that error
    assert again.error is ErrorCode.none and again.requested_metrics == ()
    assert again.push_interval_ms == 300_000
    # Series expire three intervals after the last push...
    clock.now += 3 * 2.0
    assert manager.exporter.clients() == 0
    # ...and go at a terminating push, after which nothing is taken.
    push(instance, again.subscription_id, False, 0, payload, CLIENT)
    assert manager.exporter.clients() == 1
    push(instance, again.subscription_id, True, 0, b"", CLIENT)
    assert manager.exporter.clients() == 0
    with pytest.raises(KafkaError) as after:
        push(instance, again.subscription_id, True, 0, payload, CLIENT)
    assert after.value.code is ErrorCode.invalid_request


def test_refused_pushes() -> None:
    clock = Clock()
    manager = manager_with({}, clock)

    def fresh() -> tuple[uuid.UUID, int]:
        got = manager.get_subscriptions(uuid.UUID(int=0), CLIENT)
        return got.instance_id, got.subscription_id

    cases = [
        (5, b"", ErrorCode.unsupported_compression_type),
        (0, b"\0" * 4097, ErrorCode.telemetry_too_large),
        (0, b"\x0a\x05ab", ErrorCode.invalid_record),  # a length past the end
        (1, b"not gzip", ErrorCode.invalid_record),
    ]
    for compression, payload, code in cases:
        instance, sub = fresh()
        with pytest.raises(KafkaError) as caught:
            manager.push(instance, sub, False, compression, payload, CLIENT)
        assert caught.value.code is code, (compression, payload[:8])
    with pytest.raises(KafkaError) as reserved:
        manager.push(uuid.UUID(int=1), 0, False, 0, b"", CLIENT)
    assert reserved.value.code is ErrorCode.invalid_request
    assert manager.instances() == len(cases)
    clock.now += 3 * 300 + 1
    assert manager.instances() == 0  # expired: three intervals (5 minutes without a subscription)


def test_the_load_test_reads_pushed_metrics_back() -> None:
    clock = Clock()
    exporter = ClientMetricsExporter(clock)
    for client, latency in (("kplane-loadtest-0", 2.0), ("kplane-loadtest-1", 4.0)):
        data = metrics_data(
            gauge("org.apache.kafka.producer.request.latency.avg", number_point(latency, {})),
            gauge("kafka.network.requestmetrics.totaltimems", number_point(1.0, {})),
        )
        exporter.record(client + "-id", {"client_id": client}, decode_metrics_data(data), 3.0)
    assert all(not name.startswith("kafka_") for name in scrape(exporter))  # the broker's names
    registry = CollectorRegistry()
    registry.register(exporter)
    samples = parse_scrape(1.0, generate_latest(registry).decode(), {"broker": "1"})
    assert sorted(s.metric for s in samples) == [
        'org_apache_kafka_producer_request_latency_avg{broker="1",client_id="kplane-loadtest-0"}',
        'org_apache_kafka_producer_request_latency_avg{broker="1",client_id="kplane-loadtest-1"}',
    ]
    assert client_metric_stats(samples) == {
        "org_apache_kafka_producer_request_latency_avg": {"samples": 2, "mean": 3.0, "max": 4.0}
    }


def test_histograms_and_sums_on_prometheus() -> None:
    clock = Clock()
    exporter = ClientMetricsExporter(clock)
    push = metrics_data(
        histogram("org.apache.kafka.client.request.latency", delta=True),
        total("org.apache.kafka.client.bytes", number_point(5, {}), delta=False),
        total("org.apache.kafka.client.in.flight", number_point(3, {}), monotonic=False),
    )
    for _ in range(2):  # the delta histogram and the delta gauge-like sum add up
        exporter.record("i", {"client_id": "c"}, decode_metrics_data(push), 3.0)
    samples = scrape(exporter)
    buckets = {s[0]["le"]: s[1] for s in samples["org_apache_kafka_client_request_latency_bucket"]}
    assert buckets == {"1.0": 2.0, "10.0": 6.0, "+Inf": 12.0}  # cumulative, as Prometheus has it
    assert samples["org_apache_kafka_client_request_latency_count"][0][1] == 12.0
    assert samples["org_apache_kafka_client_request_latency_sum"][0][1] == 85.0
    assert samples["org_apache_kafka_client_bytes_total"][0][1] == 5.0  # cumulative: replaced
    assert samples["org_apache_kafka_client_in_flight"][0][1] == 6.0
    clock.now += 3.0
    assert scrape(exporter) == {}
