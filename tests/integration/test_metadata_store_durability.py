"""A broker killed (SIGKILL) while topics are being created keeps every topic it acknowledged."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kplane.testing.plugin import free_port
from kplane.tools.serve_process import ServeProcess, json_events, spawn_serve
from tests.repo import REPO_ROOT

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 30.0
ACKNOWLEDGED_BEFORE_KILL = 40


class Creator(threading.Thread):
    """Creates topics without pause (one by one, then three in a request, in turn) and
    records the names whose creation the broker acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        self.acknowledged: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        index = 0
        while not self.stop.is_set():
            size = 1 if index % 2 else 3
            names = [f"durable-{index}-{i}" for i in range(size)]
            index += 1
            futures = self.admin.create_topics(
                [NewTopic(name, 1, 1) for name in names], request_timeout=5
            )
            for name, future in futures.items():
                try:
                    future.result(timeout=10)
                except Exception:  # the broker was killed under this request
                    continue
                self.acknowledged.append(name)


def start(tmp_path: Path, port: int) -> ServeProcess:
    serve = spawn_serve(
        str(REPO_ROOT / "configs/server.properties"),
        [f"listeners=PLAINTEXT://127.0.0.1:{port}", f"log.dirs={tmp_path / 'data'}"],
        tmp_path / "broker.log",
        append=True,
    )
    serve.wait_started(START_TIMEOUT_S)
    return serve


def test_acknowledged_topics_survive_kill_9_during_creations(tmp_path: Path) -> None:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    first = start(tmp_path, port)
    creator = Creator(bootstrap)
    try:
        creator.start()
        deadline = time.monotonic() + 60
        while len(creator.acknowledged) < ACKNOWLEDGED_BEFORE_KILL:
            assert time.monotonic() < deadline, "topic creations did not go through"
            time.sleep(0.01)
        first.process.kill()  # creations are still under way
        first.process.wait(10)
    finally:
        creator.stop.set()
        creator.join(30)
        if first.process.poll() is None:
            first.process.kill()
    acknowledged = set(creator.acknowledged)

    second = start(tmp_path, port)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        listed = set(admin.list_topics(timeout=10).topics)
        assert acknowledged <= listed, sorted(acknowledged - listed)
        # the store opened cleanly and takes new changes
        admin.create_topics([NewTopic("after-restart", 1, 1)])["after-restart"].result(10)
        deadline = time.monotonic() + 10
        while "after-restart" not in admin.list_topics(timeout=10).topics:
            assert time.monotonic() < deadline, "the topic created after the restart is missing"
            time.sleep(0.05)
        errors = [e for e in json_events(second.log_text()) if e.get("level") == "error"]
        assert errors == []
    finally:
        second.process.terminate()
        second.process.wait(20)
