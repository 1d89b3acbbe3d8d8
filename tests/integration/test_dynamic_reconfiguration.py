"""KIP-226 changes applied without a restart: thread pools, listeners, keystores, JAAS
contexts and metric reporters, each validated before anything changes."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from cryptography import x509
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kplane.common.certs import create_test_pki
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient
from tests.integration.recording_reporter import LABEL, RecordingReporter
from tests.integration.test_dynamic_config import _delete, _set

SECRET = {"password.encoder.secret": "encoder-secret"}


def test_thread_pools_resize_under_load_without_a_failed_request(broker) -> None:
    errors: list[object] = []
    remaining: list[int] = []
    delivered = [0]
    stop = threading.Event()

    def load() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap(), "linger.ms": 1, "acks": 1})

        def report(err, _msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(err)
            else:
                delivered[0] += 1

        while not stop.is_set():
            try:
                producer.produce("resize", b"x" * 100, on_delivery=report)
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        remaining.append(producer.flush(30))

    def wait_for_more(count: int) -> None:
        target = delivered[0] + count
        while delivered[0] < target and thread.is_alive():
            threading.Event().wait(0.01)

    thread = threading.Thread(target=load)
    thread.start()
    try:
        wait_for_more(1000)
        for io, network in ((8, 4), (4, 2), (6, 3)):
            _set(broker, "0", {"num.io.threads": str(io), "num.network.threads": str(network)})
            assert len(broker.request_handlers()) == io
            assert broker.processors() == network
            wait_for_more(1000)  # the load carries on through every resize
    finally:
        stop.set()
        thread.join(60)
    assert errors == [] and remaining == [0] and delivered[0] >= 4000


def test_a_listener_added_at_runtime_serves_and_is_advertised_then_removed(broker) -> None:
    _set(
        broker,
        "0",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,EXTRA://127.0.0.2:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT",
        },
    )
    host, port = broker.address("EXTRA")
    assert host == "127.0.0.2"
    metadata = AdminClient({"bootstrap.servers": f"{host}:{port}"}).list_topics(timeout=10)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [(host, port)]
    # The new endpoint is published in the registration, listener name included.
    registration = broker.znode("/brokers/ids/0").decode()
    assert f"EXTRA://127.0.0.2:{port}" in registration
    _set(broker, "0", {"listeners": "PLAINTEXT://127.0.0.1:0"})
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=2).recv(1)
    assert AdminClient({"bootstrap.servers": broker.bootstrap()}).list_topics(timeout=10).brokers


@pytest.mark.parametrize(
    ("configs", "mention"),
    [
        (
            {"listeners": "PLAINTEXT://127.0.0.1:0"},
            'inter.broker.listener.name: listener name "INTERNAL"',
        ),
        ({"listeners": "INTERNAL://127.0.0.1:0"}, "the request arrived on it"),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
            },
            "security protocol cannot be updated",
        ),
    ],
)
def test_listener_changes_kafka_refuses(broker_factory, configs, mention) -> None:
    broker = broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    with pytest.raises(KafkaException) as info:
        _set(broker, "0", configs)
    assert mention in info.value.args[0].str()
    assert broker.dynamic_config("0") == {}


def _tls_broker(broker_factory, pki) -> RunningBroker:
    return broker_factory(
        {
            **SECRET,
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "listener.name.ssl.ssl.keystore.type": "PKCS12",
            "listener.name.ssl.ssl.keystore.location": str(pki.broker_p12),
            "listener.name.ssl.ssl.keystore.password": pki.password,
        }
    )


def _served_certificate(broker: RunningBroker) -> str:
    return ssl.get_server_certificate(broker.address("SSL"))


def test_a_keystore_swapped_at_runtime_serves_new_clients(broker_factory, tmp_path: Path) -> None:
    first = create_test_pki(tmp_path / "one", ["localhost", "127.0.0.1"])
    second = create_test_pki(tmp_path / "two", ["localhost", "127.0.0.1"])
    broker = _tls_broker(broker_factory, first)
    context = ssl.create_default_context(cafile=str(first.ca_cert))
    old = WireClient(*broker.address("SSL"))
    old.sock = context.wrap_socket(old.sock, server_hostname="localhost")
    _set(broker, "0", {"listener.name.ssl.ssl.keystore.location": str(second.broker_p12)})
    served = x509.load_pem_x509_certificate(_served_certificate(broker).encode())
    assert served == x509.load_pem_x509_certificates(second.broker_cert.read_bytes())[0]
    # The connection opened before the swap keeps working, on the old certificate.
    response = old.request(
        ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    assert response.error_code == 0
    assert (
        x509.load_der_x509_certificate(old.sock.getpeercert(binary_form=True))
        == (x509.load_pem_x509_certificates(first.broker_cert.read_bytes())[0])
    )
    old.close()


def test_a_keystore_for_other_names_is_refused(broker_factory, tmp_path: Path) -> None:
    first = create_test_pki(tmp_path / "one", ["localhost", "127.0.0.1"])
    other = create_test_pki(tmp_path / "other", ["elsewhere.example"])
    broker = _tls_broker(broker_factory, first)
    with pytest.raises(KafkaException) as info:
        _set(broker, "0", {"listener.name.ssl.ssl.keystore.location": str(other.broker_p12)})
    assert "subject alternative names" in info.value.args[0].str()
    with pytest.raises(KafkaException) as info:
        _set(broker, "0", {"listener.name.ssl.ssl.keystore.location": str(tmp_path / "nope.p12")})
    assert "ssl.keystore.location" in info.value.args[0].str()
    served = x509.load_pem_x509_certificate(_served_certificate(broker).encode())
    assert served == x509.load_pem_x509_certificates(first.broker_cert.read_bytes())[0]


def test_a_jaas_context_changed_at_runtime_admits_new_users(broker_factory) -> None:
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required "
    broker = broker_factory(
        {
            **SECRET,
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain + 'user_alice="a";',
        }
    )

    def login(user: str, password: str) -> bool:
        admin = AdminClient(
            {
                "bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user,
                "sasl.password": password,
                "socket.timeout.ms": 3000,
            }
        )
        try:
            return bool(admin.list_topics(timeout=3).brokers)
        except KafkaException:
            return False

    assert login("alice", "a") and not login("bob", "b")
    _set(
        broker,
        "0",
        {
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain
            + 'user_alice="a" user_bob="b";'
        },
    )
    assert login("bob", "b") and login("alice", "a")


def test_metric_reporters_start_reconfigure_and_close(broker) -> None:
    RecordingReporter.instances.clear()
    path = "tests.integration.recording_reporter.RecordingReporter"
    _set(broker, "", {"metric.reporters": path})
    (reporter,) = RecordingReporter.instances
    assert reporter.events == [("configure", None), ("init", "BrokerMetrics")]
    _set(broker, "", {"metric.reporters": path, LABEL: "one"})
    assert reporter.events[-1] == ("reconfigure", "one")
    _set(broker, "", {"metric.reporters": path, LABEL: "two"})
    assert reporter.events[-1] == ("reconfigure", "two")
    with pytest.raises(KafkaException, match="refuse"):
        _set(broker, "", {"metric.reporters": path, LABEL: "refuse"})
    assert reporter.events[-1] == ("reconfigure", "two")
    _delete(broker, "", ["metric.reporters", LABEL])
    assert reporter.events[-1] == ("close", None)
