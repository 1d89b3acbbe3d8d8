"""ClientQuotaStore: client quota configs in the metadata store, at Kafka's ZooKeeper paths.

``/config/users/<user>``, ``/config/clients/<client-id>``,
``/config/users/<user>/clients/<client-id>`` and ``/config/ips/<ip>`` hold
``{"version":1,"config":{...}}``; every write leaves a change notification under
``/config/changes`` naming the entity path, which every broker follows. A user's node also
holds its SCRAM credentials, which a quota change keeps.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from kplane.broker.metadata.kafka_store import KafkaMetadataClient
from kplane.broker.quota.entity import (
    CLIENT_ID,
    IP,
    USER,
    QuotaEntity,
    entity_name,
    format_value,
    quota_values,
)


class ClientQuotaStore:
    """Reads and writes quota entities' configs."""

    def __init__(self, client: KafkaMetadataClient) -> None:
        self.client = client
        self._lock = threading.Lock()

    def read(self, entity: QuotaEntity) -> dict[str, float]:
        """The quota values the entity has (none for a missing node)."""
        return quota_values(self.client.get_entity_config(*entity.store_path()))

    def all(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity with at least one quota value."""
        found: dict[QuotaEntity, dict[str, float]] = {}

        def add(entity: QuotaEntity) -> None:
            values = self.read(entity)
            if values:
                found[entity] = values

        for node in self.client.get_entities("users"):
            user = entity_name(node)
            add(QuotaEntity(((USER, user),)))
            for client_node in self.client.get_entities(f"users/{node}/clients"):
                add(QuotaEntity(((CLIENT_ID, entity_name(client_node)), (USER, user))))
        for node in self.client.get_entities("clients"):
            add(QuotaEntity(((CLIENT_ID, entity_name(node)),)))
        for node in self.client.get_entities("ips"):
            add(QuotaEntity(((IP, entity_name(node)),)))
        return found

    def alter(self, entity: QuotaEntity, changes: Mapping[str, float | None]) -> None:
        """Set (a value) or remove (``None``) quota keys of the entity, keeping its other
        configs, and announce the change."""
        kind, name = entity.store_path()
        with self._lock:
            configs = self.client.get_entity_config(kind, name)
            for key, value in changes.items():
                if value is None:
                    configs.pop(key, None)
                else:
                    configs[key] = format_value(key, value)
            self.client.set_entity_config(kind, name, configs)
