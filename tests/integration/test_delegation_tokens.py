"""Delegation tokens (KIP-48): created, renewed, expired and described by SCRAM users, used
to log in with SCRAM's ``tokenauth=true`` extension, refused as Kafka refuses them.

No Python client library sends ``tokenauth=true`` (librdkafka, kafka-python and aiokafka have
no delegation-token login), so the logins here are kplane's own client's, configured as
Java's is (ScramLoginModule with ``tokenauth="true"``); confluent-kafka shows that a token id
is not a SCRAM user.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka import Producer as ConfluentProducer

from kplane.client.admin import Admin, NewTopic, ScramMechanism, ScramUpsertion
from kplane.client.kafka_client import KafkaClient
from kplane.client.producer import Producer
from kplane.client.token_admin import DelegationToken, TokenAdmin
from kplane.common.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from kplane.common.certs import PkiFiles
from kplane.common.network.config import ClientConfig
from kplane.common.network.sasl import SaslAuthenticationError
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.testing.plugin import RunningBroker
from tests.integration.helpers import wait_until, with_inter_broker_sasl
from tests.integration.test_log_dirs import platformatic  # noqa: F401 (a fixture)
from tests.repo import REPO_ROOT

SECRET = "token-secret-key"
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}


def _token_props(**extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "delegation.token.secret.key": SECRET,
        **extra,
    }


def _client(broker: RunningBroker, listener: str = "SASL_PLAINTEXT", **props: str) -> KafkaClient:
    return KafkaClient(
        ClientConfig.from_properties(
            {"bootstrap.servers": broker.bootstrap(listener), "request.timeout.ms": "10000"} | props
        )
    )


def _scram(
    broker: RunningBroker,
    user: str,
    password: str,
    token: bool = False,
    mechanism: str = "SCRAM-SHA-256",
    listener: str = "SASL_PLAINTEXT",
) -> KafkaClient:
    """A client logging in with SCRAM as ``user``, or with a token (its id and HMAC)."""
    tokenauth = ' tokenauth="true"' if token else ""
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}"{tokenauth};'
    )
    return _client(
        broker,
        listener,
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": jaas,
        },
    )


def _with_token(broker: RunningBroker, token: DelegationToken, **kw: str) -> KafkaClient:
    return _scram(broker, token.info.token_id, token.hmac_base64, token=True, **kw)


async def _add_users(client: KafkaClient, *users: str) -> None:
    upsertions = [
        ScramUpsertion(u, m, PASSWORDS[u], 4096)
        for u in users
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    assert await Admin(client).alter_user_scram_credentials(upsertions) == dict.fromkeys(users)


class Session:
    """A started client and its TokenAdmin."""

    def __init__(self, client: KafkaClient) -> None:
        self.client = client
        self.tokens = TokenAdmin(Admin(client))

    async def __aenter__(self) -> TokenAdmin:
        await self.client.start()
        return self.tokens

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()


def _as(broker: RunningBroker, user: str) -> Session:
    return Session(_scram(broker, user, PASSWORDS[user]))


async def _code(call: object) -> ErrorCode:
    """The error code a token call fails with."""
    with pytest.raises(KafkaError) as failed:
        await call  # type: ignore[misc]
    return failed.value.code


async def _logs_in(client: KafkaClient) -> bool:
    """Whether ``client`` authenticates (and gets metadata) or is refused."""
    try:
        await client.start()
    except SaslAuthenticationError as exc:
        assert exc.code == ErrorCode.sasl_authentication_failed
        return False
    finally:
        await client.close()
    return True


@pytest.fixture
def token_broker(broker_factory: Callable[..., RunningBroker]) -> RunningBroker:
    broker = broker_factory(_token_props())

    async def users() -> None:
        client = _client(broker, "PLAINTEXT")
        await client.start()
        try:
            await _add_users(client, "alice", "bob", "carol")
        finally:
            await client.close()

    asyncio.run(users())
    return broker


# the life of a token ------------------------------------------------------------------------
async def test_a_token_created_by_one_user_logs_in_another_client_until_expired(
    token_broker: RunningBroker,
) -> None:
    async with _as(token_broker, "alice") as alice:
        token = await alice.create_delegation_token()
    info = token.info
    assert (info.owner, info.requester, info.renewers) == ("User:alice", "User:alice", ())
    assert info.issue_timestamp <= info.expiry_timestamp <= info.max_timestamp
    assert info.max_timestamp - info.issue_timestamp == 7 * 24 * 3600 * 1000  # Kafka's default
    assert info.expiry_timestamp - info.issue_timestamp == 24 * 3600 * 1000
    assert len(token.hmac) == 64  # HMAC-SHA512

    principals: list[str] = []
    token_broker.on_request("Metadata", lambda request: principals.append(request.principal))
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        client = _with_token(token_broker, token, mechanism=mechanism)
        await client.start()
        try:
            await Admin(client).create_topics([NewTopic(f"by-token-{mechanism}", 1, 1)])
            producer = Producer(client)
            sent = await producer.send(f"by-token-{mechanism}", b"written with a token")
            await producer.flush()
            assert sent.result().offset == 0
            await producer.close()
        finally:
            await client.close()
    assert principals and set(principals) == {"User:alice"}  # the token's owner

    async with _as(token_broker, "alice") as alice:
        assert await alice.expire_delegation_token(token.hmac, -1) <= int(time.time() * 1000)
        assert await alice.describe_delegation_token() == []
    assert not await _logs_in(_with_token(token_broker, token))


async def test_a_wrong_hmac_or_a_token_id_without_tokenauth_is_refused(
    token_broker: RunningBroker,
) -> None:
    async with _as(token_broker, "alice") as alice:
        token = await alice.create_delegation_token()
    wrong = base64.b64encode(bytes(64)).decode()
    assert not await _logs_in(_scram(token_broker, token.info.token_id, wrong, token=True))
    assert not await _logs_in(_scram(token_broker, "alice", PASSWORDS["alice"], token=True))
    # Without the extension the token id is looked up as a SCRAM user, and there is none:
    # confluent-kafka (librdkafka) logs in plainly and is refused.
    errors: list[str] = []
    producer = ConfluentProducer(
        {
            "bootstrap.servers": token_broker.bootstrap("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": token.info.token_id,
            "sasl.password": token.hmac_base64,
            "error_cb": lambda err: errors.append(err.str()),
        }
    )
    wait_until(lambda: producer.poll(0.2) is not None and errors, what="an authentication error")
    assert any("Authentication failed" in e for e in errors), errors
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=1)


async def test_renew_moves_the_expiry_within_the_maximum(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    broker = broker_factory(
        _token_props(
            **{
                "delegation.token.expiry.time.ms": "60000",
                "delegation.token.max.lifetime.ms": "600000",
            }
        )
    )
    admin = _client(broker, "PLAINTEXT")
    await admin.start()
    await _add_users(admin, "alice", "bob", "carol")
    await admin.close()
    async with _as(broker, "alice") as alice:
        token = await alice.create_delegation_token(renewers=["User:bob"], max_lifetime_ms=300000)
        info = token.info
        assert info.max_timestamp - info.issue_timestamp == 300000
        assert info.expiry_timestamp - info.issue_timestamp == 60000
        renewed = await alice.renew_delegation_token(token.hmac, 120000)
        assert info.expiry_timestamp + 60000 - 5000 <= renewed <= info.max_timestamp
        [described] = await alice.describe_delegation_token()
        assert described.info.expiry_timestamp == renewed
        assert described.info.renewers == ("User:bob",)
        assert described.hmac == token.hmac
        # Past the maximum lifetime a renewal stops at it; -1 is the server's default period.
        assert await alice.renew_delegation_token(token.hmac, 10**9) == info.max_timestamp
        default = await alice.renew_delegation_token(token.hmac, -1)
        assert default <= int(time.time() * 1000) + 60000
        assert (
            await _code(alice.renew_delegation_token(b"not a token's hmac"))
            == ErrorCode.delegation_token_not_found
        )
    async with _as(broker, "bob") as bob:  # a renewer
        assert await bob.renew_delegation_token(token.hmac, 30000) > default - 60000
    async with _as(broker, "carol") as carol:  # neither owner nor renewer
        assert (
            await _code(carol.renew_delegation_token(token.hmac, 30000))
            == ErrorCode.delegation_token_owner_mismatch
        )
        assert (
            await _code(carol.expire_delegation_token(token.hmac, -1))
            == ErrorCode.delegation_token_owner_mismatch
        )
    async with _as(broker, "bob") as bob:
        [seen] = await bob.describe_delegation_token()  # a renewer sees it
        assert seen.info.token_id == token.info.token_id


async def test_a_token_past_its_expiry_is_refused(token_broker: RunningBroker) -> None:
    async with _as(token_broker, "alice") as alice:
        token = await alice.create_delegation_token()
        expiry = await alice.expire_delegation_token(token.hmac, 1)
        assert expiry - token.info.issue_timestamp < 60000
        await asyncio.sleep(0.05)
        assert not await _logs_in(_with_token(token_broker, token))
        assert (
            await _code(alice.renew_delegation_token(token.hmac, 60000))
            == ErrorCode.delegation_token_expired
        )
        assert (
            await _code(alice.expire_delegation_token(token.hmac, 60000))
            == ErrorCode.delegation_token_expired
        )


async def test_expired_tokens_are_removed_on_the_check_interval(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    broker = broker_factory(_token_props(**{"delegation.token.expiry.check.interval.ms": "200"}))
    admin = _client(broker, "PLAINTEXT")
    await admin.start()
    await _add_users(admin, "alice")
    await admin.close()
    async with _as(broker, "alice") as alice:
        kept = await alice.create_delegation_token()
        gone = await alice.create_delegation_token()
        await alice.expire_delegation_token(gone.hmac, 1)
        deadline = time.monotonic() + 30
        while [t.info.token_id for t in await alice.describe_delegation_token()] != [
            kept.info.token_id
        ]:
            assert time.monotonic() < deadline, "the expired token was not removed"
            await asyncio.sleep(0.1)
        assert (
            await _code(alice.renew_delegation_token(gone.hmac))
            == ErrorCode.delegation_token_not_found
        )


# refusals ------------------------------------------------------------------------------------
async def test_without_a_secret_key_tokens_are_disabled(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    props = _token_props()
    del props["delegation.token.secret.key"]
    broker = broker_factory(props)
    admin = _client(broker, "PLAINTEXT")
    await admin.start()
    await _add_users(admin, "alice")
    await admin.close()
    async with _as(broker, "alice") as alice:
        disabled = ErrorCode.delegation_token_auth_disabled
        assert await _code(alice.create_delegation_token()) == disabled
        assert await _code(alice.renew_delegation_token(b"x")) == disabled
        assert await _code(alice.expire_delegation_token(b"x")) == disabled
        assert await _code(alice.describe_delegation_token()) == disabled


async def test_requests_on_plaintext_or_over_a_token_login_are_not_allowed(
    token_broker: RunningBroker,
) -> None:
    not_allowed = ErrorCode.delegation_token_request_not_allowed
    async with Session(_client(token_broker, "PLAINTEXT")) as anonymous:
        assert await _code(anonymous.create_delegation_token()) == not_allowed
        assert await _code(anonymous.describe_delegation_token()) == not_allowed
    async with _as(token_broker, "alice") as alice:
        token = await alice.create_delegation_token()
    async with Session(_with_token(token_broker, token)) as by_token:
        assert await _code(by_token.create_delegation_token()) == not_allowed
        assert await _code(by_token.renew_delegation_token(token.hmac)) == not_allowed
        assert await _code(by_token.expire_delegation_token(token.hmac)) == not_allowed
        assert await _code(by_token.describe_delegation_token()) == not_allowed
    async with _as(token_broker, "alice") as alice:
        assert (
            await _code(alice.create_delegation_token(renewers=["Group:ops"]))
            == ErrorCode.invalid_principal_type
        )


# ACLs ------------------------------------------------------------------------------------------
@pytest.fixture
def acl_broker(broker_factory: Callable[..., RunningBroker]) -> RunningBroker:
    """Tokens, SCRAM users, an authorizer with ``User:admin`` (PLAIN) as super user."""
    props = with_inter_broker_sasl(
        _token_props(
            **{
                "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'user_admin="admin-secret";'
                ),
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:admin",
            }
        )
    )
    broker = broker_factory(props)

    async def users() -> None:
        client = _admin(broker)
        await client.start()
        try:
            await _add_users(client, "alice", "bob", "carol")
        finally:
            await client.close()

    asyncio.run(users())
    return broker


def _admin(broker: RunningBroker) -> KafkaClient:
    return _client(
        broker,
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": "admin-secret",
        },
    )


async def _allow(
    broker: RunningBroker,
    principal: str,
    op: AclOperation,
    rtype: AclResourceType,
    name: str,
) -> None:
    client = _admin(broker)
    await client.start()
    try:
        binding = AclBinding(
            rtype, name, PatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW
        )
        assert await Admin(client).create_acls([binding]) == [None]
    finally:
        await client.close()


async def test_creating_for_another_owner_needs_create_tokens_on_that_user(
    acl_broker: RunningBroker,
) -> None:
    async with _as(acl_broker, "alice") as alice:
        assert (
            await _code(alice.create_delegation_token(owner="User:bob"))
            == ErrorCode.delegation_token_authorization_failed
        )
        own = await alice.create_delegation_token()  # one's own token needs no ACL
        assert own.info.owner == "User:alice"
    await _allow(
        acl_broker, "User:alice", AclOperation.CREATE_TOKENS, AclResourceType.USER, "User:bob"
    )
    async with _as(acl_broker, "alice") as alice:
        token = await alice.create_delegation_token(owner="User:bob", renewers=["User:alice"])
    assert (token.info.owner, token.info.requester) == ("User:bob", "User:alice")

    async with _as(acl_broker, "bob") as bob:  # the owner sees and renews it
        [seen] = await bob.describe_delegation_token(["User:bob"])
        assert (seen.info.owner, seen.info.requester) == ("User:bob", "User:alice")
        assert await bob.renew_delegation_token(token.hmac, 60000) > 0
    async with _as(acl_broker, "carol") as carol:
        assert await carol.describe_delegation_token() == []
    await _allow(
        acl_broker, "User:carol", AclOperation.DESCRIBE_TOKENS, AclResourceType.USER, "User:bob"
    )
    async with _as(acl_broker, "carol") as carol:  # every token of bob's
        assert [t.info.token_id for t in await carol.describe_delegation_token()] == [
            token.info.token_id
        ]
        # Owners filter on owners and renewers: alice renews bob's token, dave has none.
        renewed_by_alice = await carol.describe_delegation_token(["User:alice"])
        assert [t.info.token_id for t in renewed_by_alice] == [token.info.token_id]
        assert await carol.describe_delegation_token(["User:dave"]) == []
        assert await carol.describe_delegation_token([]) == []
    await _allow(
        acl_broker,
        "User:carol",
        AclOperation.DESCRIBE,
        AclResourceType.DELEGATION_TOKEN,
        own.info.token_id,
    )
    async with _as(acl_broker, "carol") as carol:  # and the one token of alice's
        assert {t.info.token_id for t in await carol.describe_delegation_token()} == {
            token.info.token_id,
            own.info.token_id,
        }

    # Logged in with a token, the client is its owner, bound by the owner's ACLs.
    await _allow(
        acl_broker, "User:bob", AclOperation.CREATE, AclResourceType.CLUSTER, "kafka-cluster"
    )
    for by, topic, expected in (
        (token, "bobs", None),
        (own, "alices", ErrorCode.topic_authorization_failed),
    ):
        client = _with_token(acl_broker, by)
        await client.start()
        try:
            created = await Admin(client).create_topics([NewTopic(topic, 1, 1)])
        finally:
            await client.close()
        error = created[topic]
        assert (error.code if error is not None else None) == expected


# Kafka's error codes, as a Node.js client reads them ------------------------------------------
TOKENS_JS = r"""
// Node.js 20 lacks Promise.withResolvers (22 has it), which the client uses.
Promise.withResolvers ??= () => {
  const out = {}
  out.promise = new Promise((resolve, reject) => Object.assign(out, { resolve, reject }))
  return out
}
const {
  Connection, createDelegationTokenV3, renewDelegationTokenV2, expireDelegationTokenV2,
  describeDelegationTokenV3
} = await import('@platformatic/kafka')
const [bootstrap, user, password, opsJson] = process.argv.slice(2)
const [host, port] = bootstrap.split(':')
const sasl = user ? { mechanism: 'SCRAM-SHA-256', username: user, password } : undefined
const connection = new Connection('tokens-test', { sasl })
await connection.connect(host, Number(port))
const principals = (list) => list === null ? null
  : list.map(([principalType, principalName]) => ({ principalType, principalName }))
