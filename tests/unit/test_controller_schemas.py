"""LeaderAndIsr, StopReplica and UpdateMetadata (protocol.controller_schema) on the wire.

Every version round-trips through kio's codecs with every field set to a non-default
value; golden bytes, written out field by field from Kafka's JSON schemas, pin field
order, types and the compact/flexible encoding.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
import typing
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import UnknownEntity
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader
from kio.static.constants import EntityType

from kplane.broker.server.request_metrics import request_name
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
FIRST_FLEXIBLE = {LEADER_AND_ISR: 4, STOP_REPLICA: 2, UPDATE_METADATA: 6}
CASES = [(key, v) for key in FIRST_FLEXIBLE for v in api.kio_versions(key)]
ERRORS = [e for e in ErrorCode if e is not ErrorCode.none]


# -- the table ---------------------------------------------------------------------------
def test_api_table() -> None:
    assert {k: api.API_NAMES[k] for k in FIRST_FLEXIBLE} == {
        4: "leader_and_isr",
        5: "stop_replica",
        6: "update_metadata",
    }
    assert [request_name(k) for k in FIRST_FLEXIBLE] == [
        "LeaderAndIsr",
        "StopReplica",
        "UpdateMetadata",
    ]
    assert api.kio_versions(LEADER_AND_ISR) == range(0, 8)
    assert api.kio_versions(STOP_REPLICA) == range(0, 5)
    assert api.kio_versions(UPDATE_METADATA) == range(0, 9)
    assert api.API_NAMES[3] == "metadata" and api.kio_versions(3) == range(0, 14)
    for key in FIRST_FLEXIBLE:
        with pytest.raises(UnknownEntity):
            api.request_module(key, api.kio_versions(key).stop)


@pytest.mark.parametrize(("key", "version"), CASES)
def test_class_attributes_and_headers(key: int, version: int) -> None:
    flexible = version >= FIRST_FLEXIBLE[key]
    assert api.is_flexible(key, version) is flexible
    assert api.request_header_version(key, version) == (2 if flexible else 1)
    assert api.response_header_version(key, version) == (1 if flexible else 0)
    for module, headers, kind in (
        (api.request_module(key, version), (RequestHeaderV1, RequestHeaderV2), "request"),
        (api.response_module(key, version), (ResponseHeaderV0, ResponseHeaderV1), "response"),
    ):
        classes: list[Any] = [
            c
            for c in vars(module).values()
            if isinstance(c, type) and c.__module__ == module.__name__
        ]
        assert [c.__type__ for c in classes].count(EntityType[kind]) == 1
        for cls in classes:
            assert cls.__type__ in (EntityType.nested, EntityType[kind])
            assert (cls.__api_key__, cls.__version__, cls.__flexible__) == (key, version, flexible)
            assert cls.__header_schema__ is headers[flexible]
            assert cls.__dataclass_params__.frozen and hasattr(cls, "__slots__")


# -- round trips -------------------------------------------------------------------------
def filled(cls: type[Any], seq: Iterator[int]) -> Any:
    """An instance of ``cls`` with a distinct, non-default value in every field."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        hint, kafka_type, n = hints[f.name], f.metadata.get("kafka_type"), next(seq)
        if typing.get_origin(hint) is tuple:
            inner = typing.get_args(hint)[0]
            if isinstance(inner, type) and dataclasses.is_dataclass(inner):
                value: Any = (filled(inner, seq), filled(inner, seq))
            else:
                value = (inner(n), inner(n + 1000))
        elif kafka_type == "string":
            value = f"{f.name}-{n}"
        elif kafka_type == "uuid":
            value = uuid.UUID(int=n << 64 | n)
        elif kafka_type == "bool":
            value = True
        elif kafka_type == "error_code":
            value = ERRORS[n % len(ERRORS)]
        else:
            value = hint(n % 100 + 1 if kafka_type == "int8" else n)
        assert value != f.default
        values[f.name] = value
    return cls(**values)


def round_trip(entity: Any) -> Any:
    encoded = api.encode(entity)
    decoded, size = entity_reader(type(entity))(encoded, 0)
    assert size == len(encoded)
    return decoded


@pytest.mark.parametrize(("key", "version"), CASES)
def test_round_trip_every_field(key: int, version: int) -> None:
    seq = itertools.count(1)
    request = filled(api.request_class(key, version), seq)
    response = filled(api.response_class(key, version), seq)
    assert round_trip(request) == request
    assert round_trip(response) == response
    assert api.decode_request(key, version, api.encode(request)) == request
    assert api.decode_response(key, version, api.encode(response)) == response


