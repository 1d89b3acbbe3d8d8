"""Topic configs (Kafka's ``LogConfig``) and the broker configs that are their defaults.

A topic config that a topic does not override takes the value of its broker synonyms (Kafka's
``ServerTopicConfigSynonyms``), the first one set winning: ``retention.ms`` follows
``log.retention.ms``, else ``log.retention.minutes``, else ``log.retention.hours`` (converted to
milliseconds). Topic configs therefore have no default of their own here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kplane.broker.config.definitions import (
    CLEANUP_POLICIES,
    COMPRESSION_TYPES,
    TIMESTAMP_TYPES,
    ConfigType,
    ThrottledReplicaList,
    Validator,
    at_least,
    between,
    parse_value,
)
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.synonyms import MS_PER_UNIT, broker_synonyms


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic config: its name, how it parses, and the broker configs it defaults to."""

    name: str
    type: ConfigType
    doc: str
    validator: Validator | None = field(default=None, compare=False)
    broker_synonyms: tuple[str, ...] = ()
    """Broker configs supplying the value when the topic does not set it, first one set wins."""

    def parse(self, raw: str) -> Any:
        """Parse and validate a value of this config; errors name this topic config."""
        return parse_value(self.name, self.type, raw, self.validator)

    def from_broker_value(self, broker_name: str, text: str) -> str:
        """The value of this topic config, as text, when it comes from the broker synonym
        ``broker_name`` set to ``text`` (``log.retention.hours=168`` gives
        ``retention.ms=604800000``; a negative retention means forever, -1, as in Kafka)."""
        factor = MS_PER_UNIT.get(broker_name)
        if factor is None and self.name != RETENTION_MS:
            return text
        try:
            value = int(text.strip()) * (factor or 1)
        except ValueError:
            return text
        if self.name == RETENTION_MS and value < 0:
            value = -1
        return str(value)


RETENTION_MS = "retention.ms"


def _topic(
    name: str, ctype: ConfigType, doc: str, validator: Validator | None, broker_name: str
) -> TopicConfigDef:
    return TopicConfigDef(name, ctype, doc, validator, broker_synonyms(broker_name))


T = ConfigType

