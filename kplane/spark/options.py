"""The options of Spark's Kafka source and sink, read as Spark reads them.

Spark hands a data source its options case-insensitively (keys lower-cased). ``kafka.*``
options are client settings: the prefix is dropped and the rest goes to kplane's client
(``kplane/client/``: ``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``, the
consumer's and the producer's settings). An option of Spark's Kafka source this data source
does not serve is refused with the reason, never ignored; a ``kafka.*`` key kplane's client
does not know is reported once as ignored (Kafka's clients warn about unknown keys too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import structlog

from kplane.client.settings import (
    CONSUMER_SETTINGS,
    PRODUCER_SETTINGS,
    as_bool,
    as_isolation_level,
)

log = structlog.get_logger(__name__)

EARLIEST = -2
"""In offset JSON: the partition's log start offset (Spark's and Kafka's -2)."""
LATEST = -1
"""In offset JSON: the partition's high watermark (last stable offset with read_committed)."""

CLIENT_PREFIX = "kafka."
STRATEGIES = ("assign", "subscribe", "subscribepattern")

REFUSED: dict[str, str] = {
    "minoffsetspertrigger": "minOffsetsPerTrigger is not served: a trigger reads what "
    "maxOffsetsPerTrigger allows (or everything) without waiting for a minimum",
    "maxtriggerdelay": "maxTriggerDelay is not served (it goes with minOffsetsPerTrigger)",
    "groupidprefix": "groupIdPrefix is not served: kplane's reader assigns partitions and "
    "joins no consumer group, so no group id is ever used",
    "kafka.group.id": "kafka.group.id is not served: kplane's reader assigns partitions and "
    "joins no consumer group",
    "kafka.auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported; set "
    "startingOffsets to 'earliest' or 'latest' instead (a restarted query always continues "
    "from its checkpoint)",
    "kafka.key.deserializer": "Kafka option 'key.deserializer' is not supported: keys are "
    "binary; deserialize them with DataFrame operations",
    "kafka.value.deserializer": "Kafka option 'value.deserializer' is not supported: values "
    "are binary; deserialize them with DataFrame operations",
    "kafka.enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
    "kafka.key.serializer": "Kafka option 'key.serializer' is not supported: keys are "
    "written as bytes (a string key as UTF-8)",
    "kafka.value.serializer": "Kafka option 'value.serializer' is not supported: values "
    "are written as bytes (a string value as UTF-8)",
}
"""Options of Spark's Kafka source and sink refused, with why."""

NAMES = {
    name.lower(): name
    for name in (
        "assign",
        "subscribe",
        "subscribePattern",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "failOnDataLoss",
        "minPartitions",
        "maxRecordsPerPartition",
        "maxOffsetsPerTrigger",
        "includeHeaders",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
    )
}
"""The read options served, by their lower-case key (as Spark hands them) -> their name."""
READ_OPTIONS = frozenset(NAMES)
WRITE_OPTIONS = frozenset(("topic", "includeheaders", "checkpointlocation", "path"))

_CONSUMER_KEYS = frozenset(s.key for s in CONSUMER_SETTINGS) - {
    "group.id",
    "group.protocol",
    "group.instance.id",
    "group.remote.assignor",
    "max.poll.interval.ms",
}
_PRODUCER_KEYS = frozenset(s.key for s in PRODUCER_SETTINGS)


class OptionError(ValueError):
    """An option Spark's Kafka source would refuse, or one this data source does not serve."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: ``earliest``/``latest``, offsets per partition (-2
    earliest, -1 latest), one timestamp for every partition, or timestamps per partition."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int = 0
    no_match: str = "error"  # a start by timestamp with no record at or after it: error | latest


@dataclass(frozen=True)
class ReadOptions:
    """A read's options, checked; picklable (Spark ships them to its Python workers)."""

    client: dict[str, str]
    strategy: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[tuple[str, int], ...] = ()
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1_000

    @property
    def isolation_level(self) -> int:
        """0 read_uncommitted (Kafka's and Spark's default), 1 read_committed."""
        return as_isolation_level(self.client.get("isolation.level", "read_uncommitted"))


@dataclass(frozen=True)
class WriteOptions:
    """A write's options, checked; picklable."""

    client: dict[str, str]
    topic: str | None = None