@pytest.mark.parametrize("version", range(2, 9))
def test_null_rack_round_trips(version: int) -> None:
    module = api.request_module(UPDATE_METADATA, version)
    broker = filled(module.UpdateMetadataBroker, itertools.count(1))
    broker = dataclasses.replace(broker, rack=None)
    request = api.make(module.UpdateMetadataRequest, controller_id=1, live_brokers=(broker,))
    assert round_trip(request) == request


def test_make_fills_defaults() -> None:
    # ``delete_partitions`` is v0-2 only, so v3 drops it.
    request = api.make(api.request_class(STOP_REPLICA, 3), controller_id=1, delete_partitions=True)
    assert (request.broker_epoch, request.topic_states) == (-1, ())
    assert not hasattr(request, "delete_partitions")
    update = api.make(api.request_class(UPDATE_METADATA, 8), controller_id=1)
    assert (update.type_, update.is_kraft_controller) == (0, False)


# -- golden bytes ------------------------------------------------------------------------
def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str) -> bytes:
    """Legacy string: int16 length + utf-8."""
    return i16(len(s)) + s.encode()


def cstring(s: str) -> bytes:
    """Compact string: uvarint (length + 1) + utf-8 (lengths here stay below 127)."""
    return bytes([len(s) + 1]) + s.encode()


def array(n: int) -> bytes:
    """Legacy array length prefix."""
    return i32(n)


def carray(n: int) -> bytes:
    """Compact array length prefix, uvarint (n + 1)."""
    return bytes([n + 1])


TRUE, FALSE, NO_TAGS = b"\x01", b"\x00", b"\x00"
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def assert_golden(key: int, version: int, entity: Any, expected: bytes) -> None:
    assert api.encode(entity) == expected
    if entity.__type__ is EntityType.request:
        assert api.decode_request(key, version, expected) == entity
    else:
        assert api.decode_response(key, version, expected) == entity


def test_stop_replica_v0_golden() -> None:
    m = api.request_module(STOP_REPLICA, 0)
    request = m.StopReplicaRequest(
        controller_id=1,
        controller_epoch=2,
        delete_partitions=True,
        ungrouped_partitions=(m.StopReplicaPartitionV0(topic_name="foo", partition_index=3),),
    )
    expected = i32(1) + i32(2) + TRUE + array(1) + string("foo") + i32(3)
    assert_golden(STOP_REPLICA, 0, request, expected)

    r = api.response_module(STOP_REPLICA, 0)
    response = r.StopReplicaResponse(
        error_code=ErrorCode.stale_controller_epoch,
        partition_errors=(
            r.StopReplicaPartitionError(
                topic_name="foo", partition_index=3, error_code=ErrorCode.kafka_storage_error
            ),
        ),
    )
    assert_golden(STOP_REPLICA, 0, response, i16(11) + array(1) + string("foo") + i32(3) + i16(56))


def test_stop_replica_v1_and_v2_golden() -> None:
    for version, flexible in ((1, False), (2, True)):
        m = api.request_module(STOP_REPLICA, version)
        request = m.StopReplicaRequest(
            controller_id=1,
            controller_epoch=2,
            broker_epoch=3,
            delete_partitions=False,
            topics=(m.StopReplicaTopicV1(name="foo", partition_indexes=(4, 5)),),
        )
        if flexible:
            topic = cstring("foo") + carray(2) + i32(4) + i32(5) + NO_TAGS
            expected = i32(1) + i32(2) + i64(3) + FALSE + carray(1) + topic + NO_TAGS
        else:
            topic = string("foo") + array(2) + i32(4) + i32(5)
            expected = i32(1) + i32(2) + i64(3) + FALSE + array(1) + topic
        assert_golden(STOP_REPLICA, version, request, expected)


def test_stop_replica_v4_golden() -> None:
    m = api.request_module(STOP_REPLICA, 4)
    request = m.StopReplicaRequest(
        controller_id=1,
        is_kraft_controller=True,
        controller_epoch=2,
        broker_epoch=3,
        topic_states=(
            m.StopReplicaTopicState(
                topic_name="foo",
                partition_states=(
                    m.StopReplicaPartitionState(
                        partition_index=0, leader_epoch=5, delete_partition=True
                    ),
                ),
            ),
        ),
    )
    partition = i32(0) + i32(5) + TRUE + NO_TAGS
    topic = cstring("foo") + carray(1) + partition + NO_TAGS
    expected = i32(1) + TRUE + i32(2) + i64(3) + carray(1) + topic + NO_TAGS
    assert_golden(STOP_REPLICA, 4, request, expected)

    r = api.response_module(STOP_REPLICA, 4)
    response = r.StopReplicaResponse(
        error_code=ErrorCode.none,
        partition_errors=(
            r.StopReplicaPartitionError(
                topic_name="foo", partition_index=0, error_code=ErrorCode.fenced_leader_epoch
            ),
        ),
    )
    expected = i16(0) + carray(1) + cstring("foo") + i32(0) + i16(74) + NO_TAGS + NO_TAGS
    assert_golden(STOP_REPLICA, 4, response, expected)


