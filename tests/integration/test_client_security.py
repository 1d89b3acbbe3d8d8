"""kplane's own client (Admin, Producer, Consumer) on SSL, mutual TLS, SASL_PLAINTEXT and
SASL_SSL listeners of an in-process broker, configured by Kafka's client keys."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kplane.client.admin import Admin, NewTopic, ScramMechanism, ScramUpsertion
from kplane.client.consumer import Consumer
from kplane.client.kafka_client import KafkaClient, NoBrokersAvailable
from kplane.client.producer import Producer
from kplane.common.certs import PkiFiles, create_test_pki
from kplane.common.network.config import ClientConfig
from kplane.common.network.sasl import SaslAuthenticationError
from kplane.common.network.security import SslAuthenticationError
from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker

DEADLINE_S = 30.0
CLIENT_PRINCIPAL = "User:CN=kplane-client,OU=test,O=kplane"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture
def secure_broker(broker_factory: Callable[..., RunningBroker], pki: PkiFiles) -> RunningBroker:
    """PLAINTEXT, SSL, MTLS (SSL requiring a client certificate), SASL_PLAINTEXT and
    SASL_SSL listeners; PLAIN users from the JAAS config, SCRAM users from the admin API."""
    return broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
            "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(pki.broker_p12),
            "ssl.keystore.password": pki.password,
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.truststore.type": "PEM",
            "listener.name.mtls.ssl.truststore.location": str(pki.truststore_pem),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.jaas.config": JAAS,
        }
    )


def _client(broker: RunningBroker, listener: str, **props: str) -> KafkaClient:
    return KafkaClient(
        ClientConfig.from_properties(
            {"bootstrap.servers": broker.bootstrap(listener), "request.timeout.ms": "10000"} | props
        )
    )


def _spy_principals(broker: RunningBroker) -> list[str]:
    """Principals of the Metadata requests the broker serves from now on."""
    principals: list[str] = []
    broker.on_request("Metadata", lambda request: principals.append(request.principal))
    return principals


async def _round_trip(client: KafkaClient, topic: str, count: int = 200) -> list[bytes]:
    """Create ``topic`` with the Admin, produce ``count`` values, consume them back."""
    await client.start()
    try:
        created = await Admin(client).create_topics([NewTopic(topic, 1, 1)])
        assert created == {topic: None}
        producer = Producer(client)
        try:
            futures = [await producer.send(topic, b"v-%d" % i) for i in range(count)]
            await producer.flush()
            assert [f.result().offset for f in futures] == list(range(count))
        finally:
            await producer.close()
        consumer = Consumer(client)
        consumer.assign([(topic, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} records consumed"
            got.extend(r.value or b"" for r in await consumer.poll(timeout_ms=500))
        await consumer.close()
        return got
    finally:
        await client.close()


def _expected(count: int = 200) -> list[bytes]:
    return [b"v-%d" % i for i in range(count)]


async def _add_scram_user(broker: RunningBroker, user: str, password: str) -> None:
    client = _client(broker, "PLAINTEXT")
    await client.start()
    try:
        upsertion = ScramUpsertion(user, ScramMechanism.SCRAM_SHA_512, password, 8192)
        assert await Admin(client).alter_user_scram_credentials([upsertion]) == {user: None}
    finally:
        await client.close()


# TLS ---------------------------------------------------------------------------------------
async def test_ssl_with_a_ca_file(secure_broker: RunningBroker, pki: PkiFiles) -> None:
    client = _client(
        secure_broker, "SSL", **{"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert)}
    )
    assert await _round_trip(client, "ssl-ca") == _expected()
    # Bootstrapped, then talked to the broker as metadata advertised it: the SSL listener.
    assert [(b.host, b.port) for b in client.cluster.brokers.values()] == [
        secure_broker.address("SSL")
    ]


@pytest.mark.parametrize("keystore", ["librdkafka-pem-files", "java-pkcs12-keystore"])
async def test_mutual_tls(secure_broker: RunningBroker, pki: PkiFiles, keystore: str) -> None:
    principals = _spy_principals(secure_broker)
    if keystore == "librdkafka-pem-files":
        certificate = {
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        }
    else:
        certificate = {
            "ssl.keystore.location": str(pki.client_p12),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": pki.password,
        }
    client = _client(
        secure_broker,
        "MTLS",
        **{"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert)},
        **certificate,
    )
    assert await _round_trip(client, "mtls") == _expected()
    assert set(principals) == {CLIENT_PRINCIPAL}


async def test_pkcs12_truststore_and_keystore_by_java_names(
    secure_broker: RunningBroker, pki: PkiFiles
) -> None:
    principals = _spy_principals(secure_broker)
    client = _client(
        secure_broker,
        "MTLS",
        **{
            "security.protocol": "SSL",
            "ssl.truststore.location": str(pki.truststore_p12),
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": pki.password,
            "ssl.keystore.location": str(pki.client_p12),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": pki.password,
            "ssl.key.password": pki.password,
        },
    )
    assert await _round_trip(client, "java-names", 50) == _expected(50)
    assert set(principals) == {CLIENT_PRINCIPAL}


async def test_mutual_tls_without_a_client_certificate_fails(
    secure_broker: RunningBroker, pki: PkiFiles
) -> None:
    # kplane's broker closes such a connection without a TLS alert: a lost connection.
    ssl_props = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert)}
    client = _client(secure_broker, "MTLS", **ssl_props, **{"request.timeout.ms": "1000"})
    with pytest.raises(NoBrokersAvailable):
        await client.start()
    await client.close()


def _certificate_refusing_server(pki: PkiFiles) -> tuple[str, threading.Thread]:
    """A one-connection TLS server that requires a client certificate and, like Kafka's
    broker, answers a missing one with a TLS alert."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.broker_cert, pki.broker_key, pki.password)
    context.load_verify_locations(pki.ca_cert)
    context.verify_mode = ssl.CERT_REQUIRED
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with server:
            conn = context.wrap_socket(
                server.accept()[0], server_side=True, do_handshake_on_connect=False
            )
            with contextlib.suppress(ssl.SSLError):
                conn.do_handshake()
            # Read what the client sent after its side of the handshake before closing: a
            # close with unread bytes is a reset, which can overtake the alert.
            with socket.socket(fileno=conn.detach()) as raw:
                raw.settimeout(2)
                with contextlib.suppress(OSError):
                    raw.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"127.0.0.1:{server.getsockname()[1]}", thread


