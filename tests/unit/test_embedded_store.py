"""The embedded store on disk: change log, snapshot, replay, torn tail, old-format migration."""

from __future__ import annotations

import base64
import itertools
import json
import threading
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from kplane.broker.metadata.store import EmbeddedMetadataStore, NoNodeError
from kplane.broker.metadata.store_log import LOG_FILE, SNAPSHOT_FILE


def tree(store: EmbeddedMetadataStore, path: str = "/") -> dict[str, tuple[bytes, tuple]]:
    """Every node under ``path``: data and the stat fields that are persisted."""
    out = {}
    for name in store.get_children(path):
        child = f"{path.rstrip('/')}/{name}"
        data, stat = store.get(child)
        out[child] = (data, (stat.version, stat.ctime_ms, stat.mtime_ms, stat.cversion))
        out.update(tree(store, child))
    return out


def log_lines(directory: Path) -> list[bytes]:
    return (directory / LOG_FILE).read_bytes().splitlines(keepends=True)


def some_changes(store: EmbeddedMetadataStore) -> None:
    store.create("/brokers/topics/a", b"assignment", makepath=True)
    store.create("/config/changes/config_change_", b"1", sequential=True, makepath=True)
    store.create("/config/changes/config_change_", b"2", sequential=True)
    store.set("/brokers/topics/a", b"assignment v2")
    store.create("/brokers/topics/b", b"b")
    store.delete("/config/changes/config_change_0000000000")
    store.set_or_create("/brokers/topics/a/partitions/0/state", b"leader")


def test_every_change_is_in_the_store_reopened(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path))
    some_changes(store)
    before = tree(store)
    store.close()

    reopened = EmbeddedMetadataStore(str(tmp_path))
    assert tree(reopened) == before
    # the parent's child counter (2 creations, 1 deletion) came back too
    assert reopened.create("/config/changes/config_change_", sequential=True).endswith("03")


def test_a_change_appends_one_record_and_leaves_the_snapshot_alone(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path))
    store.create("/brokers/topics", makepath=True)
    snapshot = (tmp_path / SNAPSHOT_FILE).exists()
    count = len(log_lines(tmp_path))

    store.create("/brokers/topics/t", b"x" * 100)
    store.set("/brokers/topics/t", b"y")

    lines = log_lines(tmp_path)
    assert len(lines) == count + 2
    assert len(lines[-1]) < 300  # the change, not the store
    assert (tmp_path / SNAPSHOT_FILE).exists() == snapshot


def test_ephemeral_nodes_are_not_written_but_the_parents_they_needed_are(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path))
    store.create("/brokers/ids/0", b"me", ephemeral=True, makepath=True)
    count = len(log_lines(tmp_path))
    store.create("/brokers/ids/1", b"other", ephemeral=True)
    store.set("/brokers/ids/1", b"changed")
    store.delete("/brokers/ids/1")
    assert len(log_lines(tmp_path)) == count

    reopened = EmbeddedMetadataStore(str(tmp_path))
    assert reopened.get_children("/brokers/ids") == []


def test_a_batch_is_one_record_with_what_watchers_wrote_in_it(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path))
    store.create("/brokers/topics", makepath=True)
    store.watch_children(
        "/brokers/topics",
        lambda _path: store.set_or_create("/brokers/topics/t/partitions/0/state", b"leader"),
    )
    count = len(log_lines(tmp_path))

    with store.batch():
        store.set_or_create("/config/topics/t", b"{}")
        with store.batch():
            store.create("/brokers/topics/t", b"assignment")
        assert len(log_lines(tmp_path)) == count  # not written before the batch ends
        assert store.get("/brokers/topics/t/partitions/0/state")[0] == b"leader"  # but seen

    assert len(log_lines(tmp_path)) == count + 1
    reopened = EmbeddedMetadataStore(str(tmp_path))
    assert reopened.get("/brokers/topics/t/partitions/0/state")[0] == b"leader"
    assert reopened.get("/config/topics/t")[0] == b"{}"


def test_a_write_during_another_threads_batch_keeps_the_order(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path))
    created, written = threading.Event(), threading.Event()

    def batched() -> None:
        with store.batch():
            store.create("/x", b"first")
            created.set()
            written.wait(10)

    worker = threading.Thread(target=batched)
    worker.start()
    assert created.wait(10)
    store.set("/x", b"second")  # not batched: written now, after the batch's create
    written.set()
    worker.join(10)

    reopened = EmbeddedMetadataStore(str(tmp_path))
    data, stat = reopened.get("/x")
    assert (data, stat.version) == (b"second", 1)


