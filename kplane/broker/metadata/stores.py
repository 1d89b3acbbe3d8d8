"""The metadata store a broker's config names: ZooKeeper when ``zookeeper.connect`` is set,
else the embedded store under ``log.dirs``."""

from __future__ import annotations

from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metadata.store import EmbeddedMetadataStore, MetadataStore
from kplane.broker.metadata.zk_store import ZooKeeperMetadataStore


def open_store(config: KafkaConfig) -> MetadataStore:
    """Connect to (or open) the store; ZooKeeper errors name the connect string."""
    connect = config.get("zookeeper.connect")
    if not connect:
        return EmbeddedMetadataStore(config.log_dirs[0])
    session_ms = config.get_int("zookeeper.session.timeout.ms")
    connection_ms = config.get("zookeeper.connection.timeout.ms")
    return ZooKeeperMetadataStore(
        connect, session_ms, int(connection_ms) if connection_ms is not None else session_ms
    )
