"""ShareFetch answers with the stored batches as Fetch does: ShareFetchApis over a real
SharePartitionManager, ReplicaManager and log (in memory, and on segment files), its
answer's pieces looked at and decoded with kio. The records are the log's batches byte for
byte, handed out as the log's own memory or file regions (no copy), and the acquired
ranges are exact."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kio.schema.share_fetch.v1.request import FetchPartition, FetchTopic, ShareFetchRequest

from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.group.group_configs import GroupConfigManager
from kplane.broker.group.share_config import ShareGroupConfig
from kplane.broker.log.log_config import LogSettings
from kplane.broker.log.log_manager import LogManager, LogManagerConfig
from kplane.broker.log.partition import ReplicaAssignment, TopicPartition
from kplane.broker.network.request_channel import Request, Response
from kplane.broker.server.context import RequestContext
from kplane.broker.server.produce_apis import ProduceApis
from kplane.broker.server.replica_manager import ReplicaManager, ReplicaState
from kplane.broker.server.share_fetch_apis import ShareFetchApis
from kplane.broker.share.share_partition_manager import SharePartitionManager
from kplane.broker.share.share_session import ShareSessionCache
from kplane.broker.share.share_state_store import ShareStateStore
from kplane.broker.utils.file_region import FileRegion, Transferable, materialize
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import encode_request_frame, parse_request_header
from kplane.protocol.records import scan_batches
from tests.unit.leader import TOPIC, Answers, Broker, batch

SHARE_FETCH, VERSION = 78, 1
TP = TopicPartition(TOPIC, 0)


class _Connection:
    """The network side a share session is tied to: its close hooks are kept."""

    def __init__(self) -> None:
        self.on_close: list[Callable[[], object]] = []

    def on_connection_close(self, connection_id: str, callback: Callable[[], object]) -> None:
        self.on_close.append(callback)


def _file_logs(broker: Broker, log_dir: Path) -> None:
    """``broker`` leading ``t-0`` and ``t-1`` on segment files under ``log_dir``."""
    broker.logs = LogManager(
        LogManagerConfig(storage="file", log_dirs=(str(log_dir),)), lambda _t: LogSettings()
    )
    broker.logs.startup()
    broker.replicas = ReplicaManager(
        0, broker.logs, broker.cache, broker.fetch_purgatory, broker.log_configs, broker.purgatory
    )
    assignment = ReplicaAssignment(0, 0, 0, (0,), (0,))
    broker.replicas.become_leader_or_follower(
        1, [ReplicaState(TopicPartition(TOPIC, p), assignment) for p in (0, 1)]
    )
    broker.apis = ProduceApis(broker.replicas, broker.cache, broker.purgatory)


@pytest.fixture(params=["memory", "file"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    b = Broker()
    if request.param == "file":
        _file_logs(b, tmp_path)
    yield b
    if request.param == "file":
        b.logs.shutdown()
    b.close()


def share_fetch_apis(broker: Broker) -> ShareFetchApis:
    manager = SharePartitionManager(
        broker.replicas,
        ShareGroupConfig(),
        GroupConfigManager(
            lambda: broker.config, lambda _g: {"share.auto.offset.reset": "earliest"}
        ),
        ShareStateStore(broker.store),
    )
    return ShareFetchApis(manager, ShareSessionCache(), broker.cache, broker.fetch_purgatory)


def share_fetch(
    broker: Broker, apis: ShareFetchApis, member: str, epoch: int, max_records: int
) -> Response:
    """One ShareFetch of ``t-0`` for ``member``, as bytes through the handler; its answer."""
    body = api.make(
        ShareFetchRequest,
        group_id="g",
        member_id=member,
        share_session_epoch=epoch,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=max_records,
        batch_size=max_records,
        topics=(
            api.make(
                FetchTopic,
                topic_id=broker.topic_id,
                partitions=(api.make(FetchPartition, partition_index=0),),
            ),
        ),
        forgotten_topics_data=(),
    )
    frame = encode_request_frame(SHARE_FETCH, VERSION, 7, "test", api.encode(body))[4:]
    header = parse_request_header(frame)
    request = Request(
        processor=cast(Any, _Connection()),
        connection_id=f"c-{member}",
        listener_name="PLAINTEXT",
        security_protocol=SecurityProtocol.PLAINTEXT,
        principal="User:ANONYMOUS",
        client_host="127.0.0.1",
        client_port=1,
        header=header,
        frame=frame,
    )
    answers = Answers()
    decoded = api.read_request(SHARE_FETCH, VERSION, frame, header.body_offset)
    apis.handle_fetch(RequestContext(request, decoded, cast(Any, answers)))
    (response,) = answers.responses
    return response


def log_read(broker: Broker) -> list[Transferable]:
    """What the partition's log hands out for a read of all of it."""
    partition = broker.logs.get(TP)
    assert partition is not None
    return partition.log.read(0, 1 << 30, True)


