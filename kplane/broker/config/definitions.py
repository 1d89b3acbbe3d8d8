"""The broker config table: Kafka 3.9's, each marked whether kplane acts on it, and kplane's own.

Every config Kafka 3.9 defines is here with Kafka's type, default, importance, KIP-226 scope,
validator and documentation (read from ``kafka_3_9_configs.json`` through
:mod:`kplane.broker.config.kafka_table`); the ones kplane acts on are declared below, in the
order of kplane's configuration reference, with kplane's description of them. The others are
accepted, validated, stored and described as Kafka does, and named at start-up when set.

Values are parsed as Kafka's ``ConfigDef.parseType`` does: strings are trimmed, booleans are
``true``/``false`` in any case, lists are comma-separated with the items trimmed (an empty value
is ``[]``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from kplane.broker.config.kafka_table import KAFKA_BROKER_CONFIGS, KafkaConfigRow
from kplane.broker.config.validators import (
    CLASS_NAME,
    ClassNames,
    HostCounts,
    OneOf,
    Validator,
    at_least,
    between,
    invalid,
    kafka_validator,
)


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


_SHORT_RANGE = (-(2**15), 2**15 - 1)
_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
LONG_MAX = 2**63 - 1
"""Java's ``Long.MAX_VALUE``, Kafka's default for several 'never' settings."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One broker config: what it is called, how it parses, its default and where it can change."""

    name: str
    type: ConfigType
    default: Any
    description: str
    """kplane's description, in its configuration reference (README)."""
    importance: Importance = Importance.MEDIUM
    dynamic: DynamicScope = DynamicScope.READ_ONLY
    validator: Validator | None = field(default=None, compare=False)
    honoured: bool = True
    """Whether the broker acts on this config; others are accepted, validated, stored and
    described as Kafka does, and named at start-up (``configs accepted but not acted on``)."""
    listener_prefix_required: bool = False
    """Dynamically settable only per listener, as ``listener.name.<listener>.<name>`` (Kafka's
    ``DynamicSecurityConfigs``: the SSL key and trust store configs); in server.properties
    the bare name is fine."""
    documentation: str | None = None
    """What DescribeConfigs answers as its documentation: Kafka's, else the description."""
    internal: bool = False
    """One of Kafka's internal configs: accepted, but described only when set."""

    @property
    def sensitive(self) -> bool:
        """Sensitive values (passwords) are never returned by DescribeConfigs."""
        return self.type is ConfigType.PASSWORD

    @property
    def default_text(self) -> str | None:
        """The default as Kafka prints it (None: no default)."""
        return value_text(self.type, self.default)

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


def value_text(ctype: ConfigType, value: Any) -> str | None:
    """A parsed value as Kafka's ``ConfigDef.convertToString`` prints it: lists comma-joined,
    booleans in lower case, doubles as Java's ``Double.toString``."""
    if value is None:
        return None
    if ctype is ConfigType.LIST:
        return ",".join(str(v) for v in value)
    if ctype is ConfigType.BOOLEAN:
        return str(value).lower()
    if ctype is ConfigType.DOUBLE:
        return _java_double(float(value))
    return str(value)


def _java_double(value: float) -> str:
    """Java's ``Double.toString``: plain from 10^-3 to 10^7, else ``1.0E10`` notation."""
    if math.isnan(value) or math.isinf(value):
        return "NaN" if math.isnan(value) else ("-" if value < 0 else "") + "Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    rest = "".join(map(str, digits[1:])) or "0"
    return f"{'-' if sign else ''}{digits[0]}.{rest}E{exponent + len(digits) - 1}"


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
        raise invalid(name, raw, "expected true or false")
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
            raise invalid(name, raw, f"not a number of type {ctype.name}")
        return number
    if ctype is ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise invalid(name, raw, "not a number of type DOUBLE") from None
    if ctype is ConfigType.CLASS:
        if not CLASS_NAME.match(text):
            raise invalid(name, raw, "not a dotted class name")
        return text
    raise AssertionError(ctype)  # pragma: no cover