def test_leader_and_isr_v1_golden() -> None:
    m = api.request_module(LEADER_AND_ISR, 1)
    request = m.LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=2,
        ungrouped_partition_states=(
            m.LeaderAndIsrPartitionState(
                topic_name="foo",
                partition_index=0,
                controller_epoch=2,
                leader=1,
                leader_epoch=7,
                isr=(1, 2),
                partition_epoch=9,
                replicas=(1, 2, 3),
                is_new=True,
            ),
        ),
        live_leaders=(m.LeaderAndIsrLiveLeader(broker_id=1, host_name="h", port=9092),),
    )
    state = (
        string("foo") + i32(0) + i32(2) + i32(1) + i32(7)
        + array(2) + i32(1) + i32(2)  # isr
        + i32(9)  # zk version / partition epoch
        + array(3) + i32(1) + i32(2) + i32(3)  # replicas
        + TRUE  # is_new (v1+)
    )  # fmt: skip
    leader = i32(1) + string("h") + i32(9092)
    expected = i32(1) + i32(2) + array(1) + state + array(1) + leader
    assert_golden(LEADER_AND_ISR, 1, request, expected)

    r = api.response_module(LEADER_AND_ISR, 1)
    response = r.LeaderAndIsrResponse(
        error_code=ErrorCode.none,
        partition_errors=(
            r.LeaderAndIsrPartitionError(
                topic_name="foo", partition_index=0, error_code=ErrorCode.not_controller
            ),
        ),
    )
    expected = i16(0) + array(1) + string("foo") + i32(0) + i16(41)
    assert_golden(LEADER_AND_ISR, 1, response, expected)


def test_leader_and_isr_v7_golden() -> None:
    m = api.request_module(LEADER_AND_ISR, 7)
    request = m.LeaderAndIsrRequest(
        controller_id=1,
        is_kraft_controller=True,
        controller_epoch=2,
        broker_epoch=3,
        type_=2,
        topic_states=(
            m.LeaderAndIsrTopicState(
                topic_name="foo",
                topic_id=TOPIC_ID,
                partition_states=(
                    m.LeaderAndIsrPartitionState(
                        partition_index=0,
                        controller_epoch=2,
                        leader=1,
                        leader_epoch=7,
                        isr=(1,),
                        partition_epoch=9,
                        replicas=(1, 2),
                        adding_replicas=(2,),
                        removing_replicas=(),
                        is_new=False,
                        leader_recovery_state=1,
                    ),
                ),
            ),
        ),
        live_leaders=(m.LeaderAndIsrLiveLeader(broker_id=1, host_name="h", port=9092),),
    )
    state = (
        i32(0) + i32(2) + i32(1) + i32(7)
        + carray(1) + i32(1)  # isr
        + i32(9)  # partition epoch
        + carray(2) + i32(1) + i32(2)  # replicas
        + carray(1) + i32(2)  # adding replicas (v3+)
        + carray(0)  # removing replicas (v3+)
        + FALSE  # is_new
        + i8(1)  # leader recovery state (v6+)
        + NO_TAGS
    )  # fmt: skip
    topic = cstring("foo") + TOPIC_ID.bytes + carray(1) + state + NO_TAGS
    leader = i32(1) + cstring("h") + i32(9092) + NO_TAGS
    head = i32(1) + TRUE + i32(2) + i64(3) + i8(2)
    expected = head + carray(1) + topic + carray(1) + leader + NO_TAGS
    assert_golden(LEADER_AND_ISR, 7, request, expected)

    r = api.response_module(LEADER_AND_ISR, 7)
    response = r.LeaderAndIsrResponse(
        error_code=ErrorCode.none,
        topics=(
            r.LeaderAndIsrTopicError(
                topic_id=TOPIC_ID,
                partition_errors=(
                    r.LeaderAndIsrPartitionError(
                        partition_index=0, error_code=ErrorCode.kafka_storage_error
                    ),
                ),
            ),
        ),
    )
    partition = i32(0) + i16(56) + NO_TAGS
    topic = TOPIC_ID.bytes + carray(1) + partition + NO_TAGS
    assert_golden(LEADER_AND_ISR, 7, response, i16(0) + carray(1) + topic + NO_TAGS)


