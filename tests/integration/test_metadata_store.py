"""MetadataStore behaviour, the same tests against the embedded store and a real ZooKeeper.

ZooKeeper runs once per session (per xdist worker); each test gets a chroot of its own
(``zookeeper`` fixture). Select one implementation with ``-k embedded`` / ``-k zookeeper``.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from kplane.broker.metadata.kafka_store import (
    ControllerMovedError,
    KafkaMetadataClient,
    PartitionStateChangedError,
    PartitionStateRecord,
    TopicAssignment,
)
from kplane.broker.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EmbeddedMetadataStore,
    MetadataStore,
    MultiOpError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetDataOp,
    Stat,
)
from kplane.broker.metadata.zk_store import ZooKeeperMetadataStore, split_connect
from kplane.tools.zookeeper import ZooKeeperServer

WAIT = 20.0  # seconds to wait for a watcher called from kazoo's thread


class Backend:
    """Opens stores on one tree: embedded in a directory, or ZooKeeper under a chroot."""

    def __init__(self, kind: str, opener: Callable[[], MetadataStore]) -> None:
        self.kind = kind
        self._opener = opener
        self.opened: list[MetadataStore] = []

    def open(self) -> MetadataStore:
        store = self._opener()
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self.opened:
            store.close()


class Calls:
    """A watcher that records its calls and lets a test wait for the n-th one."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._cond = threading.Condition()

    def __call__(self, path: str) -> None:
        with self._cond:
            self.paths.append(path)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = WAIT) -> list[str]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.paths) >= count, timeout), (
                f"watcher called {len(self.paths)} times, expected {count}: {self.paths}"
            )
            return list(self.paths)


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def open_zk(connect: str) -> ZooKeeperMetadataStore:
    return ZooKeeperMetadataStore(connect, session_timeout_ms=6000, connection_timeout_ms=15000)


