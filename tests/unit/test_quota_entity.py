"""Client quota entities: Kafka's checks of AlterClientQuotas entries and DescribeClientQuotas
filters, their store paths and change notification paths, throttle_time_ms written into
encoded responses, and ``kplane configs``' quota command lines."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import pytest

from kplane.broker.quota.entity import (
    CLIENT_ID,
    IP,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    USER_AND_CLIENT_CONFIGS,
    QuotaEntity,
    QuotaError,
    QuotaFilter,
    entity_of_path,
    validate_entity,
    validate_value,
)
from kplane.broker.quota.throttle_time import patch_throttle_time
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.fetch_codec import (
    FetchPartitionResult,
    FetchTopicResult,
    encode_fetch_response,
)
from kplane.protocol.produce_codec import TopicResult, encode_produce_response
from kplane.tools.admin_session import UsageError
from kplane.tools.configs import Command, Entity, add_parser, java_double, parse_command


def test_store_paths_and_notifications() -> None:
    cases = {
        QuotaEntity.of(user="alice"): ("users", "alice"),
        QuotaEntity.of(user=None): ("users", "<default>"),
        QuotaEntity.of(client_id="a b/c"): ("clients", "a%20b%2Fc"),
        QuotaEntity.of(user="alice", client_id=None): ("users/alice/clients", "<default>"),
        QuotaEntity.of(user=None, client_id="app"): ("users/<default>/clients", "app"),
        QuotaEntity.of(ip="10.0.0.1"): ("ips", "10.0.0.1"),
    }
    for entity, path in cases.items():
        assert entity.store_path() == path
        assert entity_of_path("/".join(path)) == entity
    assert entity_of_path("topics/t") is None
    assert entity_of_path("brokers/<default>") is None


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ((), "Invalid empty client quota entity"),
        (((USER, "a"), (USER, "b")), "duplicate entity entry user"),
        ((("group", "g"),), "Unhandled client quota entity type: group"),
        (((CLIENT_ID, ""),), "Empty client-id not supported"),
        (((IP, "1.2.3.4"), (CLIENT_ID, "c")), "IP entity should"),
        (((IP, "not a host"),), "not a valid IP or resolvable host"),
    ],
)
def test_bad_entities(entries: tuple[tuple[str, str | None], ...], message: str) -> None:
    with pytest.raises(QuotaError, match=message):
        validate_entity(entries)


def test_values() -> None:
    validate_value(USER_AND_CLIENT_CONFIGS, "producer_byte_rate", 1024.0)
    validate_value(USER_AND_CLIENT_CONFIGS, "request_percentage", 0.5)
    for key, value, message in (
        ("nope", 1.0, "Invalid configuration key nope"),
        ("producer_byte_rate", -1.0, "must be greater than 0"),
        ("consumer_byte_rate", 10.5, "cannot be a fractional value"),
        ("producer_byte_rate", 1e19, "too large for a LONG"),
    ):
        with pytest.raises(QuotaError, match=message):
            validate_value(USER_AND_CLIENT_CONFIGS, key, value)


def test_filters_match_as_kafkas() -> None:
    user = QuotaEntity.of(user="alice")
    user_client = QuotaEntity.of(user="alice", client_id="app")
    default_user = QuotaEntity.of(user=None)
    client = QuotaEntity.of(client_id="app")
    every = [user, user_client, default_user, client]

    def matching(components: list[tuple[str, int, str | None]], strict: bool) -> list[object]:
        wanted = QuotaFilter.parse(components, strict)
        return [e for e in every if wanted.matches(e)]

    assert matching([], False) == every
    assert matching([], True) == []
    assert matching([(USER, MATCH_EXACT, "alice")], False) == [user, user_client]
    assert matching([(USER, MATCH_EXACT, "alice")], True) == [user]
    assert matching([(USER, MATCH_DEFAULT, None)], False) == [default_user]
    assert matching([(USER, MATCH_SPECIFIED, None)], True) == [user, default_user]
    assert matching([(CLIENT_ID, MATCH_SPECIFIED, None)], False) == [user_client, client]


@pytest.mark.parametrize(
    ("components", "unsupported"),
    [
        ([("", MATCH_EXACT, "x")], False),
        ([(USER, MATCH_EXACT, None)], False),
        ([(USER, MATCH_DEFAULT, "x")], False),
        ([(USER, MATCH_SPECIFIED, "x")], False),
        ([(USER, 7, None)], False),
        ([(USER, MATCH_SPECIFIED, None), (USER, MATCH_DEFAULT, None)], False),
        ([(IP, MATCH_SPECIFIED, None), (CLIENT_ID, MATCH_SPECIFIED, None)], False),
        ([("group", MATCH_SPECIFIED, None)], True),
    ],
)
def test_bad_filters(components: list[tuple[str, int, str | None]], unsupported: bool) -> None:
    with pytest.raises(QuotaError) as refused:
        QuotaFilter.parse(components, False)
    assert refused.value.unsupported is unsupported


@pytest.mark.parametrize("version", [1, 8, 9, 11])
def test_produce_throttle_time_patched(version: int) -> None:
    topics = [TopicResult("t", None, [])]
    body = encode_produce_response(version, topics)
    (patched,) = patch_throttle_time(ApiKey.PRODUCE, version, [body], 1234)
    assert patched == encode_produce_response(version, topics, throttle_time_ms=1234)


@pytest.mark.parametrize("version", [4, 12, 13, 16])
def test_throttled_fetch_answered_empty(version: int) -> None:
    """Kafka's handleFetchRequest: a throttled consumer's Fetch gets no partitions, only
    the throttle time (its bytes are not counted: see test_quota_throttle)."""
    records = memoryview(b"stored batches")
    topics = [
        FetchTopicResult(
            "t", uuid.UUID(int=1), [FetchPartitionResult(0, high_watermark=5, records=[records])]
        )
    ]
    body = encode_fetch_response(version, topics)
    patched = patch_throttle_time(ApiKey.FETCH, version, body, 250)
    assert patched == encode_fetch_response(version, [], throttle_time_ms=250)
    assert decode_fetch_response(version, patched) == (250, 0)
    assert patch_throttle_time(ApiKey.FETCH, 0, body, 250) == body  # v0 has no field


def decode_fetch_response(version: int, pieces: list[Any]) -> tuple[int, int]:
    """(throttle_time_ms, number of topics) of a Fetch response body, through kio."""
    data = b"".join(bytes(p) for p in pieces)
    response = api.decode_response(ApiKey.FETCH, version, data, 0)
    return int(response.throttle_time.total_seconds() * 1000), len(response.responses)


def test_java_double() -> None:
    assert java_double(1048576.0) == "1048576.0"
    assert java_double(104857600.0) == "1.048576E8"
    assert java_double(10000000.0) == "1.0E7"
    assert java_double(50.0) == "50.0"
    assert java_double(0.0001) == "1.0E-4"


def _command(*argv: str) -> Command:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parse_command(parser.parse_args(["configs", "--bootstrap-server", "h:1", *argv]))


def test_quota_command_lines() -> None:
    both = _command(
        "--entity-type",
        "clients",
        "--entity-default",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--alter",
        "--add-config",
        "producer_byte_rate=1",
    )
    assert (both.entity, both.child, both.first) == (
        Entity("users", "alice"),
        Entity("clients", ""),
        Entity("clients", ""),
    )
    assert _command("--user-defaults", "--describe").entity == Entity("users", "")
    assert _command("--ip", "127.0.0.1", "--describe").entity == Entity("ips", "127.0.0.1")
    every = _command("--entity-type", "users", "--entity-type", "clients", "--describe")
    assert (every.entity, every.child) == (Entity("users", None), Entity("clients", None))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [
                "--entity-type",
                "users",
                "--entity-type",
                "clients",
                "--entity-name",
                "a",
                "--alter",
                "--add-config",
                "producer_byte_rate=1",
            ],
            "--entity-name or --entity-default must be specified with each --entity-type "
            "for --alter",
        ),
        (
            ["--entity-type", "clients", "--alter", "--add-config", "producer_byte_rate=1"],
            "An entity-name or default entity must be specified with --alter of users, "
            "clients, brokers or ips",
        ),
        (
            ["--entity-type", "ips", "--entity-type", "users", "--describe"],
            "Only 'users' and 'clients' entity types may be specified together",
        ),
        (
            ["--entity-type", "ips", "--entity-name", "no such host", "--describe"],
            "The entity name for ips must be a valid IP or resolvable host",
        ),
        (
            ["--entity-type", "clients", "--entity-name", "a", "--entity-name", "b", "--describe"],
            "More entity names specified than entity types",
        ),
    ],
)
def test_refused_quota_command_lines(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        _command(*argv)
    assert message in str(refused.value)
