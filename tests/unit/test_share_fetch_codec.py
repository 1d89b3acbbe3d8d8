"""ShareFetch's hand-written response: the same bytes kio writes for the same answer (v1,
v2), records passed through as given, and a throttle time patched into it in place."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from kplane.broker.quota.throttle_time import patch_throttle_time
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode
from kplane.protocol.share_fetch_codec import (
    ShareFetchPartitionResult,
    ShareFetchTopicResult,
    encode_share_fetch_response,
)

TOPIC_ID = uuid.uuid4()
RECORDS = memoryview(b"stored batches")
PIECES = [RECORDS[:6], RECORDS[6:]]


def by_kio(version: int, throttle_ms: int) -> bytes:
    module = api.response_module(ApiKey.SHARE_FETCH, version)

    def leader(leader_id: int, epoch: int) -> Any:
        return api.make(module.LeaderIdAndEpoch, leader_id=leader_id, leader_epoch=epoch)

    partitions = (
        api.make(
            module.PartitionData,
            partition_index=0,
            error_code=ErrorCode.none,
            acknowledge_error_code=ErrorCode.invalid_record_state,
            acknowledge_error_message="no such record",
            current_leader=leader(1, 4),
            records=bytes(RECORDS),
            acquired_records=(
                api.make(module.AcquiredRecords, first_offset=5, last_offset=9, delivery_count=1),
                api.make(module.AcquiredRecords, first_offset=11, last_offset=11, delivery_count=3),
            ),
        ),
        api.make(
            module.PartitionData,
            partition_index=1,
            error_code=ErrorCode.not_leader_or_follower,
            error_message="led elsewhere",
            acknowledge_error_code=ErrorCode.none,
            current_leader=leader(-1, -1),
            records=b"",
            acquired_records=(),
        ),
    )
    return bytes(
        api.encode(
            api.make(
                api.response_class(ApiKey.SHARE_FETCH, version),
                throttle_time=datetime.timedelta(milliseconds=throttle_ms),
                error_code=ErrorCode.none,
                acquisition_lock_timeout=datetime.timedelta(milliseconds=30_000),
                responses=(
                    api.make(
                        module.ShareFetchableTopicResponse, topic_id=TOPIC_ID, partitions=partitions
                    ),
                ),
                node_endpoints=(),
            )
        )
    )


def by_hand(version: int) -> list[Any]:
    topic = ShareFetchTopicResult(
        TOPIC_ID,
        [
            ShareFetchPartitionResult(
                0,
                acknowledge_error_code=ErrorCode.invalid_record_state,
                acknowledge_error_message="no such record",
                leader_id=1,
                leader_epoch=4,
                records=PIECES,
                acquired_records=[(5, 9, 1), (11, 11, 3)],
            ),
            ShareFetchPartitionResult(1, ErrorCode.not_leader_or_follower, "led elsewhere"),
        ],
    )
    return encode_share_fetch_response(version, [topic], 30_000)


@pytest.mark.parametrize("version", [1, 2])
def test_the_same_bytes_as_kio(version: int) -> None:
    pieces = by_hand(version)
    assert b"".join(bytes(p) for p in pieces) == by_kio(version, 0)
    assert pieces[1] is PIECES[0] and pieces[2] is PIECES[1]  # passed through, not copied


@pytest.mark.parametrize("version", [1, 2])
def test_a_throttle_time_is_patched_in_and_the_records_kept(version: int) -> None:
    patched = patch_throttle_time(ApiKey.SHARE_FETCH, version, by_hand(version), 1234)
    assert b"".join(bytes(p) for p in patched) == by_kio(version, 1234)  # type: ignore[arg-type]


def test_a_version_not_written_here_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_share_fetch_response(0, [], 0)
