"""The body scan: every schema's valid bodies pass untouched; bad counts, lengths, nulls
and tags are caught before kio's native decoder sees them."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v15.request import FetchRequest
from kio.serial import entity_reader
from kio.static.primitive import Records

from kplane.protocol import api
from kplane.protocol.body_scan import MalformedBody, scan, write_uvarint
from kplane.protocol.errors import ErrorCode

st.register_type_strategy(Records, st.binary(max_size=64))

CLASSES = [
    cls
    for key in api.API_NAMES
    for version in api.kio_versions(key)
    for cls in (api.request_class(key, version), api.response_class(key, version))
]


def _passes_and_truncation_fails(cls: type, entity: object) -> None:
    body = api.encode(entity)
    assert scan(cls, body, 0) == (body, 0)
    if body:
        with pytest.raises(MalformedBody):
            scan(cls, body[:-1], 0)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__module__.removeprefix("kio.schema."))
def test_every_schema_passes_its_zero_body(cls: type) -> None:
    _passes_and_truncation_fails(cls, api.make(cls))


def _kio_reads_back(cls: type, body: bytes) -> bool:
    """kio's writer turns a timedelta into an int64 of ms through a float, so near
    timedelta's limit it can write one more ms than its reader takes; the scan clamps
    that value on purpose (``test_ms_past_what_a_timedelta_holds_are_clamped``)."""
    try:
        entity_reader(cls)(body, 0)
    except ValueError:
        return False
    return True


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(CLASSES).flatmap(lambda cls: st.tuples(st.just(cls), st.from_type(cls))))
def test_random_bodies_pass_unchanged(case: tuple[type, object]) -> None:
    cls, entity = case
    assume(_kio_reads_back(cls, api.encode(entity)))
    _passes_and_truncation_fails(cls, entity)


def test_ms_past_what_a_timedelta_holds_are_clamped() -> None:
    """Kafka takes any int64 of ms (Long.MAX_VALUE for "forever"); kio's reader fails past
    what a timedelta holds, so the scan clamps such a value to the largest it reads."""
    zero = api.encode(api.make(api.response_class(36, 1)))  # SaslAuthenticate v1
    forever = zero[:-8] + struct.pack(">q", 2**63 - 1)  # session_lifetime_ms comes last
    with pytest.raises(ValueError):
        entity_reader(api.response_class(36, 1))(forever, 0)
    lifetime = api.decode_response(36, 1, forever).session_lifetime
    assert lifetime // datetime.timedelta(milliseconds=1) == 9_223_372_036_854_775
    within = zero[:-8] + struct.pack(">q", 86_400_000)
    assert scan(api.response_class(36, 1), within, 0) == (within, 0)


def test_array_count_beyond_the_bytes_left() -> None:
    with pytest.raises(MalformedBody, match="cannot fit"):
        scan(api.request_class(3, 12), b"\xff\xff\xff\xff\x0f", 0)


def test_null_where_not_nullable() -> None:
    cls = api.request_class(19, 5)  # CreateTopics v5: topics is not nullable
    with pytest.raises(MalformedBody, match="not nullable"):
        scan(cls, b"\x00" + struct.pack(">i", 1) + b"\x00\x00", 0)


def test_unknown_tags_are_dropped_and_known_ones_kept() -> None:
    body = api.encode(ApiVersionsRequest(client_software_name="a", client_software_version="b"))
    tagged = body[:-1] + b"\x02\x07\x01x\x09\x00"
    data, offset = scan(ApiVersionsRequest, tagged, 0)
    assert data[offset:] == body
    # a known tag (cluster id, 0) beside an unknown one (5): only the unknown goes
    section = write_uvarint(2) + b"\x00\x03\x03c1" + b"\x05\x01z"
    crafted = api.encode(api.make(FetchRequest))[:-1] + section
    data, offset = scan(FetchRequest, crafted, 0)
    assert api.decode_request(1, 15, crafted).cluster_id == "c1"
    assert data[offset:].endswith(b"\x01\x00\x03\x03c1")


def test_known_tag_must_fill_its_size() -> None:
    crafted = api.encode(api.make(FetchRequest))[:-1] + b"\x01\x00\x05\x03c1zz"
    with pytest.raises(MalformedBody, match="does not fill"):
        scan(FetchRequest, crafted, 0)


def test_a_timestamp_before_the_epoch_is_read_as_the_epoch() -> None:
    # Kafka answers a refused CreateDelegationToken with -1 for its three timestamps
    none = datetime.datetime.fromtimestamp(-0.001, datetime.UTC)
    response = api.make(
        api.response_class(38, 1),
        error_code=ErrorCode.delegation_token_auth_disabled,
        principal_type="User",
        principal_name="alice",
        issue_timestamp=none,
        expiry_timestamp=none,
        max_timestamp=none,
        token_id="",
        hmac=b"",
    )
    wire = api.encode(response)
    assert wire.count(b"\xff" * 8) == 3
    decoded = api.decode_response(38, 1, wire)
    assert decoded.error_code == ErrorCode.delegation_token_auth_disabled
    epoch = datetime.datetime.fromtimestamp(0, datetime.UTC)
    assert decoded.issue_timestamp == decoded.expiry_timestamp == decoded.max_timestamp == epoch
