"""Pipelined Produce requests, which the Processor handles on its own thread: a client's
requests are handled back to back within a pass and their responses written when it ends.
Whatever the passes, every request is answered, in order, and a close after them comes
after their responses."""

from __future__ import annotations

from kplane.broker.network.processor import RESPONSES_PER_PASS
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import encode_request_frame
from kplane.protocol.records import Record, build_batch, iter_all_records
from kplane.testing.plugin import RunningBroker
from kplane.testing.wire import WireClient
from tests.integration.helpers import fetch_partition, fetch_request, produce_request

PRODUCE = 0
PRODUCE_VERSION = 9
# more requests than three passes send, so some wait for passes of their own
COUNT = 3 * RESPONSES_PER_PASS + 5


def _produce_frame(topic: str, correlation_id: int, value: bytes, acks: int = 1) -> bytes:
    records = build_batch([Record(key=None, value=value)])
    body = api.encode(produce_request(topic, records, acks=acks))
    return encode_request_frame(PRODUCE, PRODUCE_VERSION, correlation_id, "t", body)


def _answers(client: WireClient, count: int) -> list[tuple[int, int]]:
    """(correlation id, base offset) of the next ``count`` Produce responses."""
    got = []
    for _ in range(count):
        correlation_id, response = client.receive(PRODUCE, PRODUCE_VERSION)
        ((part,),) = (t.partition_responses for t in response.responses)
        assert part.error_code == ErrorCode.none, part
        got.append((correlation_id, int(part.base_offset)))
    return got


def _values(client: WireClient, topic: str) -> list[bytes | None]:
    part = fetch_partition(client, fetch_request(topic, 0))
    return [r.value for r in iter_all_records(part.records)]


def test_pipelined_produces_are_answered_in_order(broker: RunningBroker) -> None:
    broker.create_topic("pipelined", 1)
    values = [f"v{i}".encode() for i in range(COUNT)]
    with broker.wire() as client:
        # every request in one write: they arrive together and wait on the connection
        client.send_raw(b"".join(_produce_frame("pipelined", i, v) for i, v in enumerate(values)))
        assert _answers(client, COUNT) == [(i, i) for i in range(COUNT)]
        assert _values(client, "pipelined") == values


def test_acks_0_among_pipelined_produces(broker: RunningBroker) -> None:
    """acks=0 requests have no response; those around them are answered in order, and
    every record is appended in the order sent."""
    broker.create_topic("quiet", 1)
    values = [f"q{i}".encode() for i in range(COUNT)]
    frames = [
        _produce_frame("quiet", i, v, acks=0 if i % 3 == 1 else 1) for i, v in enumerate(values)
    ]
    with broker.wire() as client:
        client.send_raw(b"".join(frames))
        answered = [i for i in range(COUNT) if i % 3 != 1]
        assert _answers(client, len(answered)) == [(i, i) for i in answered]
        assert _values(client, "quiet") == values


def test_a_bad_frame_after_pipelined_produces_closes_after_their_responses(
    broker: RunningBroker,
) -> None:
    broker.create_topic("before-close", 1)
    count = RESPONSES_PER_PASS + 3
    bad_header = b"\x00\x00\x00\x02\x00\x00"  # a two-byte frame: no room for a header
    with broker.wire() as client:
        client.send_raw(
            b"".join(_produce_frame("before-close", i, b"x") for i in range(count)) + bad_header
        )
        assert _answers(client, count) == [(i, i) for i in range(count)]
        try:
            client.read_frame()
        except ConnectionError:
            pass
        else:
            raise AssertionError("the connection stayed open after an invalid request header")
    with broker.wire() as client:
        assert len(_values(client, "before-close")) == count
