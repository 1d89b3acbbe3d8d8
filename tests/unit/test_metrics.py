"""broker.metrics: registry, Kafka metric names, idle meters, HTTP exposition."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kplane.broker.metrics import (
    CONTROL_PLANE_REQUEST_QUEUE_SIZE,
    NETWORK_PROCESSOR_AVG_IDLE_PERCENT,
    REQUEST_HANDLER_AVG_IDLE_PERCENT,
    REQUEST_QUEUE_SIZE,
    BrokerMetrics,
    IdleMeter,
    MetricsHttpServer,
    metric_name,
)

S = 1_000_000_000  # ns per second

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def scrape(server: MetricsHttpServer, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        body: bytes = resp.read()
        return body.decode()


@pytest.fixture
def metrics() -> BrokerMetrics:
    return BrokerMetrics()


@pytest.fixture
def server(metrics: BrokerMetrics) -> Iterator[MetricsHttpServer]:
    srv = MetricsHttpServer(metrics, "127.0.0.1", 0)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


class FakeClock:
    def __init__(self, start_ns: int = 1000 * S) -> None:
        self.now = start_ns

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: float) -> None:
        self.now += int(ns)


# -- names ------------------------------------------------------------------------------------


def test_metric_name_rule() -> None:
    assert metric_name("network", "RequestMetrics", "TotalTimeMs") == (
        "kafka_network_requestmetrics_totaltimems"
    )
    assert metric_name("kafka.network", "RequestChannel", "RequestQueueSize") == (
        "kafka_network_requestchannel_requestqueuesize"
    )
    assert REQUEST_HANDLER_AVG_IDLE_PERCENT == (
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent"
    )
    assert NETWORK_PROCESSOR_AVG_IDLE_PERCENT == (
        "kafka_network_socketserver_networkprocessoravgidlepercent"
    )
    assert CONTROL_PLANE_REQUEST_QUEUE_SIZE == (
        "kafka_network_requestchannel_controlplanerequestqueuesize"
    )
    assert metric_name("server", "Broker-Topic", "Bytes.In") == "kafka_server_broker_topic_bytes_in"
    with pytest.raises(ValueError):
        metric_name("server", "", "X")


# -- request metrics over HTTP ----------------------------------------------------------------


def test_request_metrics_scraped_over_http(
    metrics: BrokerMetrics, server: MetricsHttpServer
) -> None:
    assert server.port > 0
    metrics.record_request("Produce", "data", 0.3, 2.0, 0.0, 0.05, 0.2, 3.0)
    metrics.record_request("Produce", "data", 1.0, 40.0, 100.0, 0.1, 0.3, 141.4)
    metrics.record_request("LeaderAndIsr", "control", 0.2, 5.0, 0.0, 0.1, 0.1, 5.4)
    metrics.record_error("Produce", "NOT_LEADER_OR_FOLLOWER")
    metrics.record_error("Produce", "NOT_LEADER_OR_FOLLOWER")
    metrics.record_error("Fetch", "OFFSET_OUT_OF_RANGE")

    s = parse(scrape(server))
    total = "kafka_network_requestmetrics_totaltimems"
    produce = {"request": "Produce", "plane": "data"}
    assert sample(s, total + "_count", **produce) == 2
    assert sample(s, total + "_sum", **produce) == pytest.approx(144.4)
    # Buckets are cumulative and ``le`` is inclusive.
    assert sample(s, total + "_bucket", le="2.5", **produce) == 0
    assert sample(s, total + "_bucket", le="5.0", **produce) == 1
    assert sample(s, total + "_bucket", le="250.0", **produce) == 2
    assert sample(s, total + "_bucket", le="+Inf", **produce) == 2
    assert sample(s, "kafka_network_requestmetrics_localtimems_bucket", le="1.0", **produce) == 0
    assert sample(s, "kafka_network_requestmetrics_localtimems_bucket", le="2.5", **produce) == 1
    assert sample(s, "kafka_network_requestmetrics_remotetimems_sum", **produce) == pytest.approx(
        100.0
    )
    assert (
        sample(s, "kafka_network_requestmetrics_requestqueuetimems_bucket", le="0.1", **produce)
        == 0
    )
    assert (
        sample(s, "kafka_network_requestmetrics_requestqueuetimems_bucket", le="1.0", **produce)
        == 2
    )
    assert sample(s, "kafka_network_requestmetrics_responsequeuetimems_count", **produce) == 2
    assert sample(
        s, "kafka_network_requestmetrics_responsesendtimems_sum", **produce
    ) == pytest.approx(0.5)

    control = {"request": "LeaderAndIsr", "plane": "control"}
    assert sample(s, total + "_count", **control) == 1
    assert sample(s, "kafka_network_requestmetrics_requestspersec_total", **produce) == 2
    assert sample(s, "kafka_network_requestmetrics_requestspersec_total", **control) == 1
    errors = "kafka_network_requestmetrics_errorspersec_total"
    assert sample(s, errors, request="Produce", error="NOT_LEADER_OR_FOLLOWER") == 2
    assert sample(s, errors, request="Fetch", error="OFFSET_OUT_OF_RANGE") == 1

    assert metrics.request_count("Produce", "data") == 2
    assert metrics.request_count("Produce", "control") == 0
    assert list(metrics.apis()) == [("LeaderAndIsr", "control"), ("Produce", "data")]


def test_buckets_cover_0_1_ms_to_30_s(metrics: BrokerMetrics) -> None:
    metrics.record_request("Fetch", "data", 0.1, 0.05, 30000.0, 45000.0, 0, 75000.15)
    s = parse(generate_latest(metrics.registry).decode())
    labels = {"request": "Fetch", "plane": "data"}
    ns = "kafka_network_requestmetrics_"
    assert sample(s, ns + "requestqueuetimems_bucket", le="0.1", **labels) == 1
    assert sample(s, ns + "localtimems_bucket", le="0.1", **labels) == 1
    assert sample(s, ns + "remotetimems_bucket", le="10000.0", **labels) == 0
    assert sample(s, ns + "remotetimems_bucket", le="30000.0", **labels) == 1
    assert sample(s, ns + "responsequeuetimems_bucket", le="30000.0", **labels) == 0
    assert sample(s, ns + "responsequeuetimems_bucket", le="+Inf", **labels) == 1


def test_record_request_from_many_threads_counts_exactly(metrics: BrokerMetrics) -> None:
    threads, per_thread = 8, 2000

    def work(i: int) -> None:
        plane = "control" if i == 0 else "data"
        for _ in range(per_thread):
            metrics.record_request("Metadata", plane, 0.5, 0.5, 0.0, 0.5, 0.5, 2.0)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = parse(generate_latest(metrics.registry).decode())
    data = {"request": "Metadata", "plane": "data"}
    assert metrics.request_count("Metadata", "data") == (threads - 1) * per_thread
    assert metrics.request_count("Metadata", "control") == per_thread
    assert sample(s, "kafka_network_requestmetrics_totaltimems_bucket", le="2.5", **data) == (
        (threads - 1) * per_thread
    )
    assert sample(s, "kafka_network_requestmetrics_totaltimems_sum", **data) == pytest.approx(
        2.0 * (threads - 1) * per_thread
    )


def test_brokers_in_one_process_do_not_share_metrics() -> None:
    a, b = BrokerMetrics(), BrokerMetrics()
    a.record_request("Produce", "data", 1, 1, 1, 1, 1, 5)
    a.register_gauge(REQUEST_QUEUE_SIZE, "q", lambda: 7)
    b.register_gauge(REQUEST_QUEUE_SIZE, "q", lambda: 3)
    text_a = generate_latest(a.registry).decode()
    text_b = generate_latest(b.registry).decode()
    assert 'request="Produce"' in text_a
    assert 'request="Produce"' not in text_b
    assert sample(parse(text_a), REQUEST_QUEUE_SIZE) == 7
    assert sample(parse(text_b), REQUEST_QUEUE_SIZE) == 3
    assert b"kafka_network" not in generate_latest(REGISTRY)


# -- gauges -----------------------------------------------------------------------------------


def test_callback_gauges_with_labels(metrics: BrokerMetrics, server: MetricsHttpServer) -> None:
    depth = [4]
    metrics.register_gauge(REQUEST_QUEUE_SIZE, "Data-plane request queue.", lambda: depth[0])
    metrics.register_gauge(CONTROL_PLANE_REQUEST_QUEUE_SIZE, "Control queue.", lambda: 1)
    rq = metric_name("network", "RequestChannel", "ResponseQueueSize")

    def responses(pid: int) -> Callable[[], float]:
        return lambda: pid * 10

    for pid in range(3):
        metrics.register_gauge(
            rq, "Responses per processor.", responses(pid), {"processor": str(pid)}
        )

    s = parse(scrape(server))
    assert sample(s, REQUEST_QUEUE_SIZE) == 4
    assert sample(s, CONTROL_PLANE_REQUEST_QUEUE_SIZE) == 1
    assert [sample(s, rq, processor=str(p)) for p in range(3)] == [0, 10, 20]

    depth[0] = 9  # read at scrape time
    assert sample(parse(scrape(server)), REQUEST_QUEUE_SIZE) == 9

    # Same name and labels: the callable is replaced.
    metrics.register_gauge(rq, "Responses per processor.", lambda: 99, {"processor": "1"})
    assert metrics.unregister_gauge(rq, {"processor": "0"})
    assert not metrics.unregister_gauge(rq, {"processor": "0"})
    s = parse(scrape(server))
    assert (rq, frozenset({("processor", "0")})) not in s
    assert sample(s, rq, processor="1") == 99
    assert sample(s, rq, processor="2") == 20


def test_gauge_validation_and_failing_callable(metrics: BrokerMetrics) -> None:
    name = metric_name("server", "ReplicaManager", "LeaderCount")
    metrics.register_gauge(name, "Leaders.", lambda: 2, {"listener": "PLAINTEXT"})
    with pytest.raises(ValueError, match="labels"):
        metrics.register_gauge(name, "Leaders.", lambda: 2, {"other": "x"})
    with pytest.raises(ValueError):
        metrics.register_gauge("bad name", "x", lambda: 1)
    with pytest.raises(ValueError):
        metrics.register_gauge("kafka_network_requestmetrics_totaltimems", "x", lambda: 1)

    def boom() -> float:
        raise RuntimeError("gone")

    metrics.register_gauge(name, "Leaders.", boom, {"listener": "SSL"})
    s = parse(generate_latest(metrics.registry).decode())
    assert sample(s, name, listener="PLAINTEXT") == 2
    assert (name, frozenset({("listener", "SSL")})) not in s


# -- idle meters ------------------------------------------------------------------------------


def test_idle_meter_idle_only_reporting_is_fraction_of_wall_time() -> None:
    clock = FakeClock()
    m = IdleMeter(clock=clock)
    assert m.fraction() == 0.0  # no time has passed
    for _ in range(10):  # 10 s: 0.3 s idle then 0.7 s busy (unreported), each second
        clock.advance(0.3 * S)
        m.record_idle(0.3 * S)
        clock.advance(0.7 * S)
    assert m.fraction() == pytest.approx(0.3)


def test_idle_meter_idle_and_busy_reporting() -> None:
    clock = FakeClock()
    m = IdleMeter(clock=clock)
    for _ in range(20):
        clock.advance(0.025 * S)
        m.record_idle(0.025 * S)
        clock.advance(0.075 * S)
        m.record_busy(0.075 * S)
    assert m.fraction() == pytest.approx(0.25)
    idle, busy, elapsed = m.totals()
    assert idle == pytest.approx(0.5 * S)
    assert busy == pytest.approx(1.5 * S)
    assert elapsed == 2 * S


def test_idle_meter_window_forgets_old_time() -> None:
    clock = FakeClock()
    m = IdleMeter(window_s=30, bucket_s=1, clock=clock)
    clock.advance(60 * S)
    m.record_idle(60 * S)  # fully idle for a minute, reported at once
    assert m.fraction() == pytest.approx(1.0)
    idle, _, elapsed = m.totals()
    assert idle == pytest.approx(elapsed)  # only the window's share was kept
    for _ in range(30):  # then 30 s fully busy
        clock.advance(1 * S)
        m.record_busy(1 * S)
    assert m.fraction() == pytest.approx(0.0, abs=1e-9)
    for _ in range(15):  # then 15 s idle: half of the 30 s window
        clock.advance(1 * S)
        m.record_idle(1 * S)
    assert m.fraction() == pytest.approx(0.5, abs=0.04)


def test_idle_meter_spreads_long_reports_over_buckets() -> None:
    # Window of 10 one-second buckets: the current partial bucket plus the 9 before it.
    clock = FakeClock(start_ns=1000 * S)
    m = IdleMeter(window_s=10, bucket_s=1, clock=clock)
    clock.advance(20.5 * S)  # now 1020.5 s; window [1011, 1020.5], 9.5 s
    m.record_idle(4.75 * S)  # idle during [1015.75, 1020.5]
    assert m.fraction() == pytest.approx(4.75 / 9.5)
    clock.advance(6 * S)  # now 1026.5 s; window [1017, 1026.5]: 3.5 s of that idle remain
    assert m.fraction() == pytest.approx(3.5 / 9.5)
    clock.advance(5 * S)  # window [1022, 1031.5]: all of it has left
    assert m.fraction() == 0.0


def test_idle_meter_pool_aggregates_like_kafka() -> None:
    clock = FakeClock()
    pool = IdleMeter(pool_size=4, clock=clock)
    # 4 handlers for 10 s: idle 100 %, 50 %, 50 %, 0 % -> pool average 50 %.
    for _ in range(10):
        clock.advance(1 * S)
        pool.record_idle(1 * S)
        pool.record_idle(0.5 * S)
        pool.record_idle(0.5 * S)
    assert pool.fraction() == pytest.approx(0.5)
    pool.set_pool_size(2)
    assert pool.pool_size == 2
    with pytest.raises(ValueError):
        pool.set_pool_size(0)


def test_idle_meter_clamps_and_ignores_nonpositive() -> None:
    clock = FakeClock()
    m = IdleMeter(clock=clock)
    clock.advance(1 * S)
    m.record_idle(0)
    m.record_idle(-5)
    m.record_busy(0)
    assert m.totals()[:2] == (0.0, 0.0)
    m.record_idle(1 * S)
    m.record_idle(1 * S)  # two threads on a meter with pool_size 1: over-reported
    assert m.fraction() == 1.0


def test_idle_meter_is_thread_safe() -> None:
    clock = FakeClock()
    m = IdleMeter(clock=clock)
    clock.advance(1 * S)

    def work() -> None:
        for _ in range(5000):
            m.record_idle(1000)
            m.record_busy(3000)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    idle, busy, _ = m.totals()
    assert idle == pytest.approx(4 * 5000 * 1000)
    assert busy == pytest.approx(4 * 5000 * 3000)


def test_idle_meters_exported_as_gauges() -> None:
    clock = FakeClock()
    metrics = BrokerMetrics(clock=clock)
    p0 = metrics.idle_meter(
        NETWORK_PROCESSOR_AVG_IDLE_PERCENT, {"networkProcessor": "0", "listener": "PLAINTEXT"}
    )
    p1 = metrics.idle_meter(
        NETWORK_PROCESSOR_AVG_IDLE_PERCENT, {"networkProcessor": "1", "listener": "PLAINTEXT"}
    )
    assert p0 is not p1
    h = metrics.idle_meter(REQUEST_HANDLER_AVG_IDLE_PERCENT, pool_size=4)
    assert metrics.idle_meter(REQUEST_HANDLER_AVG_IDLE_PERCENT) is h  # shared by the pool
    assert h.pool_size == 4
    clock.advance(2 * S)
    p0.record_idle(3600 * S)  # clamped to the meter's lifetime: fully idle
    p1.record_idle(0.5 * S)
    for _ in range(3):  # 3 of 4 handlers idle the whole time
        h.record_idle(2 * S)

    with MetricsHttpServer(metrics, "127.0.0.1", 0) as server:
        s = parse(scrape(server))
    idle = NETWORK_PROCESSOR_AVG_IDLE_PERCENT
    assert sample(s, idle, networkProcessor="0", listener="PLAINTEXT") == 1.0
    assert sample(s, idle, networkProcessor="1", listener="PLAINTEXT") == 0.25
    assert sample(s, REQUEST_HANDLER_AVG_IDLE_PERCENT) == 0.75

    assert metrics.unregister_gauge(idle, {"listener": "PLAINTEXT", "networkProcessor": "1"})
    assert metrics.idle_meter(idle, {"networkProcessor": "1", "listener": "PLAINTEXT"}) is not p1


# -- HTTP server ------------------------------------------------------------------------------


def test_http_server_paths(metrics: BrokerMetrics, server: MetricsHttpServer) -> None:
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"
    metrics.record_request("ApiVersions", "data", 0, 0, 0, 0, 0, 0)
    assert 'request="ApiVersions"' in scrape(server, "/metrics?x=1")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=5)
    assert err.value.code == 404
    err.value.close()
    req = urllib.request.Request(
        server.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        assert resp.read().rstrip().endswith(b"# EOF")


def test_http_server_start_stop_many() -> None:
    metrics = BrokerMetrics()
    metrics.register_gauge(REQUEST_QUEUE_SIZE, "q", lambda: 1)
    before = threading.active_count()
    for _ in range(10):
        srv = MetricsHttpServer(metrics, "127.0.0.1", 0)
        srv.start()
        port = srv.port
        assert sample(parse(scrape(srv)), REQUEST_QUEUE_SIZE) == 1
        srv.stop()
        srv.stop()  # idempotent
        assert srv.port == port
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    assert threading.active_count() <= before + 1  # scrape threads may still be exiting
    with MetricsHttpServer(metrics, "127.0.0.1", 0) as srv:
        with pytest.raises(RuntimeError):
            srv.start()
        assert sample(parse(scrape(srv)), REQUEST_QUEUE_SIZE) == 1


def test_a_scrape_pauses_between_families_for_the_control_plane() -> None:
    metrics = BrokerMetrics()
    metrics.record_request("Produce", "data", 0.3, 2.0, 0.0, 0.05, 0.2, 3.0)
    plain = MetricsHttpServer(metrics, "127.0.0.1", 0)
    pauses: list[int] = []
    yielding = MetricsHttpServer(metrics, "127.0.0.1", 0, pause=lambda: pauses.append(1))
    with plain, yielding:
        assert scrape(yielding) == scrape(plain)  # the same exposition
    families = list(metrics.registry.collect())
    assert len(pauses) == len(families) > 1
