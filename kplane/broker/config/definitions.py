"""The table of broker configs kplane honours: Kafka's names, types, defaults and KIP-226 scopes.

Values are parsed as Kafka's ``ConfigDef.parseType`` does: strings are trimmed, booleans are
``true``/``false`` in any case, lists are comma-separated with the items trimmed (an empty value
is ``[]``).
"""

from __future__ import annotations

import enum
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kplane.broker.config.errors import ConfigException


class ConfigType(enum.Enum):
    """How a config's text becomes a value."""

    BOOLEAN = "boolean"
    SHORT = "short"
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    STRING = "string"
    LIST = "list"
    PASSWORD = "password"
    CLASS = "class"

    @property
    def wire_code(self) -> int:
        """Kafka's code for this type in DescribeConfigs v3+ ``config_type``."""
        return _WIRE_CODES[self]


UNKNOWN_CONFIG_TYPE = 0
"""DescribeConfigs' ``config_type`` for a config whose type is not known."""

_WIRE_CODES = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.SHORT: 4,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
    ConfigType.CLASS: 8,
    ConfigType.PASSWORD: 9,
}


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class DynamicScope(enum.Enum):
    """Where KIP-226 lets a config be changed at runtime (Kafka's "update mode")."""

    READ_ONLY = "read-only"  # server.properties only; a restart applies a change
    PER_BROKER = "per-broker"  # /config/brokers/<id>
    CLUSTER_WIDE = "cluster-wide"  # /config/brokers/<default>, or per broker


class Password:
    """A sensitive value that never shows itself in logs or reprs (Kafka's ``Password``)."""

    __slots__ = ("value",)
    HIDDEN = "[hidden]"

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return self.HIDDEN

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


Validator = Callable[[str, Any], None]
"""Called with (config name, parsed non-null value); raises ConfigException when invalid."""


def _invalid(name: str, value: Any, expectation: str) -> ConfigException:
    return ConfigException(f'{name}: invalid value "{value}": {expectation}', name=name)


@dataclass(frozen=True, slots=True)
class Range:
    """A number in ``[low, high]``; either bound may be open (None)."""

    low: float | None = None
    high: float | None = None

    def __call__(self, name: str, value: Any) -> None:
        if self.low is not None and value < self.low:
            raise _invalid(name, value, f"value must be at least {self.low}")
        if self.high is not None and value > self.high:
            raise _invalid(name, value, f"value must be no more than {self.high}")

    def __str__(self) -> str:
        if self.high is None:
            return f"[{self.low},...]"
        if self.low is None:
            return f"[...,{self.high}]"
        return f"[{self.low},...,{self.high}]"


def at_least(low: int) -> Range:
    return Range(low=low)


def between(low: int, high: int) -> Range:
    return Range(low=low, high=high)


@dataclass(frozen=True, slots=True)
class OneOf:
    """A string among a fixed set, compared case-insensitively when ``ignore_case``."""

    choices: tuple[str, ...]
    ignore_case: bool = False

    def __call__(self, name: str, value: Any) -> None:
        ok = (
            value.upper() in (c.upper() for c in self.choices)
            if self.ignore_case
            else value in self.choices
        )
        if not ok:
            raise _invalid(name, value, f"expected one of {', '.join(self.choices)}")

    def __str__(self) -> str:
        return ", ".join(self.choices)


@dataclass(frozen=True, slots=True)
class ValidList:
    """A list whose every item is among a fixed set (Kafka's ``ValidList.in``)."""

    choices: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        for item in value:
            if item not in self.choices:
                raise _invalid(
                    name, ",".join(value), f"{item!r} is not one of {', '.join(self.choices)}"
                )

    def __str__(self) -> str:
        return f"[{', '.join(self.choices)}]"


_HOST = re.compile(r"^([A-Za-z0-9][A-Za-z0-9.-]*|\[?[0-9A-Fa-f:.]+\]?)$")


def parse_host_counts(name: str, text: str) -> dict[str, int]:
    """``host:count,host:count`` (``max.connections.per.ip.overrides``): the count of each
    host or IP address; ConfigException naming ``name`` for an item that is not one."""
    counts: dict[str, int] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        host, _, count = item.rpartition(":")
        host = host.strip()
        if not host or not _HOST.match(host) or not count.strip().isdigit():
            raise _invalid(name, text, f"{item!r} is not host:count")
        counts[host.strip("[]")] = int(count)
    return counts


@dataclass(frozen=True, slots=True)
class HostCounts:
    """A comma-separated list of ``host:count`` (Kafka's map of connection overrides)."""

    def __call__(self, name: str, value: Any) -> None:
        parse_host_counts(name, value)

    def __str__(self) -> str:
        return "host:count,host:count,..."