async def test_a_tls_alert_refusing_the_client_fails_at_once(pki: PkiFiles) -> None:
    bootstrap, server = _certificate_refusing_server(pki)
    config = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca_cert),
    }
    client = KafkaClient(ClientConfig.from_properties(config))
    with pytest.raises(SslAuthenticationError, match="CERTIFICATE_REQUIRED"):
        await client.start()
    await client.close()
    server.join(5)


async def test_an_untrusted_broker_certificate_fails_at_once(
    secure_broker: RunningBroker, tmp_path: Path
) -> None:
    other = create_test_pki(tmp_path / "other", ["127.0.0.1"])
    client = _client(
        secure_broker,
        "SSL",
        **{"security.protocol": "SSL", "ssl.ca.location": str(other.ca_cert)},
    )
    started = time.monotonic()
    with pytest.raises(SslAuthenticationError, match="self-signed certificate"):
        await client.start()
    assert time.monotonic() - started < 5, "an authentication failure is not retried"
    await client.close()


async def test_hostname_verification(broker_factory, tmp_path: Path) -> None:
    only_localhost = create_test_pki(tmp_path / "pki", ["localhost"])
    broker = broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(only_localhost.broker_p12),
            "ssl.keystore.password": only_localhost.password,
        }
    )
    ssl_props = {"security.protocol": "SSL", "ssl.ca.location": str(only_localhost.ca_cert)}
    client = _client(broker, "SSL", **ssl_props)
    with pytest.raises(SslAuthenticationError, match=r"127\.0\.0\.1"):
        await client.start()
    await client.close()
    for algorithm in ("", "none"):
        unchecked = _client(
            broker, "SSL", **ssl_props, **{"ssl.endpoint.identification.algorithm": algorithm}
        )
        await unchecked.start()
        assert unchecked.cluster.brokers
        await unchecked.close()