def refuse_unserved(options: Mapping[str, str]) -> None:
    """OptionError for the first option of Spark's Kafka source this source does not serve."""
    for key in sorted(options):
        reason = REFUSED.get(key.lower())
        if reason is not None:
            raise OptionError(reason)


def client_settings(options: Mapping[str, str], known: frozenset[str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix; OptionError without
    ``kafka.bootstrap.servers``, a warning for keys kplane's client does not act on."""
    settings = {
        key[len(CLIENT_PREFIX) :]: str(value)
        for key, value in options.items()
        if key.lower().startswith(CLIENT_PREFIX)
    }
    # kio's schemas come with ClientConfig: imported here, so a Python worker that only
    # asks the source for its schema does not load them
    from kplane.common.network.config import ClientConfig

    if "bootstrap.servers" not in settings:
        raise OptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
        )
    connection = {f.name.replace("_", ".") for f in fields(ClientConfig)} - {"extra"}
    ignored = sorted(k for k in settings if k not in connection | known)
    if ignored:
        log.warning(
            "kafka options kplane's client does not act on, ignored",
            options=[CLIENT_PREFIX + k for k in ignored],
        )
    try:
        ClientConfig.from_properties(settings)
    except ValueError as exc:
        raise OptionError(f"kafka.* options: {exc}") from None
    return settings


def _warn_unknown(options: Mapping[str, str], served: frozenset[str]) -> None:
    unknown = sorted(
        k for k in options if not k.lower().startswith(CLIENT_PREFIX) and k.lower() not in served
    )
    if unknown:
        log.warning("options Spark's Kafka source does not have, ignored", options=unknown)


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """A batch (``streaming`` false) or streaming read's options, checked as Spark's Kafka
    source checks them; OptionError naming the option otherwise."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    refuse_unserved(opts)
    _warn_unknown(opts, READ_OPTIONS)
    client = client_settings(opts, _CONSUMER_KEYS)
    chosen = [s for s in STRATEGIES if s in opts]
    if len(chosen) != 1:
        raise OptionError(
            ("Only one" if chosen else "One")
            + " of the following options "
            + ("can" if chosen else "must")
            + " be specified for Kafka source: assign, subscribe, subscribePattern"
        )
    strategy = chosen[0]
    value = opts[strategy].strip()
    topics: tuple[str, ...] = ()
    pattern = ""
    assigned: tuple[tuple[str, int], ...] = ()
    if strategy == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"No topics to subscribe to in option 'subscribe': {value!r}")
    elif strategy == "subscribepattern":
        if not value:
            raise OptionError("Pattern to subscribe is empty in option 'subscribePattern'")
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(f"subscribePattern: {value!r}: {exc}") from None
        pattern = value
    else:
        assigned = _assigned(value)
    strategy_on_no_match = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy_on_no_match not in ("error", "latest"):
        raise OptionError(
            f"startingOffsetsByTimestampStrategy: {strategy_on_no_match!r} is not error or latest"
        )
    starting = _offset_spec(
        opts, "starting", "latest" if streaming else "earliest", strategy_on_no_match
    )
    ending = _offset_spec(opts, "ending", "latest", "latest")
    if streaming:
        for key in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if key in opts:
                raise OptionError(f"{NAMES[key]}: not valid in streaming queries")
    else:
        _check_batch_bounds(starting, ending)
    return ReadOptions(
        client=client,
        strategy=strategy,
        topics=topics,
        pattern=pattern,
        assigned=assigned,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        min_partitions=_positive(opts, "minpartitions"),
        max_records_per_partition=_positive(opts, "maxrecordsperpartition"),
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger"),
        include_headers=_bool(opts, "includeheaders", False),
        poll_timeout_ms=_positive(opts, "kafkaconsumer.polltimeoutms") or 120_000,
        fetch_offset_retries=_non_negative(opts, "fetchoffset.numretries", 3),
        fetch_offset_retry_interval_ms=_non_negative(opts, "fetchoffset.retryintervalms", 1_000),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """A write's options: ``topic`` and the producer's ``kafka.*`` settings."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    refuse_unserved(opts)
    _warn_unknown(opts, WRITE_OPTIONS)
    client = client_settings(opts, _PRODUCER_KEYS)
    client.setdefault("enable.idempotence", "true")
    topic = opts.get("topic")
    return WriteOptions(client=client, topic=topic.strip() if topic is not None else None)


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    try:
        return as_bool(opts[key])
    except ValueError:
        raise OptionError(f"{NAMES[key]}: {opts[key]!r} is not true or false") from None


def _long(opts: Mapping[str, str], key: str) -> int | None:
    if key not in opts:
        return None
    try:
        return int(opts[key].strip())
    except ValueError:
        raise OptionError(
            f"{NAMES[key]}: expected a single long value, got {opts[key]!r}"
        ) from None


def _positive(opts: Mapping[str, str], key: str) -> int | None:
    value = _long(opts, key)
    if value is not None and value <= 0:
        raise OptionError(f"{NAMES[key]} must be positive, not {value}")
    return value


def _non_negative(opts: Mapping[str, str], key: str, default: int) -> int:
    value = _long(opts, key)
    if value is None:
        return default
    if value < 0:
        raise OptionError(f"{NAMES[key]} must not be negative, not {value}")
    return value


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise OptionError(
            f'{what}: expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}}, '
            f"got {text!r}"
        ) from None


def _assigned(text: str) -> tuple[tuple[str, int], ...]:
    """``{"topicA":[0,1],"topicB":[2,4]}`` -> sorted (topic, partition) pairs."""
    if not text.startswith("{"):
        raise OptionError(f"No topicpartitions to assign in option 'assign': {text!r}")
    data = _json(text, "assign")
    try:
        pairs = {(str(t), int(p)) for t, parts in data.items() for p in parts}
    except (AttributeError, TypeError, ValueError):
        raise OptionError(f'assign: expected e.g. {{"topicA":[0,1]}}, got {text!r}') from None
    if not pairs:
        raise OptionError(f"No topicpartitions to assign in option 'assign': {text!r}")
    return tuple(sorted(pairs))


def partition_values(text: str, what: str) -> dict[tuple[str, int], int]:
    """``{"topic":{"0":23,"1":-2}}`` -> {(topic, 0): 23, (topic, 1): -2}."""
    data = _json(text, what)
    try:
        return {
            (str(topic), int(p)): int(v) for topic, parts in data.items() for p, v in parts.items()
        }
    except (AttributeError, TypeError, ValueError):
        raise OptionError(
            f'{what}: expected e.g. {{"topicA":{{"0":23,"1":-1}}}}, got {text!r}'
        ) from None


def _offset_spec(opts: Mapping[str, str], side: str, default: str, no_match: str) -> OffsetSpec:
    """Spark's order of preference: ``<side>Timestamp``, ``<side>OffsetsByTimestamp``,
    ``<side>Offsets``, the default."""
    timestamp = _long(opts, f"{side}timestamp")
    if timestamp is not None:
        return OffsetSpec("timestamp", timestamp=timestamp, no_match=no_match)
    by_timestamp = opts.get(f"{side}offsetsbytimestamp")
    if by_timestamp is not None:
        values = partition_values(by_timestamp, f"{side}OffsetsByTimestamp")
        return OffsetSpec("timestamps", offsets=values, no_match=no_match)
    text = opts.get(f"{side}offsets", default).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    values = partition_values(text, f"{side}Offsets")
    bad = {tp: o for tp, o in values.items() if o < EARLIEST}
    if bad:
        raise OptionError(f"{side}Offsets: {bad} are neither offsets nor -2/-1")
    return OffsetSpec("offsets", offsets=values)


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Spark's batch rules: no start at latest, no end at earliest, the same partitions in
    both JSONs, no start after its end."""
    if starting.kind == "latest" or (
        starting.kind == "offsets" and LATEST in starting.offsets.values()
    ):
        raise OptionError("startingOffsets can't be latest for batch queries on Kafka")
    if ending.kind == "earliest" or (
        ending.kind == "offsets" and EARLIEST in ending.offsets.values()
    ):
        raise OptionError("endingOffsets can't be earliest for batch queries on Kafka")
    if starting.kind == ending.kind and starting.kind in ("offsets", "timestamps"):
        if set(starting.offsets) != set(ending.offsets):
            raise OptionError(
                "starting and ending offsets name different partitions: "
                f"{sorted(starting.offsets)} and {sorted(ending.offsets)}"
            )
        for tp, start in starting.offsets.items():
            end = ending.offsets[tp]
            if start >= 0 and end >= 0 and start > end:
                raise OptionError(f"{tp[0]}-{tp[1]}: the start {start} is after the end {end}")
