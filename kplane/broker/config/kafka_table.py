"""Kafka 3.9's broker and topic config tables, as committed in ``kafka_3_9_configs.json``
(its ``source`` says how they were read from Kafka's own definitions).

Rows keep Kafka's text: types and update modes by their documented names, defaults as
``ConfigDef.convertToString`` prints them (None: no default value).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TABLE_PATH = Path(__file__).with_name("kafka_3_9_configs.json")


@dataclass(frozen=True, slots=True)
class KafkaConfigRow:
    """One of Kafka's configs: a broker config, or a topic config (``server_synonyms``: the
    broker configs its default comes from, first one set wins)."""

    name: str
    type: str
    default: str | None
    valid_values: str | None
    validator: str | None
    importance: str
    documentation: str
    update_mode: str = "read-only"
    listener_prefix_required: bool = False
    dynamic_only: bool = False
    internal: bool = False
    server_default_property: str | None = None
    server_synonyms: tuple[str, ...] = ()


def _load() -> tuple[dict[str, KafkaConfigRow], dict[str, KafkaConfigRow]]:
    table = json.loads(TABLE_PATH.read_text())

    def rows(kind: str) -> dict[str, KafkaConfigRow]:
        return {
            r["name"]: KafkaConfigRow(
                **{**r, "server_synonyms": tuple(r.get("server_synonyms", ()))}
            )
            for r in table[kind]
        }

    return rows("broker"), rows("topic")


KAFKA_BROKER_CONFIGS: Mapping[str, KafkaConfigRow]
KAFKA_TOPIC_CONFIGS: Mapping[str, KafkaConfigRow]
KAFKA_BROKER_CONFIGS, KAFKA_TOPIC_CONFIGS = _load()
