"""Client requests in a broker's start-up window (issue: CreateTopics right after start-up
sometimes never completed).

A broker accepts connections before the controller's first UpdateMetadata names it. Answered
then, Metadata named no broker and no controller, and librdkafka's admin client, having
asked for the controller, never asked again: CreateTopics timed out. Client requests now wait
for that metadata, as a KRaft broker serves none before its initial catch-up."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kio.schema.metadata.v12.request import MetadataRequest

from kplane.testing.plugin import BrokerProcess, RunningBroker, free_port, wait_for_port
from kplane.testing.wire import WireClient
from tests.repo import REPO_ROOT

ROUNDS = 60
"""kplane serve starts, a fresh AdminClient creates topics at once: the old code failed about
one such round in 15 to 100, more often on a busy machine, which these parallel rounds make."""


def _create_two_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic("txn", 2, 1), NewTopic("src", 1, 1)])
    for future in futures.values():
        future.result(15)


def _serve_and_create(work: Path) -> None:
    port = free_port()
    args = [
        sys.executable, "-m", "kplane", "serve", str(REPO_ROOT / "configs/server.properties"),
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override", f"log.dirs={work}",
    ]  # fmt: skip
    with open(work.with_suffix(".log"), "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port("127.0.0.1", port)
        _create_two_topics(f"127.0.0.1:{port}")
    finally:
        process.kill()
        process.wait(10)


@pytest.mark.slow
def test_kplane_serve_then_create_topics_at_once(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = [pool.submit(_serve_and_create, tmp_path / f"round-{i}") for i in range(ROUNDS)]
        failed = [i for i, run in enumerate(runs) if run.exception() is not None]
    assert not failed, f"rounds {failed} of {ROUNDS}: {runs[failed[0]].exception()!r}"


def test_the_broker_fixture_then_create_topics_at_once(
    broker_factory: Callable[..., RunningBroker],
) -> None:
    for _ in range(10):
        running = broker_factory()
        _create_two_topics(running.bootstrap_servers)
        running.stop()


def test_metadata_waits_for_the_controller(
    broker_process: Callable[..., BrokerProcess], zookeeper: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another broker holds /controller and sends nothing: the new broker is registered and
    accepting, but no metadata names it. Metadata and CreateTopics wait (not an empty
    cluster); once that controller is gone and the broker becomes controller, both are
    answered with it. Each held request is one debug line, for the next start-up race."""
    monkeypatch.setenv("KPLANE_LOG_LEVEL", "debug")
    hosts, _, chroot = zookeeper.partition("/")
    squatter = KazooClient(hosts=hosts, timeout=10)
    squatter.start(timeout=15)
    try:
        squatter.create(
            f"/{chroot}/controller",
            json.dumps({"version": 1, "brokerid": 99, "timestamp": "0"}).encode(),
            ephemeral=True,
            makepath=True,
        )
        handle = broker_process(
            "configs/server.properties",
            f"zookeeper.connect={zookeeper}",
            "zookeeper.session.timeout.ms=30000",
        )
        wire = WireClient("127.0.0.1", handle.port or 0)
        wire.send(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False))
        wire.sock.settimeout(1.0)
        with pytest.raises(socket.timeout):
            wire.read_frame()  # held: this broker has no metadata yet
        with ThreadPoolExecutor(max_workers=1) as pool:
            created = pool.submit(_create_two_topics, handle.bootstrap_servers)
            time.sleep(0.5)  # the admin client has asked for the controller
            assert not created.done()
            squatter.stop()
            created.result(30)
        wire.sock.settimeout(10)
        _, metadata = wire.receive(3, 12)
        wire.close()
        assert [b.node_id for b in metadata.brokers] == [0]
        assert metadata.controller_id == 0
        assert "request held until the controller's metadata" in handle.log_text()
    finally:
        squatter.stop()
        squatter.close()

