"""Delegation tokens without sockets: Kafka's stored form, the manager's rules on a clock of
its own, two managers sharing one store, and a SCRAM ``tokenauth=true`` login."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import scramp

from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.metadata.store import EmbeddedMetadataStore
from kplane.broker.security.delegation_token import TokenInformation, create_hmac
from kplane.broker.security.delegation_token_manager import DelegationTokenManager
from kplane.broker.security.delegation_token_store import TOKENS, DelegationTokenStore
from kplane.broker.security.sasl_server import SaslAuthenticationFailed
from kplane.broker.security.scram import ScramCredentialStore, ScramMechanismType, ScramServer
from kplane.protocol.errors import ErrorCode

DAY = 24 * 3600 * 1000


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> float:
        return self.ms / 1000


def _manager(
    store: EmbeddedMetadataStore, clock: Clock, secret: str | None = "s"
) -> DelegationTokenManager:
    manager = DelegationTokenManager(DelegationTokenStore(store), secret, 7 * DAY, DAY, clock)
    manager.startup()
    return manager


def test_the_stored_token_is_kafkas_json_and_the_hmac_kafkas() -> None:
    info = TokenInformation("id-1", "User:a b", "User:req", ("User:r",), 1, 3, 2)
    doc = json.loads(info.to_json())
    assert doc == {
        "version": 3,
        "owner": "User%3Aa%20b",
        "tokenRequester": "User%3Areq",
        "renewers": ["User%3Ar"],
        "issueTimestamp": 1,
        "maxTimestamp": 3,
        "expiryTimestamp": 2,
        "tokenId": "id-1",
    }
    assert TokenInformation.from_json(info.to_json()) == info
    v2 = {k: v for k, v in doc.items() if k != "tokenRequester"} | {"version": 2}
    assert TokenInformation.from_json(json.dumps(v2).encode()).requester == "User:a b"
    assert create_hmac("id-1", "s") == hmac.digest(b"s", b"id-1", hashlib.sha512)


def test_lifetimes_renewals_and_expiry() -> None:
    store, clock = EmbeddedMetadataStore(None), Clock()
    manager = _manager(store, clock)
    token = manager.create("User:alice", "User:alice", ["User:bob"], 10 * DAY)
    info = token.info
    assert info.max_timestamp - info.issue_timestamp == 7 * DAY  # capped
    assert info.expiry_timestamp - info.issue_timestamp == DAY
    assert json.loads(store.get(f"{TOKENS}/{info.token_id}")[0])["tokenId"] == info.token_id

    clock.ms += 1000
    assert manager.renew("User:bob", token.hmac, 2 * DAY) == (ErrorCode.none, clock.ms + 2 * DAY)
    assert manager.renew("User:carol", token.hmac, 1) == (
        ErrorCode.delegation_token_owner_mismatch,
        -1,
    )
    assert manager.renew("User:alice", b"nope", 1)[0] == ErrorCode.delegation_token_not_found
    assert manager.expire("User:alice", token.hmac, 10)[0] == ErrorCode.none
    clock.ms += 11
    assert manager.renew("User:alice", token.hmac, 1)[0] == ErrorCode.delegation_token_expired
    assert manager.token_login(info.token_id, ScramMechanismType.SCRAM_SHA_256) is None
    manager.expire_tokens()
    assert manager.tokens(lambda _: True) == []
    assert store.get_children(TOKENS) == []


def test_disabled_without_a_secret() -> None:
    manager = _manager(EmbeddedMetadataStore(None), Clock(), secret=None)
    assert not manager.enabled
    assert manager.renew("User:a", b"x", 1) == (ErrorCode.delegation_token_auth_disabled, -1)
    assert manager.expire("User:a", b"x", 1) == (ErrorCode.delegation_token_auth_disabled, -1)


def test_a_second_broker_learns_tokens_from_the_notifications() -> None:
    store, clock = EmbeddedMetadataStore(None), Clock()
    first = _manager(store, clock)
    early = first.create("User:a", "User:a", [], -1)
    second = _manager(store, clock)  # loads what is stored
    late = first.create("User:b", "User:b", [], -1)  # and follows changes
    assert {t.info.token_id for t in second.tokens(lambda _: True)} == {
        early.info.token_id,
        late.info.token_id,
    }
    assert first.expire("User:b", late.hmac, -1)[0] == ErrorCode.none
    assert [t.info.token_id for t in second.tokens(lambda _: True)] == [early.info.token_id]


def _login(server: ScramServer, user: str, password: str, extension: str) -> None:
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    first = client.get_client_first() + extension
    client.client_first_bare += extension
    client.set_server_first(server.evaluate(first.encode()).decode())
    client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())


def test_scram_login_with_tokenauth_is_the_owner() -> None:
    store, clock = EmbeddedMetadataStore(None), Clock()
    manager = _manager(store, clock)
    token = manager.create("User:alice", "User:alice", [], -1)
    credentials = ScramCredentialStore(KafkaMetadataClient(store))
    credentials.tokens = manager
    password = base64.b64encode(token.hmac).decode()

    server = ScramServer("SCRAM-SHA-256", credentials)
    _login(server, token.info.token_id, password, ",tokenauth=true")
    assert (server.complete, server.user, server.token_authenticated) == (True, "alice", True)

    for user, pw, ext in (
        (token.info.token_id, password, ""),  # not a SCRAM user without the extension
        (token.info.token_id, base64.b64encode(bytes(64)).decode(), ",tokenauth=true"),
        ("nobody", password, ",tokenauth=true"),
    ):
        try:
            _login(ScramServer("SCRAM-SHA-256", credentials), user, pw, ext)
        except (SaslAuthenticationFailed, scramp.ScramException):
            continue
        raise AssertionError(f"{user} logged in")