const created = []
const hmacOf = (text) =>
  Buffer.from(text.startsWith('$') ? created[Number(text.slice(1))] : text, 'base64')
const results = []
for (const [op, ...args] of JSON.parse(opsJson)) {
  let call
  if (op === 'create') {
    call = createDelegationTokenV3.api.async(
      connection, args[0], args[1], principals(args[2]), BigInt(args[3]))
  } else if (op === 'renew') {
    call = renewDelegationTokenV2.api.async(connection, hmacOf(args[0]), BigInt(args[1]))
  } else if (op === 'expire') {
    call = expireDelegationTokenV2.api.async(connection, hmacOf(args[0]), BigInt(args[1]))
  } else if (op === 'describe') {
    call = describeDelegationTokenV3.api.async(connection, principals(args[0]))
  } else {
    await new Promise((resolve) => setTimeout(resolve, args[0]))
    continue
  }
  try {
    const response = await call
    if (op === 'create') created.push(response.hmac.toString('base64'))
    results.push(response)
  } catch (error) {
    results.push(error.response ?? { errorCode: error.message })
  }
}
await connection.close()
const plain = (_k, v) => typeof v === 'bigint' ? Number(v)
  : (v?.type === 'Buffer' ? Buffer.from(v.data).toString('base64') : v)