def stored(broker: Broker) -> list[bytes]:
    """The partition's batches as the log stores them, one bytes each."""
    data = b"".join(bytes(p) for p in materialize(log_read(broker)))
    return [data[h.position : h.position + h.size] for h in scan_batches(data)]


def owner(piece: Any) -> int:
    """The identity of the stored object a piece of memory is (or is a view of)."""
    return id(piece if isinstance(piece, bytes) else memoryview(piece).obj)


def body_pieces(response: Response) -> list[Any]:
    assert response.pieces is not None
    _prefix, *body = response.pieces
    return body


def decoded(response: Response) -> Any:
    body = b"".join(bytes(materialize([p])[0]) for p in body_pieces(response))
    answer = api.decode_response(SHARE_FETCH, VERSION, body)
    assert answer.error_code == ErrorCode.none
    ((part,),) = (t.partitions for t in answer.responses)
    assert part.error_code == ErrorCode.none
    return part


def test_the_records_are_the_stored_batches_byte_for_byte(broker: Broker) -> None:
    for values in ([b"a", b"b", b"c"], [b"d" * 3000], [b"e", b"f"], [b"g"]):
        assert broker.produce({0: batch(*values)}).pieces is not None
    batches = stored(broker)
    apis = share_fetch_apis(broker)
    # a first member takes the first two batches (max_records 4: whole batches)
    first = share_fetch(broker, apis, str(uuid.uuid4()), 0, 4)
    part = decoded(first)
    assert part.records == batches[0] + batches[1]
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records] == [
        (0, 3, 1)
    ]
    # a second member the rest: the third and fourth batches, cut out of the same read
    second = share_fetch(broker, apis, str(uuid.uuid4()), 0, 100)
    part = decoded(second)
    assert part.records == batches[2] + batches[3]
    assert [(a.first_offset, a.last_offset) for a in part.acquired_records] == [(4, 6)]
    # passed through as the log hands them out: the stored memory or the segment file
    log_pieces = log_read(broker)
    records = body_pieces(second)[1:-1]  # between the fields written before and after
    assert sum(len(p) for p in records) == len(batches[2]) + len(batches[3])
    if isinstance(log_pieces[0], FileRegion):
        assert all(isinstance(p, FileRegion) and p.file is log_pieces[0].file for p in records)
    else:  # each batch: its served prefix (stored bytes), then a view of the stored buffer
        owners = {owner(p) for p in log_pieces}
        assert all(owner(p) in owners for p in records)


def test_nothing_to_acquire_answers_no_records(broker: Broker) -> None:
    broker.produce({0: batch(b"a")})
    apis = share_fetch_apis(broker)
    member = str(uuid.uuid4())
    assert decoded(share_fetch(broker, apis, member, 0, 10)).records == b"".join(stored(broker))
    again = decoded(share_fetch(broker, apis, member, 1, 10))
    assert not again.records and again.acquired_records == ()


def test_headers_read_across_chunks_and_pieces(broker: Broker) -> None:
    """Small batches many to a read, large ones past it, in any order: every header found,
    the records exact."""
    sizes = [1, 9000, *([1] * 60), 5000, 1, 20000, *([2] * 30)]
    for i, size in enumerate(sizes):
        broker.produce({0: batch(bytes([i % 256]) * size)})
    batches = stored(broker)
    apis = share_fetch_apis(broker)
    first = decoded(share_fetch(broker, apis, str(uuid.uuid4()), 0, 40))
    assert first.records == b"".join(batches[:40])
    assert [(a.first_offset, a.last_offset) for a in first.acquired_records] == [(0, 39)]
    rest = decoded(share_fetch(broker, apis, str(uuid.uuid4()), 0, 1000))
    assert rest.records == b"".join(batches[40:])
    assert [(a.first_offset, a.last_offset) for a in rest.acquired_records] == [
        (40, len(sizes) - 1)
    ]
