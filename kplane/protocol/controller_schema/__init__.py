"""The ZooKeeper-era controller APIs kio dropped, and kplane's own API, as kio-style entities.

LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6) and ControlledShutdown (7, from v1:
v0 has a header without a client id), modelled on Apache Kafka 3.x's
message schemas, and KplaneFaults (10000, kplane's fault injection, served only with
``kplane.faults.enable=true``), in kio's generated form: ``<api>/v<N>/request.py`` and
``response.py`` hold frozen slotted dataclasses that ``kio.serial`` reads and writes like its
own. The ``<api>/`` packages are generated from ``json/`` by ``generate.py`` (``make
schemas``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType, ModuleType
from typing import Final

from kio.index import UnknownEntity
from kio.static.constants import EntityType

API_NAMES: Final[Mapping[int, str]] = MappingProxyType(
    {
        4: "leader_and_isr",
        5: "stop_replica",
        6: "update_metadata",
        7: "controlled_shutdown",
        10000: "kplane_faults",
    }
)
"""Api key -> package name, in kio's naming (``kio.schema.index.api_key_map``)."""

VERSIONS: Final[Mapping[int, range]] = MappingProxyType(
    {4: range(0, 8), 5: range(0, 5), 6: range(0, 9), 7: range(1, 4), 10000: range(0, 1)}
)
"""Api key -> the versions modelled here."""


def load_payload_module(api_key: int, version: int, entity_type: EntityType) -> ModuleType:
    """The module of the ``entity_type`` payload of ``api_key`` at ``version``.

    Raises kio's ``UnknownEntity`` for anything not modelled here, as kio's loader does.
    """
    if version not in VERSIONS.get(api_key, ()) or entity_type not in (
        EntityType.request,
        EntityType.response,
    ):
        raise UnknownEntity(f"no {entity_type.name} for api key {api_key} version {version}")
    return importlib.import_module(f"{__name__}.{API_NAMES[api_key]}.v{version}.{entity_type.name}")