console.log(JSON.stringify(results, plain))
"""


def _node(where: Path, bootstrap: str, user: str, ops: list[list[Any]]) -> list[dict[str, Any]]:
    """Run ``ops`` with @platformatic/kafka's raw token APIs; each one's response or code."""
    done = subprocess.run(
        ["node", "tokens.mjs", bootstrap, user, PASSWORDS.get(user, ""), json.dumps(ops)],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def _codes(results: list[dict[str, Any]]) -> list[int]:
    return [r["errorCode"] for r in results]


def test_platformatic_kafka_gets_kafkas_token_errors(
    token_broker: RunningBroker,
    broker_factory: Callable[..., RunningBroker],
    platformatic: Path,  # noqa: F811
) -> None:
    (platformatic / "tokens.mjs").write_text(TOKENS_JS)
    sasl = token_broker.bootstrap("SASL_PLAINTEXT")
    results = _node(
        platformatic,
        sasl,
        "alice",
        [
            ["create", None, None, [], -1],
            ["create", "User", "bob", [["User", "carol"]], 60000],
            ["create", None, None, [["Group", "ops"]], -1],
            ["renew", base64.b64encode(b"no such token").decode(), 1000],
            ["expire", "$0", 1],
            ["sleep", 50],
            ["renew", "$0", 1000],
            ["expire", "$0", 1000],
            ["describe", [["User", "bob"]]],
        ],
    )
    assert _codes(results) == [0, 0, 67, 62, 0, 66, 66, 0]
    mine, bobs = results[0], results[1]
    assert (mine["principalName"], mine["tokenRequesterPrincipalName"]) == ("alice", "alice")
    assert (bobs["principalName"], bobs["tokenRequesterPrincipalName"]) == ("bob", "alice")
    assert bobs["maxTimestampMs"] - bobs["issueTimestampMs"] == 60000
    [described] = results[-1]["tokens"]
    assert described["tokenId"] == bobs["tokenId"] and described["hmac"] == bobs["hmac"]
    assert described["renewers"] == [{"principalType": "User", "principalName": "carol"}]
    # Refusals carry Kafka's -1 times.
    assert {r["expiryTimestampMs"] for r in results[3:8] if r["errorCode"]} == {-1}
    assert (results[2]["issueTimestampMs"], results[2]["tokenId"]) == (-1, "")

    # carol renews bob's token (she is a renewer), not alice's (owner mismatch).
    carol = _node(
        platformatic,
        sasl,
        "carol",
        [
            ["renew", bobs["hmac"], 1000],
            ["renew", mine["hmac"], 1000],
            ["expire", bobs["hmac"], -1],
        ],
    )
    assert _codes(carol) == [0, 63, 0]

    plaintext = token_broker.bootstrap("PLAINTEXT")
    anonymous = _node(
        platformatic, plaintext, "", [["create", None, None, [], -1], ["describe", None]]
    )
    assert _codes(anonymous) == [64, 64]

    props = _token_props()
    del props["delegation.token.secret.key"]
    disabled = broker_factory(props)
    users = _client(disabled, "PLAINTEXT")
    asyncio.run(_started_with_users(users, "alice"))
    off = _node(
        platformatic,
        disabled.bootstrap("SASL_PLAINTEXT"),
        "alice",
        [
            ["create", None, None, [], -1],
            ["renew", "eA==", 1],
            ["expire", "eA==", 1],
            ["describe", None],
        ],
    )
    assert _codes(off) == [61, 61, 61, 61]


async def _started_with_users(client: KafkaClient, *users: str) -> None:
    await client.start()
    try:
        await _add_users(client, *users)
    finally:
        await client.close()


# kplane delegation-tokens ----------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kplane", "delegation-tokens", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )


def test_the_delegation_tokens_command(token_broker: RunningBroker, tmp_path: Path) -> None:
    config = tmp_path / "alice.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="alice-secret";\n'
    )
    sasl = token_broker.bootstrap("SASL_PLAINTEXT")
    connect = ("--bootstrap-server", sasl, "--command-config", str(config))

    created = _cli(
        *connect, "--create", "--max-life-time-period", "-1", "--renewer-principal", "User:bob"
    )
    assert created.returncode == 0, created.stderr
    lines = created.stdout.split("\n")
    assert lines[0] == (
        "Calling create token operation with renewers :[User:bob] , max-life-time-period :-1"
    )
    token_id = lines[1].removeprefix("Created delegation token with tokenId : ")
    assert lines[2] == ""
    assert lines[3].split() == [
        "TOKENID",
        "HMAC",
        "OWNER",
        "REQUESTER",
        "RENEWERS",
        "ISSUEDATE",
        "EXPIRYDATE",
        "MAXDATE",
    ]
    assert lines[4] == ""
    row = lines[5].split()
    assert row[0] == token_id and row[2:5] == ["User:alice", "User:alice", "[User:bob]"]
    hmac = row[1]
    assert len(base64.b64decode(hmac)) == 64
    issued = time.strftime("%Y-%m-%dT%H:%M", time.localtime())
    assert row[5][:10] == issued[:10]

    described = _cli(*connect, "--describe")
    assert described.returncode == 0, described.stderr
    assert described.stdout.startswith(
        "Calling describe token operation for current user.\nTotal number of tokens : 1\n"
    )
    assert described.stdout.split("\n")[-2].split()[:2] == [token_id, hmac]
    by_owner = _cli(*connect, "--describe", "--owner-principal", "User:bob")
    assert by_owner.stdout.startswith(
        "Calling describe token operation for owners: [User:bob]\nTotal number of tokens : 1"
    )

    renewed = _cli(*connect, "--renew", "--renew-time-period", "3600000", "--hmac", hmac)
    assert renewed.returncode == 0, renewed.stderr
    assert renewed.stdout.startswith(
        f"Calling renew token operation with hmac :{hmac} , renew-time-period :3600000\n"
        "Completed renew operation. New expiry date : "
    )
    expired = _cli(*connect, "--expire", "--expiry-time-period", "-1", "--hmac", hmac)
    assert expired.returncode == 0, expired.stderr
    assert "Completed expire operation. New expiry date : " in expired.stdout
    assert "Total number of tokens : 0" in _cli(*connect, "--describe").stdout

    # Refusals: Kafka's exception, and usage errors as kafka-delegation-tokens.sh words them.
    (tmp_path / "none.properties").write_text("")
    plain = token_broker.bootstrap("PLAINTEXT")
    plaintext = ("--bootstrap-server", plain, "--command-config", str(tmp_path / "none.properties"))
    refused = _cli(*plaintext, "--describe")
    assert refused.returncode == 1
    assert refused.stderr == (
        "org.apache.kafka.common.errors.UnsupportedByAuthenticationException: Delegation Token "
        "requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token "
        "authenticated channels.\n"
    )
    # a refused create answers -1 as its three times; its error code is read all the same
    create_refused = _cli(*plaintext, "--create", "--max-life-time-period", "-1")
    assert create_refused.returncode == 1
    assert create_refused.stderr == refused.stderr
    for args, message in (
        (
            ("--create", "--describe"),
            "Command must include exactly one action: --create, --renew, --expire or --describe",
        ),
        (("--create",), 'Missing required argument "[max-life-time-period]"'),
        (("--renew", "--hmac", hmac), 'Missing required argument "[renew-time-period]"'),
        (("--describe", "--hmac", hmac), 'Option "[describe]" can\'t be used with option "[hmac]"'),
    ):
        wrong = _cli(*connect, *args)
        assert (wrong.returncode, wrong.stderr) == (1, message + "\n")


# a cluster -------------------------------------------------------------------------------------
async def test_every_broker_of_a_cluster_knows_every_token(
    kafka_cluster: Callable[..., Any],
) -> None:
    cluster = kafka_cluster(2, _token_props())
    first, second = cluster.broker(0), cluster.broker(1)
    await _started_with_users(_client(first, "PLAINTEXT"), "alice")
    async with _as(first, "alice") as alice:
        token = await alice.create_delegation_token()
    # The second broker learns the token from the change notification in ZooKeeper.
    deadline = time.monotonic() + 30
    while not await _logs_in(_with_token(second, token)):
        assert time.monotonic() < deadline, "the second broker never accepted the token"
        await asyncio.sleep(0.2)
    async with _as(second, "alice") as alice:
        [seen] = await alice.describe_delegation_token()
        assert seen.hmac == token.hmac  # the same secret gives the same password
        await alice.expire_delegation_token(token.hmac, -1)
    deadline = time.monotonic() + 30
    while await _logs_in(_with_token(first, token)):
        assert time.monotonic() < deadline, "the first broker still accepts an expired token"
        await asyncio.sleep(0.2)


async def test_one_way_ssl_is_not_allowed_and_a_client_certificate_is(
    broker_factory: Callable[..., RunningBroker], pki: PkiFiles
) -> None:
    broker = broker_factory(
        _token_props(
            **{
                "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(pki.broker_p12),
                "ssl.keystore.password": pki.password,
                "listener.name.mtls.ssl.client.auth": "required",
                "listener.name.mtls.ssl.truststore.type": "PEM",
                "listener.name.mtls.ssl.truststore.location": str(pki.truststore_pem),
            }
        )
    )
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert)}
    async with Session(_client(broker, "SSL", **tls)) as anonymous:
        assert await _code(anonymous.describe_delegation_token()) == (
            ErrorCode.delegation_token_request_not_allowed
        )
    certificate = {
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    }
    async with Session(_client(broker, "MTLS", **tls, **certificate)) as client:
        token = await client.create_delegation_token()
        assert token.info.owner == "User:CN=kplane-client,OU=test,O=kplane"
        assert [t.info.token_id for t in await client.describe_delegation_token()] == [
            token.info.token_id
        ]