@dataclass(frozen=True, slots=True)
class ThrottledReplicaList:
    """``[PartitionId]:[BrokerId],...`` or ``*`` (Kafka's ThrottledReplicaListValidator)."""

    def __call__(self, name: str, value: Any) -> None:
        items = [item.strip() for item in value]
        if items == ["*"]:
            return
        for item in items:
            if not _THROTTLED_REPLICA.match(item):
                raise _invalid(
                    name,
                    ",".join(value),
                    "must be the literal '*' or a list of replicas in the form "
                    "[PartitionId]:[BrokerId],[PartitionId]:[BrokerId],...",
                )

    def __str__(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


@dataclass(frozen=True, slots=True)
class ClassNames:
    """A list of dotted Python import paths ``module.Class``."""

    def __call__(self, name: str, value: Any) -> None:
        for item in value:
            if not _CLASS_NAME.match(item):
                raise _invalid(name, ",".join(value), f"{item!r} is not a dotted class name")

    def __str__(self) -> str:
        return "import paths module.Class"


_SHORT_RANGE = (-(2**15), 2**15 - 1)
_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
_THROTTLED_REPLICA = re.compile(r"^[0-9]+:[0-9]+$")
_CLASS_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
LONG_MAX = 2**63 - 1
"""Java's ``Long.MAX_VALUE``, Kafka's default for several 'never' settings."""
INT_MAX = 2**31 - 1
"""Java's ``Integer.MAX_VALUE``, Kafka's default for the connection limits: no limit."""
DOUBLE_MAX = sys.float_info.max
"""Java's ``Double.MAX_VALUE``."""




@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One broker config: what it is called, how it parses, its default and where it can change."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    importance: Importance = Importance.MEDIUM
    dynamic: DynamicScope = DynamicScope.READ_ONLY
    validator: Validator | None = field(default=None, compare=False)
    honoured: bool = True
    """Whether the broker acts on this config yet; others are accepted, validated and named at
    start-up (``config accepted but not acted on yet``)."""
    listener_prefix_required: bool = False
    """Dynamically settable only per listener, as ``listener.name.<listener>.<name>`` (Kafka's
    ``DynamicSecurityConfigs``: the SSL key and trust store configs); in server.properties
    the bare name is fine."""

    @property
    def sensitive(self) -> bool:
        """Sensitive values (passwords) are never returned by DescribeConfigs."""
        return self.type is ConfigType.PASSWORD

    def parse(self, raw: str | None, *, key: str | None = None) -> Any:
        """Parse the text of this config (None means unset: the default) and validate it.

        ``key`` is the name errors report, when the value came from another key (a
        ``listener.name.<listener>.`` override).
        """
        if raw is None:
            return self.default
        return parse_value(key or self.name, self.type, raw, self.validator)


def parse_value(name: str, ctype: ConfigType, raw: str, validator: Validator | None) -> Any:
    """Parse ``raw`` as a ``ctype`` value and validate it; errors name ``name``."""
    value = _parse_type(name, ctype, raw)
    if validator is not None and value is not None:
        validator(name, value)
    return value


def _parse_type(name: str, ctype: ConfigType, raw: str) -> Any:
    text = raw.strip()
    if ctype is ConfigType.STRING:
        return text
    if ctype is ConfigType.PASSWORD:
        return Password(text)
    if ctype is ConfigType.LIST:
        return [] if not text else [item.strip() for item in text.split(",")]
    if ctype is ConfigType.BOOLEAN:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise _invalid(name, raw, "expected true or false")
    if ctype in (ConfigType.SHORT, ConfigType.INT, ConfigType.LONG):
        low, high = {
            ConfigType.SHORT: _SHORT_RANGE,
            ConfigType.INT: _INT_RANGE,
            ConfigType.LONG: _LONG_RANGE,
        }[ctype]
        try:
            number = int(text)
        except ValueError:
            number = None
        if number is None or not low <= number <= high or "_" in text:
            raise _invalid(name, raw, f"not a number of type {ctype.name}")
        return number
    if ctype is ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise _invalid(name, raw, "not a number of type DOUBLE") from None
    if ctype is ConfigType.CLASS:
        if not _CLASS_NAME.match(text):
            raise _invalid(name, raw, "not a dotted class name")
        return text
    raise AssertionError(ctype)  # pragma: no cover


H, M, L = Importance.HIGH, Importance.MEDIUM, Importance.LOW
RO, BROKER, CLUSTER = DynamicScope.READ_ONLY, DynamicScope.PER_BROKER, DynamicScope.CLUSTER_WIDE
T = ConfigType
_PROTOCOLS = OneOf(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), ignore_case=True)
_STORE_TYPES = OneOf(("JKS", "PKCS12", "PEM"), ignore_case=True)
COMPRESSION_TYPES = OneOf(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))
CLEANUP_POLICIES = ValidList(("compact", "delete"))
TIMESTAMP_TYPES = OneOf(("CreateTime", "LogAppendTime"))


