"""The share session cache as Kafka 4.1 keeps it: ``group.share.max.share.sessions``
sessions per broker; a ShareFetch opening one more is refused with
SHARE_SESSION_LIMIT_REACHED (no session is evicted), and the records of a session that goes
are available again at once, not when their locks expire."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from confluent_kafka import ShareConsumer

from kplane.protocol.errors import ErrorCode
from kplane.testing.plugin import RunningBroker

from .helpers import wait_until
from .test_share_groups import poll_until, produce_values, set_group_config, share_fetch


def _acquired(response: Any) -> list[tuple[int, int, int]]:
    (part,) = response.responses[0].partitions
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records]


def test_a_full_cache_refuses_a_session_and_a_closed_one_gives_its_records_back(
    broker_factory: Any,
) -> None:
    broker: RunningBroker = broker_factory({"group.share.max.share.sessions": "1"})
    topic, group = "ss-limit", "ss-limit-group"
    broker.create_topic(topic, 1)
    # Locks far longer than the test waits: records come back because the session went.
    set_group_config(
        broker, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="60000"
    )
    produce_values(broker, topic, [f"r{i}".encode() for i in range(5)], partition=0)
    topic_id = wait_until(lambda: broker.topics().get(topic), what="the topic")

    holder = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap(),
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "logger": logging.getLogger("test-librdkafka-share"),
        }
    )
    holder.subscribe([topic])
    held = poll_until(holder, 5)
    assert sorted(m.offset() for m in held) == [0, 1, 2, 3, 4]  # acquired, not acknowledged

    other = str(uuid.uuid4())
    with broker.wire("PLAINTEXT") as wire:
        refused = share_fetch(broker, group, other, topic_id, wire=wire)
        assert refused.error_code == ErrorCode.share_session_limit_reached
        holder.close()  # its share session closes: the five records are available again
        opened = wait_until(
            lambda: (
                response
                if (response := share_fetch(broker, group, other, topic_id, wire=wire)).error_code
                == ErrorCode.none
                else None
            ),
            30,
            "a session opened once the holder's closed",
        )
        assert _acquired(opened) == [(0, 4, 2)]  # at once, delivered a second time