@pytest.fixture(params=["embedded", "zookeeper"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "embedded":
        result = Backend("embedded", lambda: EmbeddedMetadataStore(str(tmp_path)))
    else:
        connect: str = request.getfixturevalue("zookeeper")
        result = Backend("zookeeper", lambda: open_zk(connect))
    yield result
    result.close_all()


@pytest.fixture
def store(backend: Backend) -> MetadataStore:
    return backend.open()


# nodes ---------------------------------------------------------------------------------


def test_create_get_set_delete(store: MetadataStore) -> None:
    assert store.create("/a", b"one") == "/a"
    data, stat = store.get("/a")
    assert data == b"one"
    assert stat.version == 0
    assert not stat.ephemeral
    assert stat.ctime_ms > 0
    assert stat.mtime_ms == stat.ctime_ms

    stat = store.set("/a", b"two")
    assert stat.version == 1
    assert stat.mtime_ms >= stat.ctime_ms
    assert store.get("/a") == (b"two", stat)
    exists = store.exists("/a")
    assert exists is not None and exists.version == 1

    store.delete("/a")
    assert store.exists("/a") is None
    with pytest.raises(NoNodeError):
        store.get("/a")


def test_empty_data_and_sorted_children(store: MetadataStore) -> None:
    store.create("/p")
    for name in ["c", "a", "b"]:
        store.create(f"/p/{name}")
    assert store.get("/p")[0] == b""
    assert store.get_children("/p") == ["a", "b", "c"]


def test_makepath(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError):
        store.create("/x/y", b"")
    assert store.create("/a/b/c", b"deep", makepath=True) == "/a/b/c"
    assert store.get_children("/a") == ["b"]
    assert store.get_children("/a/b") == ["c"]
    assert store.get("/a/b/c")[0] == b"deep"
    assert store.get("/a/b")[0] == b""


def test_errors(store: MetadataStore) -> None:
    store.create("/n", b"1")
    store.create("/n/child")
    with pytest.raises(NodeExistsError):
        store.create("/n", b"again")
    with pytest.raises(NodeExistsError):
        store.create("/n/child", makepath=True)
    with pytest.raises(NoNodeError):
        store.set("/missing", b"")
    with pytest.raises(NoNodeError):
        store.delete("/missing")
    with pytest.raises(NoNodeError):
        store.get_children("/missing")
    with pytest.raises(NotEmptyError):
        store.delete("/n")
    with pytest.raises(BadVersionError):
        store.set("/n", b"2", version=5)
    assert store.set("/n", b"2", version=0).version == 1
    with pytest.raises(BadVersionError):
        store.set("/n", b"3", version=0)
    assert store.get("/n")[0] == b"2"


def test_versions(store: MetadataStore) -> None:
    store.create("/v")
    for expected in range(1, 4):
        assert store.set("/v", str(expected).encode()).version == expected
    assert store.get("/v")[1].cversion == 0
    store.create("/v/a")
    store.create("/v/b")
    store.delete("/v/a")
    assert store.get("/v")[1].cversion == 3
    assert store.get("/v")[1].version == 3


def test_sequential_nodes(store: MetadataStore) -> None:
    first = store.create("/seq/item-", b"0", makepath=True, sequential=True)
    store.create("/seq/plain")
    second = store.create("/seq/item-", b"1", sequential=True)
    third = store.create("/seq/item-", b"2", sequential=True)
    # ZooKeeper's counter is the parent's child-change count (cversion), ten digits
    assert [first, second, third] == [
        "/seq/item-0000000000",
        "/seq/item-0000000002",
        "/seq/item-0000000003",
    ]
    names = [n for n in store.get_children("/seq") if n.startswith("item-")]
    assert all(re.fullmatch(r"item-\d{10}", n) for n in names)
    assert names == sorted(names) and len(names) == 3
    assert store.get(third)[0] == b"2"


def test_set_or_create(store: MetadataStore) -> None:
    store.set_or_create("/config/topics/t", b"v1")
    assert store.get("/config/topics/t")[0] == b"v1"
    store.set_or_create("/config/topics/t", b"v2")
    data, stat = store.get("/config/topics/t")
    assert (data, stat.version) == (b"v2", 1)


def test_recursive_delete(store: MetadataStore) -> None:
    store.create("/r/a/b", b"", makepath=True)
    store.create("/r/c")
    store.create("/keep")
    with pytest.raises(NotEmptyError):
        store.delete("/r")
    store.delete("/r", recursive=True)
    assert store.exists("/r") is None
    assert store.exists("/keep") is not None
    with pytest.raises(NoNodeError):
        store.delete("/r", recursive=True)
    store.create("/leaf")
    store.delete("/leaf", recursive=True)
    assert store.exists("/leaf") is None


# ephemeral nodes -------------------------------------------------------------------------


def test_ephemeral_nodes_vanish_on_close(backend: Backend, store: MetadataStore) -> None:
    store.create("/brokers/ids", makepath=True)
    store.create("/brokers/ids/1", b"{}", ephemeral=True)
    store.create("/persistent", b"kept")
    stat = store.exists("/brokers/ids/1")
    assert stat is not None and stat.ephemeral
    if backend.kind == "embedded":
        store.close()
        assert store.exists("/brokers/ids/1") is None
        assert store.get("/persistent")[0] == b"kept"
        return
    other = backend.open()
    assert other.get("/brokers/ids/1")[0] == b"{}"
    assert other.get("/brokers/ids/1")[1].ephemeral
    store.close()
    wait_until(lambda: other.exists("/brokers/ids/1") is None)
    assert other.get("/persistent")[0] == b"kept"
    assert other.get_children("/brokers/ids") == []


# watches ---------------------------------------------------------------------------------


def test_child_watch_fires_on_every_later_change(store: MetadataStore) -> None:
    store.create("/w")
    store.create("/w/before")
    calls = Calls()
    store.watch_children("/w", calls)
    assert calls.paths == []  # not called for the state at registration

    store.create("/w/a")
    calls.wait_for(1)
    store.create("/w/b", ephemeral=True)
    calls.wait_for(2)
    store.delete("/w/a")
    calls.wait_for(3)
    store.set("/w", b"data is not a child change")
    store.create("/w/a/grandchild", makepath=True)  # creates /w/a: a change of /w's children
    assert calls.wait_for(4) == ["/w"] * 4
    store.create("/w/a/grandchild2")  # not a child of /w
    store.delete("/w/before")
    assert calls.wait_for(5) == ["/w"] * 5


def test_child_watch_on_missing_node(store: MetadataStore) -> None:
    calls = Calls()
    store.watch_children("/later", calls)
    store.create("/later/x", makepath=True)
    calls.wait_for(1)
    store.create("/later/y")
    assert calls.wait_for(2) == ["/later"] * 2


def test_data_watch_fires_on_every_later_change(store: MetadataStore) -> None:
    store.create("/d", b"0")
    calls = Calls()
    store.watch_data("/d", calls)
    assert calls.paths == []

    for n in range(1, 4):
        store.set("/d", str(n).encode())
        calls.wait_for(n)
    store.delete("/d")
    calls.wait_for(4)
    store.create("/d", b"again")
    calls.wait_for(5)
    store.create("/d/child")  # not a change of /d's data
    store.set("/d", b"last")
    assert calls.wait_for(6) == ["/d"] * 6


def test_data_watch_on_missing_node(store: MetadataStore) -> None:
    calls = Calls()
    store.watch_data("/controller", calls)
    store.create("/controller", b'{"brokerid":1}', ephemeral=True)
    calls.wait_for(1)
    store.set("/controller", b'{"brokerid":2}')
    calls.wait_for(2)
    store.delete("/controller")
    assert calls.wait_for(3) == ["/controller"] * 3


def test_several_watchers_on_one_path(store: MetadataStore) -> None:
    store.create("/m")
    first, second, data = Calls(), Calls(), Calls()
    store.watch_children("/m", first)
    store.watch_children("/m", second)
    store.watch_data("/m", data)
    store.create("/m/1")
    first.wait_for(1)
    second.wait_for(1)
    store.set("/m", b"x")
    assert data.wait_for(1) == ["/m"]


# multi -----------------------------------------------------------------------------------


def test_multi_applies_every_op_in_order(store: MetadataStore) -> None:
    store.create("/m", b"0")
    store.create("/m/old")
    results = store.multi(
        [
            CheckOp("/m", 0),
            CreateOp("/m/a", b"a"),
            SetDataOp("/m/a", b"a2", 0),  # an op sees the ones before it
            SetDataOp("/m", b"1"),
            CreateOp("/m/seq-", b"s", sequential=True),
            DeleteOp("/m/old", 0),
            CheckOp("/m"),  # any version
        ]
    )
    assert results[0] is None and results[1] == "/m/a" and results[4] == "/m/seq-0000000002"
    assert isinstance(results[2], Stat) and results[2].version == 1
    assert isinstance(results[3], Stat) and results[3].version == 1
    assert results[5:] == [None, None]
    assert store.get("/m/a")[0] == b"a2"
    assert store.get("/m")[0] == b"1"
    assert store.get_children("/m") == ["a", "seq-0000000002"]
    assert store.get("/m")[1].cversion == 4  # two creations, one deletion, before: one


@pytest.mark.parametrize(
    ("ops", "index", "error"),
    [
        ([CheckOp("/m", 1), SetDataOp("/m", b"x")], 0, BadVersionError),
        ([CreateOp("/m/b"), SetDataOp("/m", b"x", 5)], 1, BadVersionError),
        ([CreateOp("/m/b"), CheckOp("/missing")], 1, NoNodeError),
        ([SetDataOp("/m", b"x"), CreateOp("/m/a")], 1, NodeExistsError),
        ([CreateOp("/m/b"), CreateOp("/no/parent")], 1, NoNodeError),
        ([SetDataOp("/m", b"x"), DeleteOp("/m")], 1, NotEmptyError),
        ([CreateOp("/m/b"), DeleteOp("/m/a", 3)], 1, BadVersionError),
    ],
)
def test_multi_applies_nothing_when_an_op_fails(
    backend: Backend, store: MetadataStore, ops: list, index: int, error: type[Exception]
) -> None:
    store.create("/m", b"0")
    store.create("/m/a", b"a")
    before = store.get("/m"), store.get("/m/a"), store.get_children("/m")
    with pytest.raises(MultiOpError) as failed:
        store.multi(ops)
    assert failed.value.index == index
    assert isinstance(failed.value.error, error)
    assert (store.get("/m"), store.get("/m/a"), store.get_children("/m")) == before
    # the child counter too: the next sequential name is the one it would have been
    assert store.create("/m/seq-", sequential=True) == "/m/seq-0000000001"
    if backend.kind == "embedded":  # and nothing of it was logged
        store.close()
        reopened = backend.open()
        assert reopened.get_children("/m") == ["a", "seq-0000000001"]
        assert reopened.get("/m")[0] == b"0"


def test_multi_is_one_durable_change_watchers_see(backend: Backend, store: MetadataStore) -> None:
    store.create("/m", b"0")
    data, children = Calls(), Calls()
    store.watch_data("/m", data)
    store.watch_children("/m", children)
    store.multi([CheckOp("/m", 0), CreateOp("/m/x", b"x"), SetDataOp("/m", b"1", 0)])
    data.wait_for(1)
    children.wait_for(1)
    if backend.kind == "embedded":
        store.close()
        reopened = backend.open()
        assert reopened.get("/m/x")[0] == b"x"
        assert (reopened.get("/m")[0], reopened.get("/m")[1].version) == (b"1", 1)


def test_an_ephemeral_node_in_a_multi(backend: Backend, store: MetadataStore) -> None:
    store.create("/e", b"0")
    store.multi([CreateOp("/e/owner", b"me", ephemeral=True), SetDataOp("/e", b"1", 0)])
    stat = store.exists("/e/owner")
    assert stat is not None and stat.ephemeral


# controller writes (the /controller_epoch version check) ------------------------------------


def _topic(client: KafkaMetadataClient, topic: str) -> TopicAssignment:
    assignment = TopicAssignment(uuid.uuid4(), {0: (0, 1, 2)})
    client.create_topic(topic, assignment, {})
    return assignment


def test_a_controller_is_elected_with_the_epoch_znode_version(store: MetadataStore) -> None:
    client = KafkaMetadataClient(store)
    assert client.register_controller(0) == (1, 1)
    assert store.get("/controller_epoch")[0] == b"1"
    assert json.loads(store.get("/controller")[0])["brokerid"] == 0
    assert store.get("/controller")[1].ephemeral
    assert client.register_controller(1) is None  # held: the epoch is left alone
    data, stat = store.get("/controller_epoch")
    assert (data, stat.version) == (b"1", 1)
    store.delete("/controller")
    assert client.register_controller(1) == (2, 2)


def test_a_deposed_controller_writes_nothing(store: MetadataStore) -> None:
    client = KafkaMetadataClient(store)
    old = client.register_controller(0)
    assert old is not None
    assignment = _topic(client, "t")
    state = PartitionStateRecord(0, 0, (0, 1, 2), old[0])
    assert client.set_partition_state("t", 0, state, old[1]) == 0  # created, parents too
    assert client.set_partition_state("t", 0, state, old[1]) == 1
    store.create("/isr_change_notification/isr_change_0000000000", b"{}", makepath=True)
    store.create("/log_dir_event_notification/log_dir_event_0000000000", b"{}", makepath=True)
    store.delete("/controller")  # the old controller's session ended; another is elected
    new = client.register_controller(1)
    assert new is not None
    before = store.get("/brokers/topics/t/partitions/0/state"), store.get("/brokers/topics/t")

    moved = PartitionStateRecord(1, 1, (1, 2), old[0])
    with pytest.raises(ControllerMovedError):
        client.set_partition_state("t", 0, moved, old[1])
    with pytest.raises(ControllerMovedError):
        client.set_partition_state("t", 1, moved, old[1])  # a new partition
    with pytest.raises(ControllerMovedError):
        client.set_assignment("t", TopicAssignment(assignment.topic_id, {0: (1, 2)}), old[1])
    with pytest.raises(ControllerMovedError):
        client.delete_isr_change_notification("isr_change_0000000000", old[1])
    with pytest.raises(ControllerMovedError):
        client.delete_log_dir_event_notification("log_dir_event_0000000000", old[1])
    assert store.get_children("/log_dir_event_notification") == ["log_dir_event_0000000000"]
    store.delete("/isr_change_notification", recursive=True)
    with pytest.raises(ControllerMovedError):
        client.create_controller_paths(old[1])
    assert (store.get("/brokers/topics/t/partitions/0/state"), store.get("/brokers/topics/t")) == (
        before
    )
    assert store.exists("/brokers/topics/t/partitions/1") is None
    assert store.exists("/isr_change_notification") is None

    assert client.set_partition_state("t", 0, moved, new[1]) == 2
    client.create_controller_paths(new[1])
    assert store.exists("/isr_change_notification") is not None


def test_an_isr_write_that_lost_the_race_reads_the_state_again(store: MetadataStore) -> None:
    client = KafkaMetadataClient(store)
    elected = client.register_controller(0)
    assert elected is not None
    epoch, epoch_zk_version = elected
    _topic(client, "t")
    record = PartitionStateRecord(0, 3, (0, 1, 2), epoch)
    version = client.set_partition_state("t", 0, record, epoch_zk_version)
    shrunk = PartitionStateRecord(0, 3, (0, 1), epoch, version)
    assert client.update_isr("t", 0, shrunk) == version + 1
    # the same change again (its first answer lost): the stored version, no error
    assert client.update_isr("t", 0, shrunk) == version + 1
    assert len(store.get_children("/isr_change_notification")) == 2
    client.set_partition_state("t", 0, PartitionStateRecord(1, 4, (1, 2), 1), epoch_zk_version)
    with pytest.raises(PartitionStateChangedError) as changed:
        client.update_isr("t", 0, PartitionStateRecord(0, 3, (0,), epoch, version + 1))
    stored = changed.value.stored
    assert stored is not None and (stored.leader, stored.leader_epoch) == (1, 4)
    assert stored.version == version + 2


# ZooKeeper only ----------------------------------------------------------------------------


def test_chroot_isolation(zookeeper: str) -> None:
    first = open_zk(zookeeper + "/one")
    second = open_zk(zookeeper + "/two/nested")  # chroots are created, nested ones too
    try:
        first.create("/brokers/ids/0", b"a", makepath=True)
        assert second.exists("/brokers") is None
        second.create("/brokers/ids/0", b"b", makepath=True)
        assert first.get("/brokers/ids/0")[0] == b"a"
        assert second.get("/brokers/ids/0")[0] == b"b"
        hosts, chroot = split_connect(zookeeper)
        root = open_zk(hosts)
        try:
            assert sorted(root.get_children(chroot)) == ["one", "two"]
            assert root.get(f"{chroot}/two/nested/brokers/ids/0")[0] == b"b"
        finally:
            root.close()
    finally:
        first.close()
        second.close()


def test_split_connect() -> None:
    assert split_connect("h:1") == ("h:1", "")
    assert split_connect("h:1,g:2/kplane") == ("h:1,g:2", "/kplane")
    assert split_connect("h:1/a/b/") == ("h:1", "/a/b")
    assert split_connect("h:1/") == ("h:1", "")


def test_watches_see_other_sessions(zookeeper: str) -> None:
    store, other = open_zk(zookeeper), open_zk(zookeeper)
    try:
        store.create("/shared")
        children, data = Calls(), Calls()
        store.watch_children("/shared", children)
        store.watch_data("/shared", data)
        other.create("/shared/from-other", ephemeral=True)
        children.wait_for(1)
        other.set("/shared", b"x")
        data.wait_for(1)
        other.close()  # its ephemeral child goes
        assert children.wait_for(2) == ["/shared"] * 2
    finally:
        store.close()
        other.close()


def _expire_session(store: ZooKeeperMetadataStore, hosts: str) -> None:
    """Have ZooKeeper expire the store's session: attach a second client to the same
    session, then close it (the server ends the session; the store learns it on reconnect)."""
    session_id, password = store.client.client_id
    thief = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=6)
    thief.start(timeout=15)
    thief.stop()
    thief.close()


def test_session_expiry_reregisters_ephemeral_nodes(zookeeper: str) -> None:
    store = open_zk(zookeeper)
    observer = open_zk(zookeeper)
    try:
        store.create("/brokers/ids", makepath=True)

        def register() -> None:
            store.create("/brokers/ids/7", b"again", ephemeral=True)

        renewed = threading.Event()
        store.add_session_listener(register)
        store.add_session_listener(renewed.set)
        store.create("/brokers/ids/7", b"first", ephemeral=True)
        seen = Calls()
        store.watch_data("/brokers/ids/7", seen)
        members = Calls()
        observer.watch_children("/brokers/ids", members)

        _expire_session(store, split_connect(zookeeper)[0])
        assert renewed.wait(WAIT), "no new session after expiry"
        # the node went with the old session and came back with the new one
        members.wait_for(1)
        wait_until(lambda: observer.get_children("/brokers/ids") == ["7"])
        assert observer.get("/brokers/ids/7")[0] == b"again"
        assert store.get("/brokers/ids/7")[1].ephemeral
        # the store's own watch saw the node go (on reconnect) and come back
        seen.wait_for(2)
        store.set("/brokers/ids/7", b"later")
        assert seen.wait_for(3) == ["/brokers/ids/7"] * 3
    finally:
        store.close()
        observer.close()


def test_watches_survive_server_restart(zookeeper_server: ZooKeeperServer) -> None:
    connect = zookeeper_server.connect + "/kplane"
    store = open_zk(connect)
    writer = open_zk(connect)
    try:
        store.create("/brokers/ids/3", b"", ephemeral=True, makepath=True)
        calls = Calls()
        store.watch_children("/brokers/topics", calls)
        zookeeper_server.restart()
        writer.create("/brokers/topics/t", makepath=True)
        calls.wait_for(1)
        writer.create("/brokers/topics/u")
        calls.wait_for(2)
        # the session outlived the restart, and its ephemeral node with it
        assert store.get("/brokers/ids/3")[1].ephemeral
    finally:
        store.close()
        writer.close()
