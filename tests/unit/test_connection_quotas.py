"""ConnectionQuotas without sockets: per-address limits and overrides, slots that make an
Acceptor wait, the exempt inter-broker listener, creation-rate throttles, KIP-226 checks;
and Kafka's Rate and Avg they are measured with."""

from __future__ import annotations

import threading
import time

import pytest

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metrics.registry import BrokerMetrics
from kplane.broker.network.connection_quotas import (
    AcceptorStopped,
    ConnectionQuotas,
    TooManyConnections,
    client_host,
)
from kplane.broker.network.sampled_stats import SampledAverage, SampledRate
from kplane.broker.utils.interval_log import IntervalWarning

TWO_LISTENERS = {
    "listeners": "INTERNAL://127.0.0.1:0,CLIENT://127.0.0.1:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def _config(**props: str) -> KafkaConfig:
    return KafkaConfig.from_properties({"log.dirs": "/tmp/unused", **props}, log_unused=False)


def _quotas(**props: str) -> ConnectionQuotas:
    config = _config(**props)
    quotas = ConnectionQuotas(config)
    for endpoint in config.listeners:
        quotas.add_listener(endpoint.listener_name)
    return quotas


def _running() -> bool:
    return True


def test_an_address_past_its_limit_is_refused_and_overrides_win() -> None:
    quotas = _quotas(
        **{"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "127.0.0.9:3"}
    )
    for _ in range(2):
        quotas.inc("PLAINTEXT", "10.0.0.1", _running)
    with pytest.raises(TooManyConnections) as refused:
        quotas.inc("PLAINTEXT", "10.0.0.1", _running)
    assert (refused.value.host, refused.value.limit) == ("10.0.0.1", 2)
    for _ in range(3):
        quotas.inc("PLAINTEXT", "127.0.0.9", _running)
    with pytest.raises(TooManyConnections):
        quotas.inc("PLAINTEXT", "127.0.0.9", _running)
    quotas.dec("PLAINTEXT", "10.0.0.1")
    quotas.inc("PLAINTEXT", "10.0.0.1", _running)  # a freed slot is taken again


def test_host_names_in_overrides_count_for_their_addresses() -> None:
    quotas = _quotas(
        **{"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "localhost:1"}
    )
    quotas.inc("PLAINTEXT", "127.0.0.1", _running)
    with pytest.raises(TooManyConnections):
        quotas.inc("PLAINTEXT", "127.0.0.1", _running)
    with pytest.raises(TooManyConnections):
        quotas.inc("PLAINTEXT", "10.0.0.1", _running)  # 0: only the overrides may connect


@pytest.mark.parametrize(
    ("props", "mention"),
    [
        ({"max.connections.per.ip": "0"}, "can be set to zero only if"),
        ({"max.connections.per.ip.overrides": "no-such-host.invalid:3"}, "cannot resolve"),
        ({"listener.name.plaintext.max.connections": "0"}, "Invalid max.connections 0"),
        ({"max.connection.creation.rate": "0"}, "Invalid max.connection.creation.rate 0"),
    ],
)
def test_kafka_refuses_these_limits(props: dict[str, str], mention: str) -> None:
    with pytest.raises(ConfigException, match=mention):
        ConnectionQuotas(_config(**props))


def test_a_full_broker_makes_the_acceptor_wait_until_a_connection_closes() -> None:
    quotas = _quotas(**{"max.connections": "2"})
    quotas.inc("PLAINTEXT", "10.0.0.1", _running)
    quotas.inc("PLAINTEXT", "10.0.0.2", _running)
    done = threading.Event()
    waiter = threading.Thread(
        target=lambda: (quotas.inc("PLAINTEXT", "10.0.0.3", _running), done.set())
    )
    waiter.start()
    assert not done.wait(0.3)
    quotas.dec("PLAINTEXT", "10.0.0.1")
    assert done.wait(5)
    waiter.join()


def test_a_stopping_acceptor_stops_waiting() -> None:
    quotas = _quotas(**{"max.connections": "1"})
    quotas.inc("PLAINTEXT", "10.0.0.1", _running)
    stopping = threading.Event()
    outcome: list[str] = []

    def wait() -> None:
        try:
            quotas.inc("PLAINTEXT", "10.0.0.2", lambda: not stopping.is_set())
        except AcceptorStopped:
            outcome.append("stopped")

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.1)
    stopping.set()
    quotas.wake()
    waiter.join(5)
    assert outcome == ["stopped"]


def test_a_limit_raised_at_runtime_lets_the_waiting_acceptor_in() -> None:
    old = _config(**{"max.connections": "1"})
    quotas = ConnectionQuotas(old)
    quotas.add_listener("PLAINTEXT")
    quotas.inc("PLAINTEXT", "10.0.0.1", _running)
    done = threading.Event()
    threading.Thread(
        target=lambda: (quotas.inc("PLAINTEXT", "10.0.0.2", _running), done.set()), daemon=True
    ).start()
    assert not done.wait(0.3)
    new = _config(**{"max.connections": "5"})
    quotas.validate_reconfiguration(new)
    quotas.reconfigure(old, new)
    assert done.wait(5)


def test_the_inter_broker_listener_is_exempt_from_the_broker_wide_limit() -> None:
    quotas = _quotas(**TWO_LISTENERS, **{"max.connections": "2"})
    quotas.inc("CLIENT", "10.0.0.1", _running)
    quotas.inc("CLIENT", "10.0.0.2", _running)
    assert not quotas.max_connections_exceeded("CLIENT")
    quotas.inc("INTERNAL", "10.0.0.3", _running)  # does not wait
    assert quotas.max_connections_exceeded("CLIENT")  # CLIENT's threads close one
    assert not quotas.max_connections_exceeded("INTERNAL")


def test_a_listener_limit_holds_its_listener_only() -> None:
    quotas = _quotas(**TWO_LISTENERS, **{"listener.name.client.max.connections": "1"})
    quotas.inc("CLIENT", "10.0.0.1", _running)
    quotas.inc("INTERNAL", "10.0.0.1", _running)
    done = threading.Event()
    threading.Thread(
        target=lambda: (quotas.inc("CLIENT", "10.0.0.2", _running), done.set()), daemon=True
    ).start()
    assert not done.wait(0.3)
    quotas.dec("CLIENT", "10.0.0.1")
    assert done.wait(5)


def test_the_creation_rate_delays_and_is_measured() -> None:
    connections = 1_101
    metrics = BrokerMetrics()
    config = _config(**{"max.connection.creation.rate": "100"})
    quotas = ConnectionQuotas(config, metrics)
    quotas.add_listener("PLAINTEXT")
    started = time.monotonic()
    # 100/s measured over 10 to 11 s, however long the loop takes: past 1,100 the Acceptor
    # waits a little for each (at 1,003 a loop slower than ~0.3 s was never throttled)
    for i in range(connections):
        quotas.inc("PLAINTEXT", f"10.0.{i // 250}.{i % 250}", _running)
    assert time.monotonic() - started >= 0.01
    throttle = metrics.registry.get_sample_value(
        "kafka_server_socket_server_metrics_connection_accept_throttle_time",
        {"listener": "PLAINTEXT"},
    )
    assert throttle is not None and throttle > 0
    for name, labels, value in (
        ("connection_count", {"listener": "PLAINTEXT"}, connections),
        ("connection_creation_total", {"listener": "PLAINTEXT"}, connections),
    ):
        sample = f"kafka_server_socket_server_metrics_{name}"
        assert metrics.registry.get_sample_value(sample, labels) == value
    rate = metrics.registry.get_sample_value(
        "kafka_server_socket_server_metrics_broker_connection_accept_rate", {}
    )
    assert rate is not None and rate > 90


def test_kafka_rate_and_throttle() -> None:
    rate = SampledRate()
    throttles = [rate.record_and_throttle_ms(100.0, bound=2) for _ in range(22)]
    # measured over at least 10 whole seconds: 20 connections at once are within 2/s
    assert throttles[:20] == [0.0] * 20
    assert throttles[20] == pytest.approx(500.0)  # (2.1 - 2) / 2 * 10 s
    assert throttles[21] == 1000.0  # at most one sample window
    assert rate.measure(100.0) == pytest.approx(2.2)
    assert rate.measure(100.0 + 11.5) == 0.0  # every sample expired


def test_kafka_avg() -> None:
    avg = SampledAverage()
    assert avg.measure(0.0) == 0.0
    avg.record(0.0, 100.0)
    avg.record(31.0, 300.0)
    assert avg.measure(31.0) == 200.0
    assert avg.measure(61.0) == 300.0  # the first window expired


def test_client_host_reads_ipv4_mapped_addresses_as_ipv4() -> None:
    assert client_host("::ffff:127.0.0.2") == "127.0.0.2"
    assert client_host("::1") == "::1"


def test_an_interval_warning_logs_once_per_interval_with_a_count() -> None:
    from structlog.testing import capture_logs

    now = [0.0]
    warning = IntervalWarning("accept failed", interval_s=10.0, clock=lambda: now[0])
    with capture_logs() as logs:
        for i in range(1000):
            warning.record(error="EMFILE", attempt=i)
        warning.flush()
        now[0] = 10.0
        warning.flush()
        warning.flush()
    assert [(e["count"], e["attempt"]) for e in logs] == [(1, 0), (999, 999)]