def test_a_snapshot_restarts_the_log_once_it_outgrows_the_snapshot(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path), snapshot_min_bytes=2_000)
    sizes = []
    for i in range(100):
        store.create(f"/brokers/topics/t{i}", b"x" * 50, makepath=True)
        snapshot = tmp_path / SNAPSHOT_FILE
        snapshot_bytes = snapshot.stat().st_size if snapshot.exists() else 0
        log_bytes = (tmp_path / LOG_FILE).stat().st_size
        assert log_bytes <= max(2_000, snapshot_bytes)
        sizes.append(log_bytes)
    assert sum(b < a for a, b in itertools.pairwise(sizes)) >= 2  # restarted
    snapshot = json.loads((tmp_path / SNAPSHOT_FILE).read_bytes())
    assert snapshot["version"] == 2 and snapshot["zxid"] > 0
    before = tree(store)

    assert tree(EmbeddedMetadataStore(str(tmp_path))) == before


def test_records_already_in_the_snapshot_are_not_replayed_again(tmp_path: Path) -> None:
    """A crash after the snapshot's rename, before the log was emptied."""
    store = EmbeddedMetadataStore(str(tmp_path), snapshot_min_bytes=10**9)
    store.create("/config/changes/config_change_", b"1", sequential=True, makepath=True)
    store.create("/a", b"a")
    store.delete("/a")
    old_log = (tmp_path / LOG_FILE).read_bytes()
    store._log.write_snapshot(store._images())  # type: ignore[union-attr]
    store.create("/b", b"b")
    before = tree(store)
    (tmp_path / LOG_FILE).write_bytes(old_log + (tmp_path / LOG_FILE).read_bytes())

    with capture_logs() as logs:
        reopened = EmbeddedMetadataStore(str(tmp_path))
    assert tree(reopened) == before
    assert logs == []


@pytest.mark.parametrize("damage", ["cut", "garbled"])
def test_a_torn_last_record_is_dropped_with_one_warning(tmp_path: Path, damage: str) -> None:
    store = EmbeddedMetadataStore(str(tmp_path))
    store.create("/kept", b"acknowledged", makepath=True)
    store.create("/lost", b"torn by the crash")
    store.close()
    lines = log_lines(tmp_path)
    last = lines[-1]
    middle = len(last) // 2
    torn = last[:middle] if damage == "cut" else last[:middle] + b"#" + last[middle + 1 :]
    good = b"".join(lines[:-1])
    (tmp_path / LOG_FILE).write_bytes(good + torn)

    with capture_logs() as logs:
        reopened = EmbeddedMetadataStore(str(tmp_path))
    assert [e["log_level"] for e in logs] == ["warning"]
    assert logs[0]["bytes_dropped"] == len(torn)
    assert reopened.get("/kept")[0] == b"acknowledged"
    with pytest.raises(NoNodeError):
        reopened.get("/lost")
    assert (tmp_path / LOG_FILE).read_bytes() == good  # cut back: new records follow good ones

    reopened.create("/after", b"new")
    with capture_logs() as logs:
        again = EmbeddedMetadataStore(str(tmp_path))
    assert logs == []
    assert again.get("/after")[0] == b"new"


def old_format(nodes: dict[str, bytes]) -> dict:
    """What kplane wrote before the change log: one JSON document of every node."""
    return {
        "version": 1,
        "nodes": {
            path: {
                "data": base64.b64encode(data).decode(),
                "version": 3,
                "ctime": 1000,
                "mtime": 2000,
                "cversion": 1,
            }
            for path, data in nodes.items()
        },
    }


def test_a_store_file_of_the_old_format_is_migrated(tmp_path: Path) -> None:
    nodes = {"/cluster": b"", "/cluster/id": b'{"id": "abc"}', "/brokers": b""}
    (tmp_path / SNAPSHOT_FILE).write_text(json.dumps(old_format(nodes)))
    (tmp_path / LOG_FILE).write_bytes(b"left by a kplane that ran before a downgrade\n")

    store = EmbeddedMetadataStore(str(tmp_path))
    assert store.get("/cluster/id")[0] == b'{"id": "abc"}'
    assert store.get("/cluster/id")[1].version == 3
    assert json.loads((tmp_path / SNAPSHOT_FILE).read_bytes())["version"] == 2
    assert (tmp_path / LOG_FILE).read_bytes() == b""  # the stale log went

    store.create("/brokers/topics", makepath=True)
    reopened = EmbeddedMetadataStore(str(tmp_path))
    assert reopened.get_children("/") == ["brokers", "cluster"]
    assert reopened.get_children("/brokers") == ["topics"]


def test_a_store_without_a_directory_writes_nothing(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(None)
    with store.batch():
        store.create("/a", b"a")
    assert store.get("/a")[0] == b"a"
    assert list(tmp_path.iterdir()) == []