H, M, L = Importance.HIGH, Importance.MEDIUM, Importance.LOW
RO = DynamicScope.READ_ONLY
T = ConfigType
_STORE_TYPES = OneOf(("JKS", "PKCS12", "PEM"), ignore_case=True)


@dataclass(frozen=True, slots=True)
class ActedOn:
    """One of Kafka's configs that kplane acts on: its line in kplane's configuration
    reference, and a validator used instead of Kafka's where kplane needs a check that Kafka
    does elsewhere than in its ConfigDef, or not at all."""

    name: str
    description: str
    validator: Validator | None = None
    kafka_4_default: str | None = None
    """Kafka 4's default, where kplane follows Kafka 4 rather than 3.9's table."""


# fmt: off
_DECLARED: tuple[ActedOn | ConfigDef, ...] = (
    # Broker identity and metadata store
    ActedOn("broker.id",
            "Id of this broker, unique in the cluster. -1 (Kafka's 'generate one') means 0 "
            "in kplane.", at_least(-1)),
    ActedOn("zookeeper.connect",
            "ZooKeeper connection string host:port[,host:port][/chroot]. Unset: the "
            "embedded metadata store under log.dirs."),
    ActedOn("zookeeper.session.timeout.ms",
            "ZooKeeper session timeout: a broker silent this long loses its registration "
            "(and the controller role).", at_least(1)),
    ActedOn("zookeeper.connection.timeout.ms",
            "How long start-up waits to connect to ZooKeeper. Unset: the session timeout.",
            at_least(1)),
    # Listeners (KIP-2, KIP-103, KIP-291)
    ActedOn("listeners",
            "Comma-separated NAME://host:port the broker binds. An empty host binds every "
            "interface; port 0 picks a free port."),
    ActedOn("advertised.listeners",
            "Comma-separated NAME://host:port published to clients and other brokers. "
            "Unset: the listeners. Wildcard hosts are not allowed."),
    ActedOn("listener.security.protocol.map",
            "Comma-separated NAME:PROTOCOL pairs giving each listener name its security "
            "protocol."),
    ActedOn("inter.broker.listener.name",
            "Listener other brokers use to reach this one. Set this or "
            "security.inter.broker.protocol, not both."),
    ActedOn("security.inter.broker.protocol",
            "Security protocol between brokers; selects the listener of the same name."),
    ActedOn("control.plane.listener.name",
            "Listener reserved for controller requests (KIP-291), served by its own "
            "processor, queue and handler. Unset: controller traffic uses the inter-broker "
            "listener."),
    ActedOn("broker.rack",
            "Rack of the broker, used to spread replicas across racks."),
    # Network, request handling and thread pools (KIP-226: resizable, cluster-wide)
    ActedOn("num.network.threads",
            "Processor threads per listener that read requests and write responses."),
    ActedOn("num.io.threads",
            "Request handler threads that process requests."),
    ActedOn("num.replica.fetchers",
            "Fetcher threads replicating from each source broker.", at_least(1)),
    ActedOn("queued.max.requests",
            "Data-plane requests that may wait for a handler before processors block."),
    ActedOn("socket.request.max.bytes",
            "Largest request frame accepted; larger sizes close the connection."),
    ActedOn("queued.max.request.bytes",
            "Bytes of requests read but not yet answered, over all connections, before "
            "processors stop reading new requests (a frame is let in while any room is "
            "left); -1: no bound.", at_least(-1)),
    ActedOn("sasl.server.max.receive.size",
            "Largest frame accepted before SASL authentication completes; larger sizes "
            "close the connection.", at_least(1)),
    ActedOn("max.request.partition.size.limit",
            "Most partitions one DescribeTopicPartitions response describes (the request's "
            "ResponsePartitionLimit when smaller); the rest are paged with its cursor."),
    ActedOn("socket.send.buffer.bytes",
            "SO_SNDBUF of accepted sockets; -1 keeps the OS default."),
    ActedOn("socket.receive.buffer.bytes",
            "SO_RCVBUF of accepted sockets; -1 keeps the OS default."),
    ActedOn("connections.max.idle.ms",
            "Idle connections are closed after this long; so is a connection whose request "
            "frame has not arrived whole this long after its first byte (a trickle of bytes "
            "does not keep it open)."),
    # Connection limits (KIP-402, Kafka's ConnectionQuotas); max.connections and
    # max.connection.creation.rate also per listener as listener.name.<listener>.<name>
    ActedOn("max.connections",
            "Connections the broker keeps open at once; also per listener as "
            "listener.name.<listener>.max.connections (unset: this value). A new connection "
            "past either limit waits (the listener stops accepting) until one closes. The "
            "inter-broker and control-plane listeners are held only by their own limit when "
            "there are other listeners: a connection to them past the broker-wide one "
            "closes the least recently used connection of another listener."),
    ActedOn("max.connections.per.ip",
            "Connections one client address may keep open; a new one past it is closed at "
            "once. 0 is allowed only with max.connections.per.ip.overrides."),
    ActedOn("max.connections.per.ip.overrides",
            "Per host or IP address limits instead of max.connections.per.ip, e.g. "
            "hostName:100,127.0.0.1:200.", HostCounts()),
    ActedOn("max.connection.creation.rate",
            "New connections per second the broker accepts (measured as Kafka measures a "
            "quota: over 11 one-second samples); also per listener as "
            "listener.name.<listener>.max.connection.creation.rate (unset: this value). "
            "Past either the listener delays accepting. The inter-broker and control-plane "
            "listeners are held only by their own limit."),
    # Logs; the cluster-wide ones are the broker defaults of topic configs (KIP-226)
    ActedOn("log.dirs",
            "Comma-separated directories holding partition logs. Unset: log.dir."),
    ActedOn("log.dir",
            "Log directory used when log.dirs is unset."),
    ActedOn("log.segment.bytes",
            "Largest size of one log segment file."),
    ActedOn("log.roll.ms",
            "A new segment is rolled after this many milliseconds; unset: log.roll.hours."),
    ActedOn("log.roll.hours",
            "A new segment is rolled after this many hours; log.roll.ms wins."),
    ActedOn("log.roll.jitter.ms",
            "Largest random jitter subtracted from the roll time, in milliseconds; unset: "
            "log.roll.jitter.hours."),
    ActedOn("log.roll.jitter.hours",
            "Largest random jitter subtracted from the roll time, in hours; "
            "log.roll.jitter.ms wins."),
    ActedOn("log.retention.hours",
            "Hours a segment is kept; log.retention.minutes and log.retention.ms win."),
    ActedOn("log.retention.minutes",
            "Minutes a segment is kept; log.retention.ms wins."),
    ActedOn("log.retention.ms",
            "Milliseconds a segment is kept; -1 keeps it forever. Unset: "
            "log.retention.minutes, then log.retention.hours."),
    ActedOn("log.retention.bytes",
            "Largest size of a partition log before old segments go; -1 means no limit."),
    ActedOn("log.cleanup.policy",
            "What happens to old segments: delete, compact, or both."),
    ActedOn("log.index.size.max.bytes",
            "Largest size of a segment's offset index."),
    ActedOn("log.index.interval.bytes",
            "Bytes of records between two offset index entries."),
    ActedOn("log.flush.interval.messages",
            "Records appended to a partition before it is flushed to disk."),
    ActedOn("log.flush.interval.ms",
            "Milliseconds a record may stay unflushed; unset: "
            "log.flush.scheduler.interval.ms."),
    ActedOn("log.flush.scheduler.interval.ms",
            "How often the flusher checks whether a log needs flushing."),
    ActedOn("log.segment.delete.delay.ms",
            "Delay before a deleted segment's files are removed."),
    ActedOn("log.retention.check.interval.ms",
            "How often logs are checked for segments to delete by retention."),
    ActedOn("log.flush.offset.checkpoint.interval.ms",
            "How often each log dir's recovery-point-offset-checkpoint is written."),
    ActedOn("log.flush.start.offset.checkpoint.interval.ms",
            "How often each log dir's log-start-offset-checkpoint is written."),
    ActedOn("log.message.timestamp.difference.max.ms",
            "Largest difference between a CreateTime timestamp and the broker's clock "
            "before the batch is rejected."),
    ActedOn("message.max.bytes",
            "Largest record batch the broker accepts."),
    ActedOn("min.insync.replicas",
            "Replicas that must acknowledge an acks=all produce."),
    ActedOn("auto.leader.rebalance.enable",
            "The controller moves leaderships back to preferred replicas when a broker's "
            "imbalance passes leader.imbalance.per.broker.percentage."),
    ActedOn("leader.imbalance.check.interval.seconds",
            "How often the controller checks the leader imbalance."),
    ActedOn("leader.imbalance.per.broker.percentage",
            "Share of a broker's preferred partitions led elsewhere that triggers a "
            "preferred-leader election.", at_least(0)),
    ActedOn("controlled.shutdown.enable",
            "On SIGTERM, ask the controller to move this broker's leaderships away first."),
    ActedOn("controlled.shutdown.max.retries",
            "Controlled-shutdown attempts before the broker stops regardless.", at_least(0)),
    ActedOn("controlled.shutdown.retry.backoff.ms",
            "Pause between controlled-shutdown attempts.", at_least(0)),
    ActedOn("unclean.leader.election.enable",
            "Allow a replica outside the ISR to become leader, losing data."),
    # Log cleaner (KIP-226: cluster-wide); its topic-config defaults are log.cleaner.*.ms/ratio
    ActedOn("log.cleaner.enable",
            "Run the log cleaner, which compacts topics whose cleanup.policy contains compact."),
    ActedOn("log.cleaner.threads",
            "Background threads compacting logs."),
    ActedOn("log.cleaner.io.max.bytes.per.second",
            "Throttle of the cleaner's reads plus writes, in bytes per second."),
    ActedOn("log.cleaner.dedupe.buffer.size",
            "Memory for deduplication across all cleaner threads."),
    ActedOn("log.cleaner.io.buffer.size",
            "I/O buffer memory across all cleaner threads."),
    ActedOn("log.cleaner.io.buffer.load.factor",
            "Load factor of the cleaner's dedupe buffer."),
    ActedOn("log.cleaner.backoff.ms",
            "Sleep of a cleaner thread when there is no log to clean."),
    ActedOn("log.cleaner.min.cleanable.ratio",
            "Smallest ratio of dirty log to total log for a log to be compacted."),
    ActedOn("log.cleaner.delete.retention.ms",
            "How long delete tombstones are kept in compacted topics."),
    ActedOn("log.cleaner.min.compaction.lag.ms",
            "Least time a record stays uncompacted."),
    ActedOn("log.cleaner.max.compaction.lag.ms",
            "Most time a record may stay uncompacted."),
    # Topics
    ActedOn("num.partitions",
            "Partitions of an auto-created topic."),
    ActedOn("default.replication.factor",
            "Replication factor of an auto-created topic.", at_least(1)),
    ActedOn("auto.create.topics.enable",
            "Create a topic when a client asks for metadata of an unknown one."),
    ActedOn("delete.topic.enable",
            "Allow DeleteTopics; false makes it fail."),
    ActedOn("alter.config.policy.class.name",
            "Policy validating AlterConfigs and IncrementalAlterConfigs requests: the "
            "import path module.Class of a class whose validate(request) raises to refuse."),
    # Replication and fetch
    ActedOn("replica.lag.time.max.ms",
            "A follower that has not caught up for this long leaves the ISR.", at_least(1)),
    ActedOn("leader.replication.throttled.rate",
            "Bytes per second a leader sends to out-of-sync followers of the replicas its "
            "topics list in leader.replication.throttled.replicas."),
    ActedOn("follower.replication.throttled.rate",
            "Bytes per second an out-of-sync follower fetches for the replicas its topics "
            "list in follower.replication.throttled.replicas."),
    ActedOn("replica.alter.log.dirs.io.max.bytes.per.second",
            "Bytes per second the broker copies when it moves replicas between its log dirs "
            "(AlterReplicaLogDirs); the last bytes of a move, copied while appends wait, are "
            "not held back."),
    ActedOn("quota.window.num",
            "Samples kept to compute a client quota's rate (producer_byte_rate, "
            "consumer_byte_rate, request_percentage)."),
    ActedOn("quota.window.size.seconds",
            "Span of one client quota sample; a request-quota throttle is at most one."),
    ActedOn("replication.quota.window.num",
            "Samples kept to compute a replication throttle's rate."),
    ActedOn("replication.quota.window.size.seconds",
            "Span of one replication throttle sample."),
    ActedOn("replica.fetch.max.bytes",
            "Bytes a follower asks for per partition in one fetch (at least one batch)."),
    ActedOn("replica.fetch.response.max.bytes",
            "Bytes a follower asks for in one whole fetch."),
    ActedOn("replica.fetch.min.bytes",
            "Bytes a follower's fetch waits for at the leader."),
    ActedOn("replica.fetch.wait.max.ms",
            "Longest a follower's fetch waits at the leader.", at_least(0)),
    ActedOn("replica.fetch.backoff.ms",
            "Pause of a follower's fetcher after an error."),
    ActedOn("replica.socket.timeout.ms",
            "Request timeout of a follower's fetches (plus replica.fetch.wait.max.ms)."),
    ActedOn("replica.socket.receive.buffer.bytes",
            "SO_RCVBUF of a follower's fetch connections; -1 keeps the OS default."),
    ActedOn("fetch.max.bytes",
            "Largest total size of one Fetch response."),
    # Group coordinator and offsets
    ActedOn("offsets.topic.num.partitions",
            "Partitions of __consumer_offsets."),
    ActedOn("offsets.retention.minutes",
            "Committed offsets of an empty group are kept this long."),
    ActedOn("group.initial.rebalance.delay.ms",
            "How long the first rebalance of a new group waits for more members."),
    ActedOn("group.min.session.timeout.ms",
            "Smallest session timeout a member may ask for."),
    ActedOn("group.max.session.timeout.ms",
            "Largest session timeout a member may ask for."),
    ActedOn("group.max.size",
            "Most members one group may hold."),
    ActedOn("group.consumer.session.timeout.ms",
            "Session timeout of a consumer-protocol member (KIP-848): one that does not "
            "heartbeat for this long is fenced."),
    ActedOn("group.consumer.heartbeat.interval.ms",
            "Heartbeat interval given to consumer-protocol members."),
    ActedOn("group.consumer.min.session.timeout.ms",
            "Lower bound of group.consumer.session.timeout.ms (and of a group's "
            "consumer.session.timeout.ms)."),
    ActedOn("group.consumer.max.session.timeout.ms",
            "Upper bound of group.consumer.session.timeout.ms (and of a group's "
            "consumer.session.timeout.ms)."),
    ActedOn("group.consumer.min.heartbeat.interval.ms",
            "Lower bound of group.consumer.heartbeat.interval.ms (and of a group's "
            "consumer.heartbeat.interval.ms)."),
    ActedOn("group.consumer.max.heartbeat.interval.ms",
            "Upper bound of group.consumer.heartbeat.interval.ms (and of a group's "
            "consumer.heartbeat.interval.ms)."),
    ActedOn("group.consumer.max.size",
            "Most members one consumer-protocol group may hold."),
    ActedOn("group.consumer.assignors",
            "Server-side assignors of consumer-protocol groups, uniform and range (by name "
            "or Kafka's class name); the first is used when members name none."),
    ActedOn("group.share.enable",
            "Serve share groups (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, "
            "ShareFetch, ShareAcknowledge and the share-group offset APIs (not advertised "
            "without it). Kafka 4.2 enables them in a new cluster (share.version=1).",
            kafka_4_default="true"),
    ActedOn("group.share.session.timeout.ms",
            "A share group member that does not heartbeat for this long is removed (its "
            "acquired records go back to the group)."),
    ActedOn("group.share.min.session.timeout.ms",
            "Lower bound of group.share.session.timeout.ms (and of a group's "
            "share.session.timeout.ms)."),
    ActedOn("group.share.max.session.timeout.ms",
            "Upper bound of group.share.session.timeout.ms (and of a group's "
            "share.session.timeout.ms)."),
    ActedOn("group.share.heartbeat.interval.ms",
            "Heartbeat interval given to share group members."),
    ActedOn("group.share.min.heartbeat.interval.ms",
            "Lower bound of group.share.heartbeat.interval.ms (and of a group's "
            "share.heartbeat.interval.ms)."),
    ActedOn("group.share.max.heartbeat.interval.ms",
            "Upper bound of group.share.heartbeat.interval.ms (and of a group's "
            "share.heartbeat.interval.ms)."),
    ActedOn("group.share.max.size",
            "Most members one share group may hold."),
    ActedOn("group.share.record.lock.duration.ms",
            "How long a share group member holds the records it acquired before they go back "
            "to the group (a group's share.record.lock.duration.ms overrides it)."),
    ActedOn("group.share.min.record.lock.duration.ms",
            "Lower bound of group.share.record.lock.duration.ms (and of a group's "
            "share.record.lock.duration.ms)."),
    ActedOn("group.share.max.record.lock.duration.ms",
            "Upper bound of group.share.record.lock.duration.ms (and of a group's "
            "share.record.lock.duration.ms)."),
    ActedOn("group.share.delivery.count.limit",
            "Deliveries of a record to a share group after which a release or an expired "
            "lock archives it."),
    ActedOn("group.share.partition.max.record.locks",
            "Records in flight (past the share-partition start offset) per share partition; "
            "a fetch acquires no new records beyond it.",
            kafka_4_default="2000"),
    ConfigDef("group.share.max.share.sessions", T.INT, 2000,
              "Share sessions this broker holds (Kafka 4.1): a ShareFetch opening one more "
              "is refused with SHARE_SESSION_LIMIT_REACHED; none is evicted.", M, RO,
              at_least(1)),
    ActedOn("group.coordinator.rebalance.protocols",
            "Group protocols served (Kafka 4's default): classic always; consumer serves "
            "KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe (not advertised "
            "without it); share groups are served with group.share.enable, not through "
            "this list, as in Kafka 4.1.",
            kafka_4_default="classic,consumer"),
    ActedOn("group.consumer.migration.policy",
            "Online conversion of a group with members between the classic and the consumer "
            "protocol (KIP-848): upgrade when a consumer-protocol member joins a classic "
            "group, downgrade when the last one leaves a consumer group of classic members; "
            "an empty group converts whatever the policy.",
            kafka_4_default="bidirectional"),
    # Transactions and idempotence
    ActedOn("transactional.id.expiration.ms",
            "A transactional id without transaction updates for this long expires."),
    ActedOn("transaction.max.timeout.ms",
            "Largest transaction.timeout.ms a producer may ask for (larger: "
            "INVALID_TRANSACTION_TIMEOUT)."),
    ActedOn("transaction.state.log.num.partitions",
            "Partitions of __transaction_state: transactional ids map to them, and "
            "their coordinators with them."),
    ActedOn("transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "How often transactions open past their timeout are looked for and aborted."),
    ActedOn("transaction.remove.expired.transaction.cleanup.interval.ms",
            "How often expired transactional ids are removed."),
    # Metrics
    ActedOn("metric.reporters",
            "Metrics reporters to load, each a class implementing kplane's reporter "
            "interface.", ClassNames()),
    # TLS (SSL and SASL_SSL listeners); each may be set per listener as
    # listener.name.<name>.ssl.*, and dynamically the key and trust stores only so
    ActedOn("ssl.keystore.type",
            "Format of the key store: PKCS12 or PEM (JKS must be converted with "
            "keytool).", _STORE_TYPES),
    ActedOn("ssl.keystore.location",
            "Key store with the broker's certificate chain and private key."),
    ActedOn("ssl.keystore.password",
            "Password of the key store file (PKCS12)."),
    ActedOn("ssl.key.password",
            "Password of the private key in the key store (an encrypted PEM key)."),
    ActedOn("ssl.truststore.type",
            "Format of the trust store: PKCS12 or PEM.", _STORE_TYPES),
    ActedOn("ssl.truststore.location",
            "Trust store with the CA certificates client certificates must chain to."),
    ActedOn("ssl.truststore.password",
            "Password of the trust store file (PKCS12)."),
    ActedOn("ssl.client.auth",
            "Client certificates: none, requested (verified when sent) or required."),
    ActedOn("ssl.enabled.protocols",
            "TLS versions the listener accepts."),
    ActedOn("ssl.cipher.suites",
            "OpenSSL names of the TLS 1.2 cipher suites allowed; empty keeps the defaults."),
    ActedOn("ssl.principal.mapping.rules",
            "Rules mapping a client certificate's subject DN to a principal name."),
    # SASL (SASL_PLAINTEXT and SASL_SSL listeners)
    ActedOn("sasl.enabled.mechanisms",
            "SASL mechanisms a listener offers (kplane serves PLAIN, SCRAM-SHA-256 and "
            "SCRAM-SHA-512)."),
    ActedOn("sasl.mechanism.inter.broker.protocol",
            "SASL mechanism a broker uses as a client of another broker's SASL listener "
            "(the controller's connections), with the username/password options of that "
            "listener's login context."),
    ActedOn("sasl.jaas.config",
            "JAAS login context, e.g. PlainLoginModule with user_<name>=\"<password>\" "
            "options; also listener.name.<name>.<mechanism>.sasl.jaas.config."),
    ActedOn("connection.failed.authentication.delay.ms",
            "Delay before the answer to a failed authentication (and the close)."),
    # Delegation tokens (KIP-48)
    ActedOn("delegation.token.secret.key",
            "Secret the tokens' HMACs (their passwords) are computed with; the same on every "
            "broker. Unset or empty: delegation tokens are disabled."),
    ActedOn("delegation.token.master.key",
            "Deprecated alias of delegation.token.secret.key."),
    ActedOn("delegation.token.max.lifetime.ms",
            "Longest a token can live, renewals included; a longer asked lifetime is cut."),
    ActedOn("delegation.token.expiry.time.ms",
            "How long a token is valid after its creation or a renewal without a period."),
    ActedOn("delegation.token.expiry.check.interval.ms",
            "How often the controller removes expired tokens."),
    # Authorization
    ActedOn("authorizer.class.name",
            "Authorizer checking every request against ACLs in the metadata store: "
            "kafka.security.authorizer.AclAuthorizer (or kplane's name for it, "
            "kplane.broker.security.authorizer.AclAuthorizer). Empty: no authorization."),
    ConfigDef("super.users", T.STRING, "",
              "Semicolon-separated principals allowed everything, e.g. User:admin;User:CN=b.",
              L, RO),
    ConfigDef("allow.everyone.if.no.acl.found", T.BOOLEAN, False,
              "With an authorizer: whether a resource without any ACL is open to everyone.",
              L, RO),
    # Passwords of dynamic configs, encrypted in the metadata store (KIP-226)
    ActedOn("password.encoder.secret",
            "Secret encrypting dynamically set passwords in the metadata store. Unset: "
            "password configs cannot be set dynamically."),
    ActedOn("password.encoder.old.secret",
            "The previous password.encoder.secret, when rotating it: stored passwords are "
            "decoded with it and re-encoded with the new secret."),
    ActedOn("password.encoder.keyfactory.algorithm",
            "Key derivation of the password encoder. Unset: PBKDF2WithHmacSHA512."),
    ActedOn("password.encoder.cipher.algorithm",
            "Cipher of the password encoder."),
    ActedOn("password.encoder.key.length",
            "Key length of the password encoder, in bits."),
    ActedOn("password.encoder.iterations",
            "Key derivation iterations of the password encoder."),
    # Client telemetry (KIP-714)
    ActedOn("telemetry.max.bytes",
            "The largest PushTelemetry payload (after compression) a client may send; "
            "larger ones get TELEMETRY_TOO_LARGE.", at_least(1)),
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
    ConfigDef("kplane.produce.on.network.threads.max.bytes", T.INT, 65536,
              "Produce requests of at most this many bytes are handled by the data-plane "
              "network thread that read them instead of being queued for the num.io.threads "
              "handlers; larger ones go through the queue, as every request does in Kafka, so "
              "the network thread goes on reading while a handler appends them. Handling a "
              "small Produce on the thread that read it costs a quarter less CPU and no "
              "thread switches. 0 queues every Produce, as the load test's shared scenarios "
              "do (KIP-291's baseline).", L, RO, at_least(0)),
    ConfigDef("kplane.metrics.host", T.STRING, "127.0.0.1",
              "Address the Prometheus HTTP exposition binds.", M, RO),
)
"""kplane's configuration reference: Kafka's configs kplane acts on, and kplane's own
(``kplane.*``, and the ACL authorizer's ``super.users`` and ``allow.everyone.if.no.acl.found``,
which Kafka's authorizer reads beside KafkaConfig)."""
# fmt: on


def _from_kafka(row: KafkaConfigRow, acted: ActedOn | None) -> ConfigDef:
    """The definition of one of Kafka's configs; honoured when kplane acts on it."""
    ctype = ConfigType(row.type)
    default = row.default
    if acted is not None and acted.kafka_4_default is not None:
        default = acted.kafka_4_default
    return ConfigDef(
        row.name,
        ctype,
        None if default is None else _parse_type(row.name, ctype, default),
        row.documentation if acted is None else acted.description,
        Importance(row.importance),
        DynamicScope(row.update_mode),
        (acted and acted.validator) or kafka_validator(row.validator, row.valid_values),
        honoured=acted is not None,
        listener_prefix_required=row.listener_prefix_required,
        documentation=row.documentation,
        internal=row.internal,
    )


def _table() -> tuple[ConfigDef, ...]:
    """kplane's declarations in their order, then the rest of Kafka's table by name."""
    declared = [
        _from_kafka(KAFKA_BROKER_CONFIGS[d.name], d)
        if isinstance(d, ActedOn)
        else replace(d, documentation=d.description)
        for d in _DECLARED
    ]
    names = {d.name for d in declared}
    rest = [_from_kafka(r, None) for r in KAFKA_BROKER_CONFIGS.values() if r.name not in names]
    return (*declared, *rest)


CONFIG_DEFS: tuple[ConfigDef, ...] = _table()
"""Every broker config: Kafka's and kplane's."""

CONFIGS: Mapping[str, ConfigDef] = {d.name: d for d in CONFIG_DEFS}
"""Every config definition by name."""

LISTENER_PREFIX = "listener.name."
"""Per-listener overrides: ``listener.name.<listener name in lower case>.<config>``."""
