"""Broker lifecycle: idle connections, and what the embedded store keeps across a restart."""

from __future__ import annotations

import json
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kplane.testing.wire import WireClient


def test_idle_connections_are_closed_after_connections_max_idle_ms(broker_factory) -> None:
    broker = broker_factory({"connections.max.idle.ms": "1000"})
    with WireClient(*broker.address()) as idle, WireClient(*broker.address()) as busy:
        request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        idle.request(request)
        deadline = time.monotonic() + 10
        closed = False
        while time.monotonic() < deadline and not closed:
            busy.request(request)  # keeps its own connection active
            closed = idle.is_closed_by_peer(timeout=0.2)
        assert closed, "an idle connection stayed open past connections.max.idle.ms"
        busy.request(request)


def test_topics_and_cluster_id_survive_a_restart(broker_factory, tmp_path) -> None:
    overrides = {"log.dirs": str(tmp_path / "persisted")}
    first = broker_factory(overrides)
    admin = AdminClient({"bootstrap.servers": first.bootstrap()})
    admin.create_topics([NewTopic("kept", 3, 1, config={"retention.ms": "1000"})])["kept"].result()
    first.wait_for_partitions("kept", 3)
    cluster_id = first.cluster_id
    topic_id = first.topics()["kept"]
    first.stop()

    second = broker_factory(overrides)
    assert second.cluster_id == cluster_id
    assert second.topics()["kept"] == topic_id and sorted(second.partitions("kept")) == [0, 1, 2]
    stored = json.loads(second.znode("/config/topics/kept"))
    assert stored["config"] == {"retention.ms": "1000"}
    metadata = AdminClient({"bootstrap.servers": second.bootstrap()}).list_topics(timeout=10)
    assert len(metadata.topics["kept"].partitions) == 3