# SASL --------------------------------------------------------------------------------------
async def test_sasl_plaintext_plain(secure_broker: RunningBroker) -> None:
    principals = _spy_principals(secure_broker)
    client = _client(
        secure_broker,
        "SASL_PLAINTEXT",
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        },
    )
    assert await _round_trip(client, "sasl-plain") == _expected()
    assert set(principals) == {"User:alice"}


@pytest.mark.parametrize("credentials", ["username-password", "jaas"])
async def test_sasl_ssl_scram_sha_512(
    secure_broker: RunningBroker, pki: PkiFiles, credentials: str
) -> None:
    await _add_scram_user(secure_broker, "carol", "carol-secret")
    principals = _spy_principals(secure_broker)
    if credentials == "jaas":
        auth = {
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="carol" password="carol-secret";'
        }
    else:
        auth = {"sasl.username": "carol", "sasl.password": "carol-secret"}
    client = _client(
        secure_broker,
        "SASL_SSL",
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "ssl.ca.location": str(pki.ca_cert),
        },
        **auth,
    )
    assert await _round_trip(client, f"scram-{credentials}") == _expected()
    assert set(principals) == {"User:carol"}


@pytest.mark.parametrize(
    ("listener", "mechanism", "message"),
    [
        ("SASL_PLAINTEXT", "PLAIN", "Invalid username or password"),
        ("SASL_SSL", "SCRAM-SHA-512", "invalid credentials"),
    ],
)
async def test_a_wrong_password_fails_clearly_and_at_once(
    secure_broker: RunningBroker, pki: PkiFiles, listener: str, mechanism: str, message: str
) -> None:
    await _add_scram_user(secure_broker, "alice", "alice-scram-secret")
    client = _client(
        secure_broker,
        listener,
        **{
            "security.protocol": listener,
            "sasl.mechanism": mechanism,
            "sasl.username": "alice",
            "sasl.password": "wrong",
            "ssl.ca.location": str(pki.ca_cert),
            "request.timeout.ms": "30000",
        },
    )
    started = time.monotonic()
    with pytest.raises(SaslAuthenticationError, match=message) as failure:
        await client.start()
    assert failure.value.code is ErrorCode.sasl_authentication_failed
    assert "SASL_AUTHENTICATION_FAILED" in str(failure.value)
    assert time.monotonic() - started < 5, "an authentication failure is not retried"
    # The producer fails its records with the same error instead of retrying them.
    producer = Producer(client)
    with pytest.raises(SaslAuthenticationError):
        await (await producer.send("never", b"x"))
    await producer.close()
    await client.close()


async def test_a_mechanism_or_listener_without_sasl_fails_clearly(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    broker = broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": JAAS,
        }
    )
    client = _client(
        broker,
        "SASL_PLAINTEXT",
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        },
    )
    with pytest.raises(SaslAuthenticationError, match=r"UNSUPPORTED_SASL_MECHANISM.*PLAIN") as e:
        await client.start()
    assert e.value.code is ErrorCode.unsupported_sasl_mechanism
    await client.close()
    # SASL settings against a PLAINTEXT listener.
    plain = _client(
        broker,
        "PLAINTEXT",
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        },
    )
    with pytest.raises(SaslAuthenticationError, match="not a SASL listener") as e:
        await plain.start()
    assert e.value.code is ErrorCode.illegal_sasl_state
    await plain.close()
