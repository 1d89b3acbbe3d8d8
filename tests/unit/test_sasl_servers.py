"""The SASL servers: PLAIN, and SCRAM against credentials in the metadata store."""

from __future__ import annotations

import pytest
import scramp

from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.security.sasl_server import PlainServer, SaslAuthenticationFailed
from kplane.broker.security.scram import (
    ScramCredential,
    ScramCredentialStore,
    ScramMechanismType,
    ScramServer,
)


def test_plain_server() -> None:
    for token in (b"\x00alice\x00secret", b"alice\x00alice\x00secret"):
        server = PlainServer({"alice": "secret"})
        assert server.evaluate(token) == b""
        assert server.complete and server.user == "alice"
    for token in (
        b"\x00alice\x00wrong",
        b"\x00bob\x00secret",
        b"garbage",
        b"bob\x00alice\x00secret",
    ):
        server = PlainServer({"alice": "secret"})
        with pytest.raises(SaslAuthenticationFailed):
            server.evaluate(token)
        assert not server.complete


@pytest.fixture
def credentials(tmp_path) -> ScramCredentialStore:
    return ScramCredentialStore(KafkaMetadataClient(EmbeddedMetadataStore(str(tmp_path))))


def _exchange(mechanism: str, store: ScramCredentialStore, user: str, password: str) -> ScramServer:
    client = scramp.ScramClient([mechanism], user, password)
    server = ScramServer(mechanism, store)
    first = server.evaluate(client.get_client_first().encode())
    assert not server.complete
    client.set_server_first(first.decode())
    final = server.evaluate(client.get_client_final().encode())
    client.set_server_final(final.decode())  # verifies the server's signature
    return server


@pytest.mark.parametrize("mechanism", list(ScramMechanismType)[1:])
def test_scram_exchange(credentials: ScramCredentialStore, mechanism: ScramMechanismType) -> None:
    name = mechanism.mechanism_name
    credential = ScramCredential.from_password(mechanism, "s3cret", b"salty-salt-16byt", 4096)
    credentials.upsert("alice", mechanism, credential)
    server = _exchange(name, credentials, "alice", "s3cret")
    assert server.complete and server.user == "alice"
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        _exchange(name, credentials, "alice", "wrong")
    with pytest.raises(SaslAuthenticationFailed):
        _exchange(name, credentials, "nobody", "s3cret")


def test_credentials_are_stored_in_kafka_format_without_the_password(
    credentials: ScramCredentialStore,
) -> None:
    sha512 = ScramMechanismType.SCRAM_SHA_512
    credential = ScramCredential.from_password(sha512, "s3cret", b"\x01" * 16, 8192)
    credentials.upsert("bob", sha512, credential)
    stored = credentials.client.get_entity_config("users", "bob")
    assert list(stored) == ["SCRAM-SHA-512"]
    text = stored["SCRAM-SHA-512"]
    assert text.startswith("salt=AQEBAQEBAQEBAQEBAQEBAQ==,stored_key=") and text.endswith(
        ",iterations=8192"
    )
    assert "s3cret" not in text
    assert ScramCredential.from_config(text) == credential
    assert credentials.describe("bob") == {sha512: 8192}
    assert credentials.users() == ["bob"]
    assert credentials.delete("bob", sha512)
    assert not credentials.delete("bob", sha512)
    assert credentials.users() == []


def test_a_second_message_after_completion_is_refused(credentials: ScramCredentialStore) -> None:
    sha256 = ScramMechanismType.SCRAM_SHA_256
    credentials.upsert(
        "carol", sha256, ScramCredential.from_password(sha256, "pw", b"s" * 12, 4096)
    )
    server = _exchange("SCRAM-SHA-256", credentials, "carol", "pw")
    with pytest.raises(SaslAuthenticationFailed):
        server.evaluate(b"n,,n=carol,r=again")
