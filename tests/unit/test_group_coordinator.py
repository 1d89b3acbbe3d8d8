"""GroupCoordinator driven directly (real SystemTimer, short timeouts), and GroupApis over
every kio version through a real RequestContext."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from kplane.broker.config.endpoint import SecurityProtocol
from kplane.broker.group.classic_group import (
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
    JoinGroupResult,
)
from kplane.broker.group.classic_protocol import MemberIdentity
from kplane.broker.group.coordinator import GroupCoordinator
from kplane.broker.group.group import OffsetAndMetadata, TopicPartition
from kplane.broker.group.group_config import GroupConfig
from kplane.broker.network.request_channel import Request, Response
from kplane.broker.server.context import RequestContext
from kplane.broker.server.group_apis import GroupApis
from kplane.broker.utils.timer import SystemTimer
from kplane.protocol import api
from kplane.protocol.errors import ErrorCode
from kplane.protocol.framing import RequestHeader

TOPICS = {"t": 6, "u": 2}
WAIT = 5.0
PROTOCOLS = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]


def partition_exists(topic: str, partition: int) -> bool:
    return 0 <= partition < TOPICS.get(topic, 0)


@pytest.fixture
def timer() -> Iterator[SystemTimer]:
    t = SystemTimer("test-group-timer")
    yield t
    t.shutdown()


def coordinator(timer: SystemTimer, **overrides: Any) -> GroupCoordinator:
    values: dict[str, Any] = {
        "initial_rebalance_delay_ms": 0,
        "min_session_timeout_ms": 10,
        "max_session_timeout_ms": 60_000,
        "max_size": 100,
        "offsets_retention_ms": 60_000,
    }
    values.update(overrides)
    return GroupCoordinator(GroupConfig(**values), timer, partition_exists)


@pytest.fixture
def coord(timer: SystemTimer) -> Iterator[GroupCoordinator]:
    c = coordinator(timer)
    yield c
    c.shutdown()


def call(fn: Callable[..., None], *args: Any, **kwargs: Any) -> Future[Any]:
    fut: Future[Any] = Future()
    fn(*args, callback=fut.set_result, **kwargs)
    return fut


def join(
    coord: GroupCoordinator,
    group: str,
    member_id: str = "",
    *,
    instance: str | None = None,
    client: str = "client",
    session_ms: int = 10_000,
    rebalance_ms: int = 5_000,
    protocol_type: str = "consumer",
    protocols: list[tuple[str, bytes]] | None = None,
    require_known: bool = False,
) -> Future[JoinGroupResult]:
    return call(
        coord.classic.join_group,
        group,
        member_id,
        instance,
        client,
        "/127.0.0.1",
        rebalance_ms,
        session_ms,
        protocol_type,
        PROTOCOLS if protocols is None else protocols,
        require_known_member_id=require_known,
    )


def sync(
    coord: GroupCoordinator,
    group: str,
    generation: int,
    member_id: str,
    assignments: dict[str, bytes] | None = None,
    instance: str | None = None,
) -> Future[Any]:
    return call(
        coord.classic.sync_group,
        group,
        generation,
        member_id,
        instance,
        None,
        None,
        assignments or {},
    )


def heartbeat(
    coord: GroupCoordinator,
    group: str,
    member_id: str,
    generation: int,
    instance: str | None = None,
) -> ErrorCode:
    return call(coord.classic.heartbeat, group, member_id, instance, generation).result(WAIT)


def describe(coord: GroupCoordinator, group: str) -> Any:
    return call(coord.describe_groups, [group]).result(WAIT)[0]


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def stable_group(
    coord: GroupCoordinator, group: str, n: int, **join_kwargs: Any
) -> tuple[int, list[str], str]:
    """Join n members at once (initial delay must cover them) and sync: (gen, ids, leader)."""
    futures = [join(coord, group, client=f"c{i}", **join_kwargs) for i in range(n)]
    results = [f.result(WAIT) for f in futures]
    assert all(r.error is ErrorCode.none for r in results)
    generation = results[0].generation_id
    leader = results[0].leader_id
    ids = [r.member_id for r in results]
    assignments = {m: f"assign-{m}".encode() for m in ids}
    syncs = [sync(coord, group, generation, m, assignments if m == leader else None) for m in ids]
    for m, s in zip(ids, syncs, strict=True):
        assert s.result(WAIT).assignment == assignments[m]
    return generation, ids, leader


# -- join / sync ---------------------------------------------------------------------------


def test_member_id_required_then_join(coord: GroupCoordinator) -> None:
    first = join(coord, "g", client="my-client", require_known=True).result(WAIT)
    assert first.error is ErrorCode.member_id_required
    assert first.member_id.startswith("my-client-")
    assert len(first.member_id) == len("my-client-") + 36

    second = join(coord, "g", first.member_id, require_known=True).result(WAIT)
    assert second.error is ErrorCode.none
    assert second.member_id == first.member_id
    assert second.generation_id == 1
    assert second.leader_id == first.member_id
    assert second.protocol_type == "consumer"
    assert second.protocol_name == "range"
    assert [m.member_id for m in second.members] == [first.member_id]
    assert second.members[0].metadata == b"range-meta"


def test_single_member_join_sync_heartbeat(coord: GroupCoordinator) -> None:
    r = join(coord, "g").result(WAIT)
    assert (r.error, r.generation_id, r.leader_id) == (ErrorCode.none, 1, r.member_id)
    assert describe(coord, "g").state == "CompletingRebalance"
    assert heartbeat(coord, "g", r.member_id, 1) is ErrorCode.none

    s = sync(coord, "g", 1, r.member_id, {r.member_id: b"mine"}).result(WAIT)
    assert (s.error, s.assignment, s.protocol_type, s.protocol_name) == (
        ErrorCode.none,
        b"mine",
        "consumer",
        "range",
    )
    d = describe(coord, "g")
    assert (d.state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.client_id, m.metadata, m.assignment) for m in d.members] == [
        (r.member_id, "client", b"range-meta", b"mine")
    ]
    assert heartbeat(coord, "g", r.member_id, 1) is ErrorCode.none
    # A follower-style rejoin of the only (leader) member forces a new generation.
    again = join(coord, "g", r.member_id).result(WAIT)
    assert again.generation_id == 2


def test_three_members_join_and_sync(timer: SystemTimer) -> None:
    coord = coordinator(timer, initial_rebalance_delay_ms=300)
    try:
        futures = [join(coord, "g", client=f"c{i}") for i in range(3)]
        results = [f.result(WAIT) for f in futures]
        assert {r.error for r in results} == {ErrorCode.none}
        assert {r.generation_id for r in results} == {1}
        leader = results[0].leader_id
        ids = [r.member_id for r in results]
        assert leader in ids and len(set(ids)) == 3
        for r in results:
            expected = set(ids) if r.member_id == leader else set()
            assert {m.member_id for m in r.members} == expected

        # Followers sync first and wait for the leader's assignment.
        followers = [m for m in ids if m != leader]
        parked = {m: sync(coord, "g", 1, m) for m in followers}
        time.sleep(0.05)
        assert not any(f.done() for f in parked.values())
        assignments = {m: m.encode() for m in ids}
        mine = sync(coord, "g", 1, leader, assignments).result(WAIT)
        assert mine.assignment == leader.encode()
        for m, f in parked.items():
            assert f.result(WAIT).assignment == m.encode()
        assert describe(coord, "g").state == "Stable"
        for m in ids:
            assert heartbeat(coord, "g", m, 1) is ErrorCode.none
    finally:
        coord.shutdown()


def test_protocol_selection_by_vote() -> None:
    group = ClassicGroup("g")

    def member(mid: str, names: list[str]) -> ClassicGroupMember:
        return ClassicGroupMember(
            mid, None, "c", "h", 1000, 1000, "consumer", [(n, b"") for n in names]
        )

    group.add(member("a", ["range", "roundrobin"]))
    group.add(member("b", ["roundrobin", "range"]))
    group.add(member("c", ["roundrobin", "range", "sticky"]))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "roundrobin"
    group.remove("c")
    group.add(member("d", ["range", "sticky"]))
    assert group.select_protocol() == "range"  # only protocol all support
    assert group.supports_protocols("other", ["x"])  # an Empty group takes anything
    group.state = ClassicGroupState.STABLE
    assert group.supports_protocols("consumer", ["range", "x"])
    assert not group.supports_protocols("consumer", ["sticky"])
    assert not group.supports_protocols("other", ["range"])


def test_join_errors(timer: SystemTimer) -> None:
    coord = coordinator(
        timer, max_size=2, min_session_timeout_ms=100, initial_rebalance_delay_ms=300
    )
    try:
        bad = join(coord, "g", session_ms=50).result(WAIT)
        assert bad.error is ErrorCode.invalid_session_timeout
        assert join(coord, "", session_ms=1000).result(WAIT).error is ErrorCode.invalid_group_id
        assert join(coord, "nope", "some-id").result(WAIT).error is ErrorCode.unknown_member_id

        stable_group(coord, "h", 1, session_ms=10_000)
        wrong_type = join(coord, "h", protocol_type="connect").result(WAIT)
        assert wrong_type.error is ErrorCode.inconsistent_group_protocol
        wrong_protocols = join(coord, "h", protocols=[("sticky", b"")]).result(WAIT)
        assert wrong_protocols.error is ErrorCode.inconsistent_group_protocol
        assert describe(coord, "h").state == "Stable"

        stable_group(coord, "g", 2, session_ms=10_000)
        full = join(coord, "g").result(WAIT)
        assert full.error is ErrorCode.group_max_size_reached
        assert describe(coord, "g").state == "Stable"
    finally:
        coord.shutdown()


def test_illegal_generation_and_unknown_member(coord: GroupCoordinator) -> None:
    generation, (member,), _ = stable_group(coord, "g", 1)
    assert heartbeat(coord, "g", member, generation + 1) is ErrorCode.illegal_generation
    assert heartbeat(coord, "g", "ghost", generation) is ErrorCode.unknown_member_id
    assert heartbeat(coord, "other", member, generation) is ErrorCode.unknown_member_id
    s = sync(coord, "g", generation - 1, member).result(WAIT)
    assert s.error is ErrorCode.illegal_generation
    assert sync(coord, "g", generation, "ghost").result(WAIT).error is ErrorCode.unknown_member_id
    tp = TopicPartition("t", 0)
    errors = call(
        coord.commit_offsets, "g", member, None, generation + 5, {tp: OffsetAndMetadata(1)}
    ).result(WAIT)
    assert errors == {tp: ErrorCode.illegal_generation}


# -- rebalances ------------------------------------------------------------------------------


def test_rebalance_when_member_leaves(timer: SystemTimer) -> None:
    coord = coordinator(timer, initial_rebalance_delay_ms=300)
    try:
        generation, ids, leader = stable_group(coord, "g", 3)
        leaving = next(m for m in ids if m != leader)
        result = call(coord.classic.leave_group, "g", [MemberIdentity(leaving)]).result(WAIT)
        assert result.error is ErrorCode.none
        assert [m.error for m in result.members] == [ErrorCode.none]
        assert describe(coord, "g").state == "PreparingRebalance"

        rest = [m for m in ids if m != leaving]
        for m in rest:
            assert heartbeat(coord, "g", m, generation) is ErrorCode.rebalance_in_progress
        assert heartbeat(coord, "g", leaving, generation) is ErrorCode.unknown_member_id
        rejoins = [join(coord, "g", m) for m in rest]
        results = [f.result(WAIT) for f in rejoins]
        assert {r.generation_id for r in results} == {generation + 1}
        new_leader = results[0].leader_id
        assert new_leader in rest
        leader_result = next(r for r in results if r.member_id == new_leader)
        assert {m.member_id for m in leader_result.members} == set(rest)

        again = call(coord.classic.leave_group, "g", [MemberIdentity(leaving)]).result(WAIT)
        assert [m.error for m in again.members] == [ErrorCode.unknown_member_id]
    finally:
        coord.shutdown()


def test_session_expiry_rebalances_survivor(timer: SystemTimer) -> None:
    coord = coordinator(timer, initial_rebalance_delay_ms=300)
    try:
        futures = [join(coord, "g", client="alive", session_ms=5_000)]
        futures.append(join(coord, "g", client="silent", session_ms=200))
        alive, silent = (f.result(WAIT) for f in futures)
        leader = alive.leader_id
        assignments = {alive.member_id: b"a", silent.member_id: b"s"}
        syncs = [
            sync(coord, "g", 1, m, assignments if m == leader else None)
            for m in (alive.member_id, silent.member_id)
        ]
        for s in syncs:
            assert s.result(WAIT).error is ErrorCode.none

        # Only one member heartbeats; the other's session expires.
        def rebalancing() -> bool:
            return heartbeat(coord, "g", alive.member_id, 1) is ErrorCode.rebalance_in_progress

        wait_until(rebalancing)
        rejoined = join(coord, "g", alive.member_id, session_ms=5_000).result(WAIT)
        assert rejoined.error is ErrorCode.none
        assert rejoined.generation_id == 2
        assert [m.member_id for m in rejoined.members] == [alive.member_id]
        assert heartbeat(coord, "g", silent.member_id, 1) is ErrorCode.unknown_member_id
    finally:
        coord.shutdown()


def test_session_expiry_empties_group(coord: GroupCoordinator) -> None:
    r = join(coord, "g", session_ms=150).result(WAIT)
    assert sync(coord, "g", 1, r.member_id, {r.member_id: b"x"}).result(WAIT).error is (
        ErrorCode.none
    )
    wait_until(lambda: describe(coord, "g").state == "Empty")
    d = describe(coord, "g")
    assert d.members == ()
    assert heartbeat(coord, "g", r.member_id, 1) is ErrorCode.unknown_member_id


def test_new_member_rejoin_waits_for_known_members(timer: SystemTimer) -> None:
    coord = coordinator(timer, initial_rebalance_delay_ms=0)
    try:
        generation, (first,), _ = stable_group(coord, "g", 1, rebalance_ms=2_000)
        newcomer = join(coord, "g", client="new", rebalance_ms=2_000)
        time.sleep(0.05)
        assert not newcomer.done()  # parked until the known member rejoins
        assert heartbeat(coord, "g", first, generation) is ErrorCode.rebalance_in_progress
        mine = join(coord, "g", first, rebalance_ms=2_000).result(WAIT)
        theirs = newcomer.result(WAIT)
        assert mine.generation_id == theirs.generation_id == generation + 1
        assert mine.leader_id == first
        assert len(mine.members) == 2 and theirs.members == ()
    finally:
        coord.shutdown()


def test_member_that_does_not_rejoin_is_dropped(timer: SystemTimer) -> None:
    coord = coordinator(timer, initial_rebalance_delay_ms=300)
    try:
        _, ids, _ = stable_group(coord, "g", 2, rebalance_ms=300, session_ms=10_000)
        # The first member rejoins; the other never does and is dropped at the rebalance
        # timeout even though its session is still alive.
        r = join(coord, "g", ids[0], rebalance_ms=300, session_ms=10_000).result(WAIT)
        assert r.error is ErrorCode.none
        assert [m.member_id for m in r.members] == [ids[0]]
        assert heartbeat(coord, "g", ids[1], r.generation_id) is ErrorCode.unknown_member_id
    finally:
        coord.shutdown()


def test_static_member_rejoin_keeps_generation_and_assignment(timer: SystemTimer) -> None:
    coord = coordinator(timer, initial_rebalance_delay_ms=300)
    try:
        f1 = join(coord, "g", instance="i-1", client="static", require_known=True)
        f2 = join(coord, "g", instance="i-2", client="static2", require_known=True)
        r1, r2 = f1.result(WAIT), f2.result(WAIT)
        assert r1.error is r2.error is ErrorCode.none  # static members skip MEMBER_ID_REQUIRED
        assert r1.member_id.startswith("i-1-")
        assert {
            (m.member_id, m.group_instance_id)
            for m in next(r for r in (r1, r2) if r.member_id == r1.leader_id).members
        } == {(r1.member_id, "i-1"), (r2.member_id, "i-2")}
        leader = r1.leader_id
        assignments = {r1.member_id: b"one", r2.member_id: b"two"}
        for r in (r1, r2):
            s = sync(coord, "g", 1, r.member_id, assignments if r.member_id == leader else None)
            assert s.result(WAIT).error is ErrorCode.none

        # i-2 restarts: unknown member id, same instance id.
        again = join(coord, "g", instance="i-2", client="static2", require_known=True).result(WAIT)
        assert again.error is ErrorCode.none
        assert again.member_id != r2.member_id
        assert again.generation_id == 1  # no rebalance
        assert again.leader_id == leader
        assert describe(coord, "g").state == "Stable"
        s = sync(coord, "g", 1, again.member_id, instance="i-2").result(WAIT)
        assert (s.error, s.assignment) == (ErrorCode.none, b"two")
        # The old member id is fenced.
        assert heartbeat(coord, "g", r2.member_id, 1, "i-2") is ErrorCode.fenced_instance_id
        assert heartbeat(coord, "g", r2.member_id, 1) is ErrorCode.unknown_member_id
        assert heartbeat(coord, "g", again.member_id, 1, "i-2") is ErrorCode.none

        # Leaving by instance id alone (what admin tools do).
        left = call(coord.classic.leave_group, "g", [MemberIdentity("", "i-2")]).result(WAIT)
        assert [m.error for m in left.members] == [ErrorCode.none]
        assert describe(coord, "g").state == "PreparingRebalance"
    finally:
        coord.shutdown()


# -- offsets and admin -------------------------------------------------------------------------


def test_offset_commit_and_fetch(coord: GroupCoordinator) -> None:
    t0, t1, u1 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 1)
    missing = TopicPartition("nope", 0)
    errors = call(
        coord.commit_offsets,
        "simple",
        "",
        None,
        -1,
        {
            t0: OffsetAndMetadata(10, 3, "meta"),
            u1: OffsetAndMetadata(20),
            missing: OffsetAndMetadata(1),
            TopicPartition("t", 99): OffsetAndMetadata(1),
        },
    ).result(WAIT)
    assert errors == {
        t0: ErrorCode.none,
        u1: ErrorCode.none,
        missing: ErrorCode.unknown_topic_or_partition,
        TopicPartition("t", 99): ErrorCode.unknown_topic_or_partition,
    }
    fetched = call(coord.fetch_offsets, "simple", [t0, t1]).result(WAIT)
    assert fetched.error is ErrorCode.none
    assert (fetched.partitions[t0].offset, fetched.partitions[t0].leader_epoch) == (10, 3)
    assert fetched.partitions[t0].metadata == "meta"
    assert fetched.partitions[t1].offset == -1
    everything = call(coord.fetch_offsets, "simple", None).result(WAIT)
    assert {tp: p.offset for tp, p in everything.partitions.items()} == {t0: 10, u1: 20}
    unknown = call(coord.fetch_offsets, "unknown-group", [t0]).result(WAIT)
    assert unknown.partitions[t0].offset == -1
    assert call(coord.fetch_offsets, "unknown-group", None).result(WAIT).partitions == {}
    assert describe(coord, "simple").state == "Empty"

    # A group with members: only members of the current generation commit.
    generation, (member,), _ = stable_group(coord, "g", 1)
    ok = call(
        coord.commit_offsets, "g", member, None, generation, {t0: OffsetAndMetadata(5)}
    ).result(WAIT)
    assert ok == {t0: ErrorCode.none}
    simple = call(coord.commit_offsets, "g", "", None, -1, {t0: OffsetAndMetadata(6)}).result(WAIT)
    assert simple == {t0: ErrorCode.unknown_member_id}
    stranger = call(
        coord.commit_offsets, "g", "ghost", None, generation, {t0: OffsetAndMetadata(6)}
    ).result(WAIT)
    assert stranger == {t0: ErrorCode.unknown_member_id}
    assert call(coord.fetch_offsets, "g", [t0]).result(WAIT).partitions[t0].offset == 5


def test_commit_during_completing_rebalance(coord: GroupCoordinator) -> None:
    r = join(coord, "g").result(WAIT)
    tp = TopicPartition("t", 0)
    errors = call(
        coord.commit_offsets, "g", r.member_id, None, 1, {tp: OffsetAndMetadata(1)}
    ).result(WAIT)
    assert errors == {tp: ErrorCode.rebalance_in_progress}


def test_delete_groups_and_offsets(coord: GroupCoordinator) -> None:
    tp = TopicPartition("t", 0)
    call(coord.commit_offsets, "empty", "", None, -1, {tp: OffsetAndMetadata(1)}).result(WAIT)
    stable_group(coord, "busy", 1)
    result = call(coord.delete_groups, ["missing", "busy", "empty"]).result(WAIT)
    assert result == {
        "missing": ErrorCode.group_id_not_found,
        "busy": ErrorCode.non_empty_group,
        "empty": ErrorCode.none,
    }
    assert call(coord.fetch_offsets, "empty", [tp]).result(WAIT).partitions[tp].offset == -1
    assert describe(coord, "empty").state == "Dead"
    assert call(coord.delete_groups, ["empty"]).result(WAIT) == {
        "empty": ErrorCode.group_id_not_found
    }

    call(coord.commit_offsets, "e2", "", None, -1, {tp: OffsetAndMetadata(1)}).result(WAIT)
    deleted = call(coord.delete_offsets, "e2", [tp, TopicPartition("zz", 0)]).result(WAIT)
    assert deleted.error is ErrorCode.none
    assert deleted.partitions == {
        tp: ErrorCode.none,
        TopicPartition("zz", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert call(coord.delete_offsets, "nope", [tp]).result(WAIT).error is (
        ErrorCode.group_id_not_found
    )


def test_list_and_describe(coord: GroupCoordinator) -> None:
    stable_group(coord, "g1", 1)
    call(
        coord.commit_offsets, "g2", "", None, -1, {TopicPartition("t", 0): OffsetAndMetadata(1)}
    ).result(WAIT)
    groups = call(coord.list_groups).result(WAIT)
    assert {(g.group_id, g.protocol_type, g.state) for g in groups} == {
        ("g1", "consumer", "Stable"),
        ("g2", "", "Empty"),
    }
    only_stable = call(coord.list_groups, states_filter=["stable"]).result(WAIT)
    assert [g.group_id for g in only_stable] == ["g1"]
    assert call(coord.list_groups, types_filter=["consumer"]).result(WAIT) == []
    d = describe(coord, "unknown")
    assert (d.state, d.members, d.error) == ("Dead", (), ErrorCode.none)


def test_offsets_expire_for_empty_groups(coord: GroupCoordinator) -> None:
    tp = TopicPartition("t", 0)
    call(coord.commit_offsets, "g", "", None, -1, {tp: OffsetAndMetadata(1)}).result(WAIT)
    assert coord.expire_offsets() == 0
    later = int(time.time() * 1000) + coord.config.offsets_retention_ms + 1
    assert coord.expire_offsets(now=later) == 1
    assert "g" not in coord.group_ids()


# -- GroupApis over every version, through a real RequestContext -----------------------------


class _Channel:
    throttler = None  # no client quotas

    def __init__(self) -> None:
        self.responses: list[Response] = []
        self.event = threading.Event()

    def send_response(self, response: Response) -> None:
        self.responses.append(response)
        self.event.set()


def _request(key: int, version: int, **values: Any) -> Any:
    module = api.request_module(key, version)

    def build(value: Any) -> Any:
        if isinstance(value, tuple) and value and isinstance(value[0], str) and len(value) == 2:
            name, fields = value
            if isinstance(fields, dict) and hasattr(module, name):
                return api.make(getattr(module, name), **{k: build(v) for k, v in fields.items()})
        if isinstance(value, list):
            return tuple(build(v) for v in value)
        return value

    body = api.make(api.request_class(key, version), **{k: build(v) for k, v in values.items()})
    return api.decode_request(key, version, api.encode(body))  # wire round trip


def _call_api(apis: GroupApis, key: int, version: int, **values: Any) -> Any:
    channel = _Channel()
    header = RequestHeader(key, version, 7, "api-client", 0)
    request = Request(
        processor=None,  # type: ignore[arg-type]
        connection_id="conn",
        listener_name="PLAINTEXT",
        security_protocol=SecurityProtocol.PLAINTEXT,
        principal="User:ANONYMOUS",
        client_host="127.0.0.1",
        client_port=4242,
        header=header,
        frame=b"",
    )
    ctx = RequestContext(request, _request(key, version, **values), channel)  # type: ignore[arg-type]
    apis.handlers()[key](ctx)
    assert channel.event.wait(WAIT)
    pieces = channel.responses[0].pieces
    assert pieces is not None
    return api.decode_response(key, version, b"".join(pieces[1:]))


def _td(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


@pytest.mark.parametrize("version", list(api.kio_versions(11)))
def test_api_join_sync_heartbeat_leave_all_versions(coord: GroupCoordinator, version: int) -> None:
    apis = GroupApis(coord)
    protocols = [("JoinGroupRequestProtocol", {"name": "range", "metadata": b"m"})]
    join_values = {
        "group_id": "g",
        "session_timeout": _td(10_000),
        "rebalance_timeout": _td(5_000),
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": protocols,
        "reason": "test",
    }
    resp = _call_api(apis, 11, version, **join_values)
    if version >= 4:
        assert resp.error_code is ErrorCode.member_id_required
        join_values["member_id"] = resp.member_id
        resp = _call_api(apis, 11, version, **join_values)
    assert resp.error_code is ErrorCode.none
    member = resp.member_id
    assert member.startswith("api-client-")
    assert (resp.generation_id, resp.leader, resp.protocol_name) == (1, member, "range")
    assert [m.member_id for m in resp.members] == [member]

    sync_version = min(version, max(api.kio_versions(14)))
    s = _call_api(
        apis,
        14,
        sync_version,
        group_id="g",
        generation_id=1,
        member_id=member,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[("SyncGroupRequestAssignment", {"member_id": member, "assignment": b"a"})],
    )
    assert (s.error_code, s.assignment) == (ErrorCode.none, b"a")

    hb_version = min(version, max(api.kio_versions(12)))
    hb = _call_api(apis, 12, hb_version, group_id="g", generation_id=1, member_id=member)
    assert hb.error_code is ErrorCode.none
    hb = _call_api(apis, 12, hb_version, group_id="g", generation_id=9, member_id=member)
    assert hb.error_code is ErrorCode.illegal_generation

    described = _call_api(
        apis, 15, min(version, 6), groups=["g"], include_authorized_operations=True
    )
    (group,) = described.groups
    assert (group.group_state, group.protocol_data) == ("Stable", "range")
    assert group.members[0].client_host == "/127.0.0.1"
    assert group.members[0].member_assignment == b"a"

    leave_version = min(version, max(api.kio_versions(13)))
    left = _call_api(
        apis,
        13,
        leave_version,
        group_id="g",
        member_id=member,
        members=[("MemberIdentity", {"member_id": member})],
    )
    assert left.error_code is ErrorCode.none
    left = _call_api(
        apis,
        13,
        leave_version,
        group_id="g",
        member_id=member,
        members=[("MemberIdentity", {"member_id": member})],
    )
    if leave_version >= 3:
        assert [m.error_code for m in left.members] == [ErrorCode.unknown_member_id]
    else:
        assert left.error_code is ErrorCode.unknown_member_id


@pytest.mark.parametrize("version", list(api.kio_versions(8)))
def test_api_offset_commit_fetch_all_versions(coord: GroupCoordinator, version: int) -> None:
    import uuid

    topic_id = uuid.UUID(int=42)
    apis = GroupApis(
        coord,
        topic_name_of=lambda i: "t" if i == topic_id else None,
        topic_id_of=lambda n: topic_id if n == "t" else None,
    )
    partitions = [
        ("OffsetCommitRequestPartition", {"partition_index": 0, "committed_offset": 11}),
        ("OffsetCommitRequestPartition", {"partition_index": 99, "committed_offset": 1}),
    ]
    commit = _call_api(
        apis,
        8,
        version,
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            (
                "OffsetCommitRequestTopic",
                {"name": "t", "topic_id": topic_id, "partitions": partitions},
            )
        ],
    )
    (topic,) = commit.topics
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
        (0, ErrorCode.none),
        (99, ErrorCode.unknown_topic_or_partition),
    ]

    fetch_version = min(version, max(api.kio_versions(9)))
    topics = [
        (
            "OffsetFetchRequestTopic" if fetch_version < 8 else "OffsetFetchRequestTopics",
            {"name": "t", "topic_id": topic_id, "partition_indexes": [0, 1]},
        )
    ]
    groups = [("OffsetFetchRequestGroup", {"group_id": "g", "topics": topics})]
    fetched = _call_api(apis, 9, fetch_version, group_id="g", topics=topics, groups=groups)
    group_topics = fetched.groups[0].topics if fetch_version >= 8 else fetched.topics
    (t,) = group_topics
    assert [(p.partition_index, p.committed_offset) for p in t.partitions] == [(0, 11), (1, -1)]
    if fetch_version >= 2:
        every = _call_api(
            apis,
            9,
            fetch_version,
            group_id="g",
            topics=None,
            groups=[("OffsetFetchRequestGroup", {"group_id": "g", "topics": None})],
        )
        every_topics = every.groups[0].topics if fetch_version >= 8 else every.topics
        assert [[p.committed_offset for p in t.partitions] for t in every_topics] == [[11]]


@pytest.mark.parametrize("version", range(6))
def test_api_admin_all_versions(coord: GroupCoordinator, version: int) -> None:
    apis = GroupApis(coord)
    call(
        coord.commit_offsets, "g", "", None, -1, {TopicPartition("t", 0): OffsetAndMetadata(1)}
    ).result(WAIT)
    listed = _call_api(apis, 16, min(version, max(api.kio_versions(16))))
    assert [g.group_id for g in listed.groups] == ["g"]
    if version == 0:
        od = _call_api(
            apis,
            47,
            0,
            group_id="g",
            topics=[
                (
                    "OffsetDeleteRequestTopic",
                    {
                        "name": "t",
                        "partitions": [("OffsetDeleteRequestPartition", {"partition_index": 0})],
                    },
                )
            ],
        )
        assert od.error_code is ErrorCode.none
        assert od.topics[0].partitions[0].error_code is ErrorCode.none
    delete_version = min(version, max(api.kio_versions(42)))
    deleted = _call_api(apis, 42, delete_version, groups_names=["g", "missing"])
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("g", ErrorCode.none),
        ("missing", ErrorCode.group_id_not_found),
    ]