def test_update_metadata_v0_golden() -> None:
    m = api.request_module(UPDATE_METADATA, 0)
    request = m.UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=2,
        ungrouped_partition_states=(
            m.UpdateMetadataPartitionState(
                topic_name="foo",
                partition_index=0,
                controller_epoch=2,
                leader=1,
                leader_epoch=7,
                isr=(1,),
                zk_version=9,
                replicas=(1,),
            ),
        ),
        live_brokers=(m.UpdateMetadataBroker(id=1, v0_host="h", v0_port=9092),),
    )
    state = (
        string("foo") + i32(0) + i32(2) + i32(1) + i32(7)
        + array(1) + i32(1) + i32(9) + array(1) + i32(1)
    )  # fmt: skip
    broker = i32(1) + string("h") + i32(9092)
    expected = i32(1) + i32(2) + array(1) + state + array(1) + broker
    assert_golden(UPDATE_METADATA, 0, request, expected)

    response = api.response_class(UPDATE_METADATA, 0)(error_code=ErrorCode.not_controller)
    assert_golden(UPDATE_METADATA, 0, response, i16(41))


def test_update_metadata_v3_golden() -> None:
    m = api.request_module(UPDATE_METADATA, 3)
    endpoint = m.UpdateMetadataEndpoint(port=9092, host="h", listener="L", security_protocol=1)
    request = m.UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=2,
        ungrouped_partition_states=(),
        live_brokers=(m.UpdateMetadataBroker(id=1, endpoints=(endpoint,), rack=None),),
    )
    endpoint_bytes = i32(9092) + string("h") + string("L") + i16(1)
    broker = i32(1) + array(1) + endpoint_bytes + i16(-1)  # null rack
    expected = i32(1) + i32(2) + array(0) + array(1) + broker
    assert_golden(UPDATE_METADATA, 3, request, expected)


def test_update_metadata_v8_golden() -> None:
    m = api.request_module(UPDATE_METADATA, 8)
    partition = m.UpdateMetadataPartitionState(
        partition_index=0,
        controller_epoch=2,
        leader=1,
        leader_epoch=7,
        isr=(1,),
        zk_version=9,
        replicas=(1,),
        offline_replicas=(2,),
    )
    endpoint = m.UpdateMetadataEndpoint(port=9092, host="h", listener="L", security_protocol=1)
    request = m.UpdateMetadataRequest(
        controller_id=1,
        is_kraft_controller=True,
        type_=2,
        controller_epoch=2,
        broker_epoch=3,
        topic_states=(
            m.UpdateMetadataTopicState(
                topic_name="foo", topic_id=TOPIC_ID, partition_states=(partition,)
            ),
        ),
        live_brokers=(m.UpdateMetadataBroker(id=1, endpoints=(endpoint,), rack="r"),),
    )
    state = (
        i32(0) + i32(2) + i32(1) + i32(7)
        + carray(1) + i32(1) + i32(9) + carray(1) + i32(1)
        + carray(1) + i32(2)  # offline replicas (v4+)
        + NO_TAGS
    )  # fmt: skip
    topic = cstring("foo") + TOPIC_ID.bytes + carray(1) + state + NO_TAGS
    endpoint_bytes = i32(9092) + cstring("h") + cstring("L") + i16(1) + NO_TAGS
    broker = i32(1) + carray(1) + endpoint_bytes + cstring("r") + NO_TAGS
    # Type is tagged (tag 0): one tagged field, tag 0, size 1, int8 2.
    tagged = b"\x01" + b"\x00" + b"\x01" + i8(2)
    head = i32(1) + TRUE + i32(2) + i64(3)
    expected = head + carray(1) + topic + carray(1) + broker + tagged
    assert_golden(UPDATE_METADATA, 8, request, expected)

    # At its default the tagged Type is left off the wire.
    untagged = dataclasses.replace(request, type_=0)
    assert api.encode(untagged) == expected[: -len(tagged)] + NO_TAGS

    response = api.response_class(UPDATE_METADATA, 8)(error_code=ErrorCode.not_controller)
    assert_golden(UPDATE_METADATA, 8, response, i16(41) + NO_TAGS)