def _store_config(
    name: str, ctype: ConfigType, default: Any, doc: str, validator: Validator | None = None
) -> ConfigDef:
    """An SSL key or trust store config: per broker, dynamically only per listener (Kafka's
    ``SslConfigs.RECONFIGURABLE_CONFIGS``)."""
    scope = DynamicScope.PER_BROKER
    return ConfigDef(name, ctype, default, doc, M, scope, validator, listener_prefix_required=True)


_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"

# fmt: off
CONFIG_DEFS: tuple[ConfigDef, ...] = (
    # Broker identity and metadata store
    ConfigDef("broker.id", T.INT, 0,
              "Id of this broker, unique in the cluster. -1 (Kafka's 'generate one') means 0 "
              "in kplane.", H, RO, at_least(-1)),
    ConfigDef("zookeeper.connect", T.STRING, None,
              "ZooKeeper connection string host:port[,host:port][/chroot]. Unset: the "
              "embedded metadata store under log.dirs.", H, RO),
    ConfigDef("zookeeper.session.timeout.ms", T.INT, 18000,
              "ZooKeeper session timeout: a broker silent this long loses its registration "
              "(and the controller role).", H, RO, at_least(1)),
    ConfigDef("zookeeper.connection.timeout.ms", T.INT, None,
              "How long start-up waits to connect to ZooKeeper. Unset: the session timeout.",
              H, RO, at_least(1)),
    # Listeners (KIP-2, KIP-103, KIP-291)
    ConfigDef("listeners", T.STRING, "PLAINTEXT://:9092",
              "Comma-separated NAME://host:port the broker binds. An empty host binds every "
              "interface; port 0 picks a free port.", H, BROKER),
    ConfigDef("advertised.listeners", T.STRING, None,
              "Comma-separated NAME://host:port published to clients and other brokers. "
              "Unset: the listeners. Wildcard hosts are not allowed.", H, BROKER),
    ConfigDef("listener.security.protocol.map", T.STRING, _PROTOCOL_MAP,
              "Comma-separated NAME:PROTOCOL pairs giving each listener name its security "
              "protocol.", L, BROKER),
    ConfigDef("inter.broker.listener.name", T.STRING, None,
              "Listener other brokers use to reach this one. Set this or "
              "security.inter.broker.protocol, not both.", M, RO),
    ConfigDef("security.inter.broker.protocol", T.STRING, "PLAINTEXT",
              "Security protocol between brokers; selects the listener of the same name.",
              M, RO, _PROTOCOLS),
    ConfigDef("control.plane.listener.name", T.STRING, None,
              "Listener reserved for controller requests (KIP-291), served by its own "
              "processor, queue and handler. Unset: controller traffic uses the inter-broker "
              "listener.", H, RO),
    ConfigDef("broker.rack", T.STRING, None,
              "Rack of the broker, used to spread replicas across racks.", M, RO),
    # Network, request handling and thread pools (KIP-226: resizable, cluster-wide)
    ConfigDef("num.network.threads", T.INT, 3,
              "Processor threads per listener that read requests and write responses.",
              H, CLUSTER, at_least(1)),
    ConfigDef("num.io.threads", T.INT, 8,
              "Request handler threads that process requests.", H, CLUSTER, at_least(1)),
    ConfigDef("background.threads", T.INT, 10,
              "Threads for background work such as log deletion.", H, CLUSTER, at_least(1),
              honoured=False),
    ConfigDef("num.replica.fetchers", T.INT, 1,
              "Fetcher threads replicating from each source broker.",
              H, CLUSTER, at_least(1)),
    ConfigDef("num.recovery.threads.per.data.dir", T.INT, 1,
              "Threads per log directory that recover logs at startup and flush them at "
              "shutdown.", H, CLUSTER, at_least(1), honoured=False),
    ConfigDef("queued.max.requests", T.INT, 500,
              "Data-plane requests that may wait for a handler before processors block.",
              H, RO, at_least(1)),
    ConfigDef("socket.request.max.bytes", T.INT, 104857600,
              "Largest request frame accepted; larger sizes close the connection.",
              H, RO, at_least(1)),
    ConfigDef("queued.max.request.bytes", T.LONG, 268435456,
              "Bytes of requests read but not yet answered, over all connections, before "
              "processors stop reading new requests (a frame is let in while any room is "
              "left). -1: no bound, Kafka's default; kplane bounds it at 256 MiB.",
              M, RO, at_least(-1)),
    ConfigDef("sasl.server.max.receive.size", T.INT, 524288,
              "Largest frame accepted before SASL authentication completes; larger sizes "
              "close the connection.", L, RO, at_least(1)),
    ConfigDef("socket.send.buffer.bytes", T.INT, 102400,
              "SO_SNDBUF of accepted sockets; -1 keeps the OS default.", H, RO),
    ConfigDef("socket.receive.buffer.bytes", T.INT, 102400,
              "SO_RCVBUF of accepted sockets; -1 keeps the OS default.", H, RO),
    ConfigDef("connections.max.idle.ms", T.LONG, 600000,
              "Idle connections are closed after this long; so is a connection whose request "
              "frame has not arrived whole this long after its first byte (a trickle of bytes "
              "does not keep it open).", M, RO),
    # Connection limits (KIP-402, Kafka's ConnectionQuotas); max.connections and
    # max.connection.creation.rate also per listener as listener.name.<listener>.<name>
    ConfigDef("max.connections", T.INT, INT_MAX,
              "Connections the broker keeps open at once; also per listener as "
              "listener.name.<listener>.max.connections (unset: this value). A new connection "
              "past either limit waits (the listener stops accepting) until one closes. The "
              "inter-broker and control-plane listeners are held only by their own limit when "
              "there are other listeners: a connection to them past the broker-wide one "
              "closes the least recently used connection of another listener.",
              M, CLUSTER, at_least(0)),
    ConfigDef("max.connections.per.ip", T.INT, INT_MAX,
              "Connections one client address may keep open; a new one past it is closed at "
              "once. 0 is allowed only with max.connections.per.ip.overrides.",
              M, CLUSTER, at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", T.STRING, "",
              "Per host or IP address limits instead of max.connections.per.ip, e.g. "
              "hostName:100,127.0.0.1:200.", M, CLUSTER, HostCounts()),
    ConfigDef("max.connection.creation.rate", T.INT, INT_MAX,
              "New connections per second the broker accepts (measured as Kafka measures a "
              "quota: over 11 one-second samples); also per listener as "
              "listener.name.<listener>.max.connection.creation.rate (unset: this value). "
              "Past either the listener delays accepting. The inter-broker and control-plane "
              "listeners are held only by their own limit.", M, CLUSTER, at_least(0)),
    # Logs; the cluster-wide ones are the broker defaults of topic configs (KIP-226)
    ConfigDef("log.dirs", T.LIST, None,
              "Comma-separated directories holding partition logs. Unset: log.dir.", H, RO),
    ConfigDef("log.dir", T.LIST, ["/tmp/kafka-logs"],
              "Log directory used when log.dirs is unset.", H, RO),
    ConfigDef("log.segment.bytes", T.INT, 1073741824,
              "Largest size of one log segment file.", H, CLUSTER, at_least(14)),
    ConfigDef("log.roll.ms", T.LONG, None,
              "A new segment is rolled after this many milliseconds; unset: log.roll.hours.",
              H, CLUSTER),
    ConfigDef("log.roll.hours", T.INT, 168,
              "A new segment is rolled after this many hours; log.roll.ms wins.",
              H, RO, at_least(1)),
    ConfigDef("log.roll.jitter.ms", T.LONG, None,
              "Largest random jitter subtracted from the roll time, in milliseconds; unset: "
              "log.roll.jitter.hours.", H, CLUSTER),
    ConfigDef("log.roll.jitter.hours", T.INT, 0,
              "Largest random jitter subtracted from the roll time, in hours; "
              "log.roll.jitter.ms wins.", H, RO, at_least(0)),
    ConfigDef("log.retention.hours", T.INT, 168,
              "Hours a segment is kept; log.retention.minutes and log.retention.ms win.",
              H, RO),
    ConfigDef("log.retention.minutes", T.INT, None,
              "Minutes a segment is kept; log.retention.ms wins.", H, RO),
    ConfigDef("log.retention.ms", T.LONG, None,
              "Milliseconds a segment is kept; -1 keeps it forever. Unset: "
              "log.retention.minutes, then log.retention.hours.", H, CLUSTER),
    ConfigDef("log.retention.bytes", T.LONG, -1,
              "Largest size of a partition log before old segments go; -1 means no limit.",
              H, CLUSTER),
    ConfigDef("log.cleanup.policy", T.LIST, ["delete"],
              "What happens to old segments: delete, compact, or both.",
              M, CLUSTER, CLEANUP_POLICIES),
    ConfigDef("log.index.size.max.bytes", T.INT, 10485760,
              "Largest size of a segment's offset index.", M, CLUSTER, at_least(4)),
    ConfigDef("log.index.interval.bytes", T.INT, 4096,
              "Bytes of records between two offset index entries.", M, CLUSTER, at_least(0)),
    ConfigDef("log.flush.interval.messages", T.LONG, LONG_MAX,
              "Records appended to a partition before it is flushed to disk.",
              H, CLUSTER, at_least(1)),
    ConfigDef("log.flush.interval.ms", T.LONG, None,
              "Milliseconds a record may stay unflushed; unset: "
              "log.flush.scheduler.interval.ms.", H, CLUSTER),
    ConfigDef("log.flush.scheduler.interval.ms", T.LONG, LONG_MAX,
              "How often the flusher checks whether a log needs flushing.", H, RO),
    ConfigDef("log.segment.delete.delay.ms", T.LONG, 60000,
              "Delay before a deleted segment's files are removed.", H, CLUSTER, at_least(0)),
    ConfigDef("log.retention.check.interval.ms", T.LONG, 300000,
              "How often logs are checked for segments to delete by retention.",
              M, RO, at_least(1)),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", T.INT, 60000,
              "How often each log dir's recovery-point-offset-checkpoint is written.",
              H, RO, at_least(0)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", T.INT, 60000,
              "How often each log dir's log-start-offset-checkpoint is written.",
              H, RO, at_least(0)),
    ConfigDef("log.preallocate", T.BOOLEAN, False,
              "Preallocate the file of a new segment.", M, CLUSTER, honoured=False),
    ConfigDef("log.message.timestamp.type", T.STRING, "CreateTime",
              "Timestamp stored with records: the producer's (CreateTime) or the broker's "
              "append time (LogAppendTime).", M, CLUSTER, TIMESTAMP_TYPES, honoured=False),
    ConfigDef("log.message.timestamp.difference.max.ms", T.LONG, LONG_MAX,
              "Largest difference between a CreateTime timestamp and the broker's clock "
              "before the batch is rejected.", M, CLUSTER, at_least(0)),
    ConfigDef("log.message.downconversion.enable", T.BOOLEAN, True,
              "Down-convert record batches for old Fetch versions; false fails them with "
              "UNSUPPORTED_VERSION.", L, CLUSTER, honoured=False),
    ConfigDef("compression.type", T.STRING, "producer",
              "Compression of stored batches; 'producer' keeps the producer's codec.",
              H, CLUSTER, COMPRESSION_TYPES, honoured=False),
    ConfigDef("message.max.bytes", T.INT, 1048588,
              "Largest record batch the broker accepts.", H, CLUSTER, at_least(0)),
    ConfigDef("min.insync.replicas", T.INT, 1,
              "Replicas that must acknowledge an acks=all produce.", H, CLUSTER, at_least(1)),
    ConfigDef("auto.leader.rebalance.enable", T.BOOLEAN, True,
              "The controller moves leaderships back to preferred replicas when a broker's "
              "imbalance passes leader.imbalance.per.broker.percentage.", H, RO),
    ConfigDef("leader.imbalance.check.interval.seconds", T.LONG, 300,
              "How often the controller checks the leader imbalance.", H, RO, at_least(1)),
    ConfigDef("leader.imbalance.per.broker.percentage", T.INT, 10,
              "Share of a broker's preferred partitions led elsewhere that triggers a "
              "preferred-leader election.", H, RO, at_least(0)),
    ConfigDef("controlled.shutdown.enable", T.BOOLEAN, True,
              "On SIGTERM, ask the controller to move this broker's leaderships away first.",
              M, RO),
    ConfigDef("controlled.shutdown.max.retries", T.INT, 3,
              "Controlled-shutdown attempts before the broker stops regardless.", M, RO,
              at_least(0)),
    ConfigDef("controlled.shutdown.retry.backoff.ms", T.LONG, 5000,
              "Pause between controlled-shutdown attempts.", L, RO, at_least(0)),
    ConfigDef("unclean.leader.election.enable", T.BOOLEAN, False,
              "Allow a replica outside the ISR to become leader, losing data.", H, CLUSTER),
    # Log cleaner (KIP-226: cluster-wide); its topic-config defaults are log.cleaner.*.ms/ratio
    ConfigDef("log.cleaner.enable", T.BOOLEAN, True,
              "Run the log cleaner, which compacts topics whose cleanup.policy contains compact.",
              M, RO),
    ConfigDef("log.cleaner.threads", T.INT, 1,
              "Background threads compacting logs.", M, CLUSTER, at_least(0)),
    ConfigDef("log.cleaner.io.max.bytes.per.second", T.DOUBLE, DOUBLE_MAX,
              "Throttle of the cleaner's reads plus writes, in bytes per second.", M, CLUSTER),
    ConfigDef("log.cleaner.dedupe.buffer.size", T.LONG, 134217728,
              "Memory for deduplication across all cleaner threads.", M, CLUSTER),
    ConfigDef("log.cleaner.io.buffer.size", T.INT, 524288,
              "I/O buffer memory across all cleaner threads.", M, CLUSTER, at_least(0)),
    ConfigDef("log.cleaner.io.buffer.load.factor", T.DOUBLE, 0.9,
              "Load factor of the cleaner's dedupe buffer.", M, CLUSTER),
    ConfigDef("log.cleaner.backoff.ms", T.LONG, 15000,
              "Sleep of a cleaner thread when there is no log to clean.",
              M, CLUSTER, at_least(0)),
    ConfigDef("log.cleaner.min.cleanable.ratio", T.DOUBLE, 0.5,
              "Smallest ratio of dirty log to total log for a log to be compacted.",
              M, CLUSTER, between(0, 1)),
    ConfigDef("log.cleaner.delete.retention.ms", T.LONG, 86400000,
              "How long delete tombstones are kept in compacted topics.",
              M, CLUSTER, at_least(0)),
    ConfigDef("log.cleaner.min.compaction.lag.ms", T.LONG, 0,
              "Least time a record stays uncompacted.", M, CLUSTER, at_least(0)),
    ConfigDef("log.cleaner.max.compaction.lag.ms", T.LONG, LONG_MAX,
              "Most time a record may stay uncompacted.", M, CLUSTER, at_least(1)),
    # Topics
    ConfigDef("num.partitions", T.INT, 1,
              "Partitions of an auto-created topic.", M, RO, at_least(1)),
    ConfigDef("default.replication.factor", T.INT, 1,
              "Replication factor of an auto-created topic.", M, RO, at_least(1)),
    ConfigDef("auto.create.topics.enable", T.BOOLEAN, True,
              "Create a topic when a client asks for metadata of an unknown one.", H, RO),
    ConfigDef("delete.topic.enable", T.BOOLEAN, True,
              "Allow DeleteTopics; false makes it fail.", H, RO),
    ConfigDef("alter.config.policy.class.name", T.CLASS, None,
              "Policy validating AlterConfigs and IncrementalAlterConfigs requests: the "
              "import path module.Class of a class whose validate(request) raises to refuse.",
              L, RO),
    # Replication and fetch
    ConfigDef("replica.lag.time.max.ms", T.LONG, 30000,
              "A follower that has not caught up for this long leaves the ISR.", H, RO,
              at_least(1)),
    ConfigDef("leader.replication.throttled.rate", T.LONG, LONG_MAX,
              "Bytes per second a leader sends to out-of-sync followers of the replicas its "
              "topics list in leader.replication.throttled.replicas.", M, BROKER, at_least(0)),
    ConfigDef("follower.replication.throttled.rate", T.LONG, LONG_MAX,
              "Bytes per second an out-of-sync follower fetches for the replicas its topics "
              "list in follower.replication.throttled.replicas.", M, BROKER, at_least(0)),
    ConfigDef("replication.quota.window.num", T.INT, 11,
              "Samples kept to compute a replication throttle's rate.", L, RO, at_least(1)),
    ConfigDef("replication.quota.window.size.seconds", T.INT, 1,
              "Span of one replication throttle sample.", L, RO, at_least(1)),
    ConfigDef("replica.fetch.max.bytes", T.INT, 1048576,
              "Bytes a follower asks for per partition in one fetch (at least one batch).",
              M, RO, at_least(0)),
    ConfigDef("replica.fetch.response.max.bytes", T.INT, 10485760,
              "Bytes a follower asks for in one whole fetch.", M, RO, at_least(0)),
    ConfigDef("replica.fetch.min.bytes", T.INT, 1,
              "Bytes a follower's fetch waits for at the leader.", H, RO),
    ConfigDef("replica.fetch.wait.max.ms", T.INT, 500,
              "Longest a follower's fetch waits at the leader.", H, RO, at_least(0)),
    ConfigDef("replica.fetch.backoff.ms", T.INT, 1000,
              "Pause of a follower's fetcher after an error.", M, RO, at_least(0)),
    ConfigDef("replica.socket.timeout.ms", T.INT, 30000,
              "Request timeout of a follower's fetches (plus replica.fetch.wait.max.ms).",
              H, RO),
    ConfigDef("replica.socket.receive.buffer.bytes", T.INT, 65536,
              "SO_RCVBUF of a follower's fetch connections; -1 keeps the OS default.", L, RO),
    ConfigDef("fetch.max.bytes", T.INT, 57671680,
              "Largest total size of one Fetch response.", M, RO, at_least(1024)),
    # Group coordinator and offsets
    ConfigDef("offsets.topic.num.partitions", T.INT, 50,
              "Partitions of __consumer_offsets.", H, RO, at_least(1)),
    ConfigDef("offsets.topic.replication.factor", T.SHORT, 3,
              "Replication factor of __consumer_offsets.", H, RO, at_least(1), honoured=False),
    ConfigDef("offsets.retention.minutes", T.INT, 10080,
              "Committed offsets of an empty group are kept this long.", H, RO, at_least(1)),
    ConfigDef("group.initial.rebalance.delay.ms", T.INT, 3000,
              "How long the first rebalance of a new group waits for more members.", M, RO),
    ConfigDef("group.min.session.timeout.ms", T.INT, 6000,
              "Smallest session timeout a member may ask for.", M, RO),
    ConfigDef("group.max.session.timeout.ms", T.INT, 1800000,
              "Largest session timeout a member may ask for.", M, RO),
    ConfigDef("group.max.size", T.INT, 2147483647,
              "Most members one group may hold.", M, RO, at_least(1)),
    # Transactions and idempotence
    ConfigDef("transactional.id.expiration.ms", T.INT, 604800000,
              "A transactional id without transaction updates for this long expires.",
              H, RO, at_least(1)),
    ConfigDef("transaction.max.timeout.ms", T.INT, 900000,
              "Largest transaction.timeout.ms a producer may ask for (larger: "
              "INVALID_TRANSACTION_TIMEOUT).", H, RO, at_least(1)),
    ConfigDef("transaction.state.log.num.partitions", T.INT, 50,
              "Partitions of __transaction_state: transactional ids map to them, and "
              "their coordinators with them.", H, RO, at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", T.SHORT, 3,
              "Replication factor of __transaction_state (kplane keeps transaction state "
              "in the metadata store).", H, RO, at_least(1), honoured=False),
    ConfigDef("transaction.state.log.min.isr", T.INT, 2,
              "min.insync.replicas of __transaction_state (kplane keeps transaction state "
              "in the metadata store).", H, RO, at_least(1), honoured=False),
    ConfigDef("transaction.state.log.segment.bytes", T.INT, 104857600,
              "Segment size of __transaction_state (kplane keeps transaction state in the "
              "metadata store).", H, RO, at_least(1), honoured=False),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, 10000,
              "How often transactions open past their timeout are looked for and aborted.",
              L, RO, at_least(1)),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", T.INT, 3600000,
              "How often expired transactional ids are removed.", L, RO, at_least(1)),
    ConfigDef("producer.id.expiration.ms", T.INT, 86400000,
              "A producer id without writes for this long is forgotten.",
              L, CLUSTER, at_least(1), honoured=False),
    # Metrics
    ConfigDef("metric.reporters", T.LIST, [],
              "Metrics reporters to load, each a class implementing kplane's reporter "
              "interface.", L, CLUSTER, ClassNames()),
    # TLS (SSL and SASL_SSL listeners); each may be set per listener as
    # listener.name.<name>.ssl.*, and dynamically the key and trust stores only so
    _store_config("ssl.keystore.type", T.STRING, "JKS",
                  "Format of the key store: PKCS12 or PEM (JKS must be converted with "
                  "keytool).", _STORE_TYPES),
    _store_config("ssl.keystore.location", T.STRING, None,
                  "Key store with the broker's certificate chain and private key."),
    _store_config("ssl.keystore.password", T.PASSWORD, None,
                  "Password of the key store file (PKCS12)."),
    _store_config("ssl.key.password", T.PASSWORD, None,
                  "Password of the private key in the key store (an encrypted PEM key)."),
    _store_config("ssl.truststore.type", T.STRING, "JKS",
                  "Format of the trust store: PKCS12 or PEM.", _STORE_TYPES),
    _store_config("ssl.truststore.location", T.STRING, None,
                  "Trust store with the CA certificates client certificates must chain to."),
    _store_config("ssl.truststore.password", T.PASSWORD, None,
                  "Password of the trust store file (PKCS12)."),
    ConfigDef("ssl.client.auth", T.STRING, "none",
              "Client certificates: none, requested (verified when sent) or required.",
              M, BROKER, OneOf(("none", "requested", "required"))),
    ConfigDef("ssl.enabled.protocols", T.LIST, ["TLSv1.2", "TLSv1.3"],
              "TLS versions the listener accepts.", M, BROKER),
    ConfigDef("ssl.protocol", T.STRING, "TLSv1.3",
              "The TLS protocol of the SSL context (the highest version offered).", M, BROKER,
              OneOf(("TLSv1.2", "TLSv1.3", "TLS")), honoured=False),
    ConfigDef("ssl.cipher.suites", T.LIST, [],
              "OpenSSL names of the TLS 1.2 cipher suites allowed; empty keeps the defaults.",
              M, BROKER),
    ConfigDef("ssl.endpoint.identification.algorithm", T.STRING, "https",
              "Host name verification of peers when the broker is the TLS client (https or "
              "empty).", L, BROKER, honoured=False),
    ConfigDef("ssl.principal.mapping.rules", T.STRING, "DEFAULT",
              "Rules mapping a client certificate's subject DN to a principal name.", L, RO),
    # SASL (SASL_PLAINTEXT and SASL_SSL listeners)
    ConfigDef("sasl.enabled.mechanisms", T.LIST, ["GSSAPI"],
              "SASL mechanisms a listener offers (kplane serves PLAIN, SCRAM-SHA-256 and "
              "SCRAM-SHA-512).", M, BROKER),
    ConfigDef("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI",
              "SASL mechanism a broker uses as a client of another broker's SASL listener "
              "(the controller's connections), with the username/password options of that "
              "listener's login context.", M, BROKER),
    ConfigDef("sasl.jaas.config", T.PASSWORD, None,
              "JAAS login context, e.g. PlainLoginModule with user_<name>=\"<password>\" "
              "options; also listener.name.<name>.<mechanism>.sasl.jaas.config.", M, BROKER),
    ConfigDef("connection.failed.authentication.delay.ms", T.INT, 100,
              "Delay before the answer to a failed authentication (and the close).", L, RO,
              at_least(0)),
    # Authorization
    ConfigDef("authorizer.class.name", T.STRING, "",
              "Authorizer checking every request against ACLs in the metadata store: "
              "kafka.security.authorizer.AclAuthorizer (or kplane's name for it, "
              "kplane.broker.security.authorizer.AclAuthorizer). Empty: no authorization.", L, RO),
    ConfigDef("super.users", T.STRING, "",
              "Semicolon-separated principals allowed everything, e.g. User:admin;User:CN=b.",
              L, RO),
    ConfigDef("allow.everyone.if.no.acl.found", T.BOOLEAN, False,
              "With an authorizer: whether a resource without any ACL is open to everyone.",
              L, RO),
    # Passwords of dynamic configs, encrypted in the metadata store (KIP-226)
    ConfigDef("password.encoder.secret", T.PASSWORD, None,
              "Secret encrypting dynamically set passwords in the metadata store. Unset: "
              "password configs cannot be set dynamically.", M, RO),
    ConfigDef("password.encoder.old.secret", T.PASSWORD, None,
              "The previous password.encoder.secret, when rotating it: stored passwords are "
              "decoded with it and re-encoded with the new secret.", M, RO),
    ConfigDef("password.encoder.keyfactory.algorithm", T.STRING, None,
              "Key derivation of the password encoder. Unset: PBKDF2WithHmacSHA512.", L, RO),
    ConfigDef("password.encoder.cipher.algorithm", T.STRING, "AES/CBC/PKCS5Padding",
              "Cipher of the password encoder.", L, RO),
    ConfigDef("password.encoder.key.length", T.INT, 128,
              "Key length of the password encoder, in bits.", L, RO, at_least(8)),
    ConfigDef("password.encoder.iterations", T.INT, 4096,
              "Key derivation iterations of the password encoder.", L, RO, at_least(1024)),
    # kplane
    ConfigDef("kplane.metrics.port", T.INT, -1,
              "Port of the Prometheus HTTP exposition; -1 turns it off, 0 picks a free port.",
              M, RO, between(-1, 65535)),
    ConfigDef("kplane.gil.switch.interval.us", T.INT, 5000,
              "CPython's thread switch interval (sys.setswitchinterval) for the broker "
              "process, in microseconds. Lower values let a waiting thread - the control "
              "plane's, under data load - take the GIL sooner, at some cost in throughput "
              "(measured: 200 halves control-plane p99 under load).", L, RO,
              between(50, 100000)),
    ConfigDef("kplane.data.plane.thread.nice", T.INT, 0,
              "With a control plane: how much the data plane's Processor and handler threads "
              "lower their OS scheduling priority (nice), so on a busy machine the control "
              "plane's threads run first (measured: control p50 under load close to idle).",
              L, RO, between(0, 19)),
    ConfigDef("kplane.faults.enable", T.BOOLEAN, False,
              "Serve kplane's fault-injection API (kplane faults: request errors, delays, "
              "closed listeners) for client tests; with an authorizer only super users may "
              "use it. Never on a broker clients depend on.", L, RO),
    ConfigDef("kplane.log.storage", T.STRING, "file",
              "Where partition logs live: file (Kafka's segments under log.dirs, kept across "
              "restarts) or memory (gone at exit; for fast test brokers).", H, RO,
              OneOf(("file", "memory"))),
    ConfigDef("kplane.metrics.host", T.STRING, "127.0.0.1",
              "Address the Prometheus HTTP exposition binds.", M, RO),
)

CONFIGS: Mapping[str, ConfigDef] = {d.name: d for d in CONFIG_DEFS}
"""Every config definition by name."""

LISTENER_PREFIX = "listener.name."
"""Per-listener overrides: ``listener.name.<listener name in lower case>.<config>``."""