# fmt: off
TOPIC_CONFIGS: Mapping[str, TopicConfigDef] = {d.name: d for d in (
    _topic("cleanup.policy", T.LIST,
           "What happens to old segments: delete, compact, or both.",
           CLEANUP_POLICIES, "log.cleanup.policy"),
    _topic("compression.type", T.STRING,
           "Compression of stored batches; 'producer' keeps the producer's codec.",
           COMPRESSION_TYPES, "compression.type"),
    _topic("delete.retention.ms", T.LONG,
           "How long delete tombstones are kept in a compacted topic.",
           at_least(0), "log.cleaner.delete.retention.ms"),
    _topic("file.delete.delay.ms", T.LONG,
           "Delay before a deleted segment's files are removed.",
           at_least(0), "log.segment.delete.delay.ms"),
    _topic("flush.messages", T.LONG,
           "Records appended to a partition before it is flushed to disk.",
           at_least(1), "log.flush.interval.messages"),
    _topic("flush.ms", T.LONG,
           "Milliseconds a record may stay unflushed.",
           at_least(0), "log.flush.interval.ms"),
    _topic("index.interval.bytes", T.INT,
           "Bytes of records between two offset index entries.",
           at_least(0), "log.index.interval.bytes"),
    TopicConfigDef("leader.replication.throttled.replicas", T.LIST,
                   "Replicas ([partition]:[broker], or *) whose out-of-sync followers this "
                   "broker, as leader, serves within leader.replication.throttled.rate.",
                   ThrottledReplicaList()),
    TopicConfigDef("follower.replication.throttled.replicas", T.LIST,
                   "Replicas ([partition]:[broker], or *) this broker, as an out-of-sync "
                   "follower, fetches within follower.replication.throttled.rate.",
                   ThrottledReplicaList()),
    _topic("max.compaction.lag.ms", T.LONG,
           "Most time a record may stay uncompacted.",
           at_least(1), "log.cleaner.max.compaction.lag.ms"),
    _topic("max.message.bytes", T.INT,
           "Largest record batch the topic accepts.",
           at_least(0), "message.max.bytes"),
    _topic("message.downconversion.enable", T.BOOLEAN,
           "Down-convert record batches for old Fetch versions.",
           None, "log.message.downconversion.enable"),
    _topic("message.timestamp.difference.max.ms", T.LONG,
           "Largest difference between a CreateTime timestamp and the broker's clock.",
           at_least(0), "log.message.timestamp.difference.max.ms"),
    _topic("message.timestamp.type", T.STRING,
           "Timestamp stored with records: CreateTime or LogAppendTime.",
           TIMESTAMP_TYPES, "log.message.timestamp.type"),
    _topic("min.cleanable.dirty.ratio", T.DOUBLE,
           "Smallest ratio of dirty log to total log for the log to be compacted.",
           between(0, 1), "log.cleaner.min.cleanable.ratio"),
    _topic("min.compaction.lag.ms", T.LONG,
           "Least time a record stays uncompacted.",
           at_least(0), "log.cleaner.min.compaction.lag.ms"),
    _topic("min.insync.replicas", T.INT,
           "Replicas that must acknowledge an acks=all produce.",
           at_least(1), "min.insync.replicas"),
    _topic("preallocate", T.BOOLEAN,
           "Preallocate the file of a new segment.",
           None, "log.preallocate"),
    _topic("retention.bytes", T.LONG,
           "Largest size of a partition log before old segments go; -1 means no limit.",
           None, "log.retention.bytes"),
    _topic(RETENTION_MS, T.LONG,
           "Milliseconds a segment is kept; -1 keeps it forever.",
           at_least(-1), "log.retention.ms"),
    _topic("segment.bytes", T.INT,
           "Largest size of one log segment file.",
           at_least(14), "log.segment.bytes"),
    _topic("segment.index.bytes", T.INT,
           "Largest size of a segment's offset index.",
           at_least(4), "log.index.size.max.bytes"),
    _topic("segment.jitter.ms", T.LONG,
           "Largest random jitter subtracted from segment.ms.",
           at_least(0), "log.roll.jitter.ms"),
    _topic("segment.ms", T.LONG,
           "A new segment is rolled after this many milliseconds.",
           at_least(1), "log.roll.ms"),
    _topic("unclean.leader.election.enable", T.BOOLEAN,
           "Allow a replica outside the ISR to become leader, losing data.",
           None, "unclean.leader.election.enable"),
)}
"""Every topic config by name."""
# fmt: on

BROKER_TO_TOPIC: Mapping[str, str] = {
    broker_name: d.name for d in TOPIC_CONFIGS.values() for broker_name in d.broker_synonyms
}
"""The topic config each broker config is a default of (``log.retention.hours`` ->
``retention.ms``)."""


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check a topic's config overrides as Kafka's ``LogConfig.validate`` does: known names,
    values of the right type within range, min.compaction.lag.ms <= max.compaction.lag.ms.
    Returns the checked overrides.

    Raises ConfigException naming the offending key.
    """
    checked: dict[str, str] = {}
    values: dict[str, Any] = {}
    for key, raw in configs.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise ConfigException(f"Unknown topic config name: {key}", name=key)
        if raw is None:
            raise ConfigException(f"Null value not supported for topic configs: {key}", name=key)
        values[key] = definition.parse(raw)
        checked[key] = raw
    low, high = values.get("min.compaction.lag.ms"), values.get("max.compaction.lag.ms")
    if low is not None and high is not None and low > high:
        raise ConfigException(
            f"conflict topic config setting min.compaction.lag.ms ({low}) > "
            f"max.compaction.lag.ms ({high})",
            name="min.compaction.lag.ms",
        )
    return checked
