"""Client-metrics subscriptions (KIP-714): the configs of a CLIENT_METRICS resource, checked
and parsed as Kafka's ``ClientMetricsConfigs`` does, and the subscription id Kafka computes.

A subscription lives at ``/config/client-metrics/<name>`` with three keys: ``metrics`` (a
list of metric name prefixes, ``*`` for every metric), ``interval.ms`` (the push interval,
100 ms .. 1 hour, default 5 minutes) and ``match`` (``selector=regex`` pairs over the
client's instance id, client id, software name and version, source address and port; every
pair must match the whole value; no pairs match every client).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

import crc32c

from kplane.protocol.errors import ErrorCode, KafkaError

CLIENT_METRICS = "client-metrics"
"""The entity type of subscriptions under ``/config`` (Kafka's ConfigType.CLIENT_METRICS)."""

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
CONFIG_NAMES = (METRICS, INTERVAL_MS, MATCH)
LIST_CONFIGS = frozenset((METRICS, MATCH))
"""The list-typed keys, which IncrementalAlterConfigs may APPEND to and SUBTRACT from."""

ALL_METRICS = "*"
DEFAULT_INTERVAL_MS = 5 * 60 * 1000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000

CLIENT_INSTANCE_ID = "client_instance_id"
CLIENT_ID = "client_id"
CLIENT_SOFTWARE_NAME = "client_software_name"
CLIENT_SOFTWARE_VERSION = "client_software_version"
CLIENT_SOURCE_ADDRESS = "client_source_address"
CLIENT_SOURCE_PORT = "client_source_port"
MATCH_SELECTORS = (
    CLIENT_INSTANCE_ID,
    CLIENT_ID,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    CLIENT_SOURCE_ADDRESS,
    CLIENT_SOURCE_PORT,
)


def subscription_node(name: str) -> str:
    """A subscription name as one znode name under ``/config/client-metrics``."""
    return quote(name, safe="")


def config_list(text: str | None) -> list[str]:
    """A LIST config's items, as Kafka's ConfigDef parses them (trimmed, empties dropped)."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]


@dataclass(frozen=True)
class Subscription:
    """One parsed CLIENT_METRICS resource."""

    name: str
    metrics: frozenset[str]
    interval_ms: int
    match: Mapping[str, re.Pattern[str]] = field(default_factory=dict)

    def matches(self, client: Mapping[str, str | None]) -> bool:
        """Whether every ``match`` pair matches ``client``'s whole value of its selector."""
        for selector, pattern in self.match.items():
            value = client.get(selector)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


def validate(name: str, configs: Mapping[str, str]) -> Subscription:
    """The subscription ``configs`` define; KafkaError as Kafka answers a bad one
    (INVALID_REQUEST for an empty name, an unknown key or an interval out of bounds,
    INVALID_CONFIG for a value that does not parse or a bad match pattern)."""
    if not name:
        raise KafkaError(ErrorCode.invalid_request, "Subscription name can't be empty")
    for key in configs:
        if key not in CONFIG_NAMES:
            raise KafkaError(
                ErrorCode.invalid_request, f"Unknown client metrics configuration: {key}"
            )
    interval = DEFAULT_INTERVAL_MS
    if INTERVAL_MS in configs:
        text = configs[INTERVAL_MS].strip()
        try:
            interval = int(text)
        except ValueError:
            raise KafkaError(
                ErrorCode.invalid_config,
                f"Invalid value {text} for configuration {INTERVAL_MS}: Not a number of type INT",
            ) from None
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Invalid value {interval} for {INTERVAL_MS}, interval must be between "
                f"{MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)",
            )
    return Subscription(
        name,
        frozenset(config_list(configs.get(METRICS))),
        interval,
        match_patterns(config_list(configs.get(MATCH))),
    )


def match_patterns(pairs: Iterable[str]) -> dict[str, re.Pattern[str]]:
    """``selector=regex`` pairs as compiled patterns; INVALID_CONFIG for a bad one."""
    out: dict[str, re.Pattern[str]] = {}
    for pair in pairs:
        parts = pair.split("=")
        selector = parts[0].strip()
        if len(parts) != 2 or selector not in MATCH_SELECTORS:
            raise KafkaError(ErrorCode.invalid_config, f"Illegal client matching pattern: {pair}")
        try:
            out[selector] = re.compile(parts[1].strip())
        except re.error:
            raise KafkaError(
                ErrorCode.invalid_config, f"Illegal client matching pattern: {pair}"
            ) from None
    return out


def subscription_id(metrics: Iterable[str], interval_ms: int, instance_id: uuid.UUID) -> int:
    """Kafka's subscription id: the CRC32C of the metric set's text (Java's
    ``HashSet.toString()``) and the interval, XORed with the instance id's hash code."""
    text = "[" + ", ".join(java_hash_set_order(metrics)) + "]" + str(interval_ms)
    crc = crc32c.crc32c(text.encode())
    bits = instance_id.int
    mixed = (bits >> 64) ^ (bits & (1 << 64) - 1)
    uuid_hash = ((mixed >> 32) ^ mixed) & 0xFFFFFFFF
    return _int32(crc ^ uuid_hash)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _java_string_hash(text: str) -> int:
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h


def java_hash_set_order(items: Iterable[str]) -> list[str]:
    """``items`` in a Java HashSet's iteration order: by bucket (the spread hash masked by
    the table size, 16 doubling past 3/4 full); names break ties within a bucket."""
    names = sorted(set(items))
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = _java_string_hash(name)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=bucket)
