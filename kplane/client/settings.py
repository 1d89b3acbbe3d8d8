"""The producer's and the consumer's settings by their Kafka names: one table each.

``ClientConfig`` (``common/network/config.py``) takes the settings every connection needs
and keeps the rest in ``extra``; the producer and the consumer read theirs from there
through their table, so each key is named, parsed and reported in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kplane.protocol.compression import COMPRESSION_NAMES


@dataclass(frozen=True, slots=True)
class Setting:
    """One Kafka client key: the constructor keyword it sets and how its value is read."""

    key: str
    keyword: str
    parse: Callable[[Any], Any]


def as_bool(value: Any) -> bool:
    """``true``/``false`` (also 1/0, yes/no, or a bool)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def as_acks(value: Any) -> int:
    """``all``, -1, 0 or 1 -> -1, 0 or 1."""
    text = str(value).strip().lower()
    if text == "all":
        return -1
    acks = int(text)
    if acks not in (-1, 0, 1):
        raise ValueError(f"acks: {value!r} is not one of all, -1, 0, 1")
    return acks


def as_lower(value: Any) -> str:
    return str(value).strip().lower()


def as_compression(value: Any) -> int:
    """``compression.type`` (none, gzip, snappy, lz4, zstd) -> the codec id."""
    codecs = {name: codec for codec, name in COMPRESSION_NAMES.items()}
    text = str(value).strip().lower()
    if text not in codecs:
        raise ValueError(f"not one of {', '.join(codecs)}")
    return codecs[text]


ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


def as_isolation_level(value: Any) -> int:
    """``read_uncommitted`` or ``read_committed`` (also 0 or 1) -> 0 or 1."""
    text = str(value).strip().lower()
    if text in ISOLATION_LEVELS:
        return ISOLATION_LEVELS[text]
    if text in ("0", "1"):
        return int(text)
    raise ValueError(f"isolation.level: {value!r} is not one of {', '.join(ISOLATION_LEVELS)}")


PRODUCER_SETTINGS: tuple[Setting, ...] = (
    Setting("acks", "acks", as_acks),
    Setting("linger.ms", "linger_ms", float),
    Setting("batch.size", "batch_size", int),
    Setting("enable.idempotence", "enable_idempotence", as_bool),
    Setting("retries", "retries", int),
    Setting("retry.backoff.ms", "retry_backoff_ms", int),
    Setting("max.in.flight.requests.per.connection", "max_in_flight", int),
    Setting("delivery.timeout.ms", "delivery_timeout_ms", int),
    Setting("buffer.memory", "buffer_memory", int),
    Setting("transactional.id", "transactional_id", str),
    Setting("transaction.timeout.ms", "transaction_timeout_ms", int),
    Setting("max.block.ms", "max_block_ms", int),
    Setting("compression.type", "compression", as_compression),
)

CONSUMER_SETTINGS: tuple[Setting, ...] = (
    Setting("fetch.max.wait.ms", "fetch_max_wait_ms", int),
    Setting("fetch.min.bytes", "fetch_min_bytes", int),
    Setting("fetch.max.bytes", "fetch_max_bytes", int),
    Setting("max.partition.fetch.bytes", "max_partition_fetch_bytes", int),
    Setting("retry.backoff.ms", "retry_backoff_ms", int),
    Setting("auto.offset.reset", "auto_offset_reset", as_lower),
    Setting("isolation.level", "isolation_level", as_isolation_level),
    Setting("group.id", "group_id", str),
    Setting("group.protocol", "group_protocol", as_lower),
    Setting("group.instance.id", "group_instance_id", str),
    Setting("group.remote.assignor", "group_remote_assignor", str),
    Setting("max.poll.interval.ms", "max_poll_interval_ms", int),
    Setting("enable.auto.commit", "enable_auto_commit", as_bool),
    Setting("auto.commit.interval.ms", "auto_commit_interval_ms", int),
)


def read_settings(extra: Mapping[str, Any], table: Sequence[Setting]) -> dict[str, Any]:
    """Constructor keywords from the keys of ``table`` present in ``extra``; ValueError
    naming the key and value when one does not parse."""
    kwargs: dict[str, Any] = {}
    for setting in table:
        if setting.key in extra:
            value = extra[setting.key]
            try:
                kwargs[setting.keyword] = setting.parse(value)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{setting.key}: {value!r}: {exc}") from None
    return kwargs


def check_bounds(
    non_negative: Mapping[str, int] | None = None, positive: Mapping[str, int] | None = None
) -> None:
    """ValueError naming the first setting (by its Kafka key) out of its bounds."""
    for name, value in (non_negative or {}).items():
        if value < 0:
            raise ValueError(f"{name}: {value} is negative")
    for name, value in (positive or {}).items():
        if value <= 0:
            raise ValueError(f"{name}: {value} must be positive")
