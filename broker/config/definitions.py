"""The table of broker configs kplane honours: Kafka's names, types, defaults and KIP-226 scopes.

Values are parsed as Kafka's ``ConfigDef.parseType`` does: strings are trimmed, booleans are
``true``/``false`` in any case, lists are comma-separated with the items trimmed (an empty value
is ``[]``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.config.errors import ConfigException


class ConfigType(enum.Enum):
    """How a config's text becomes a value."""

    BOOLEAN = "boolean"
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    STRING = "string"
    LIST = "list"
    PASSWORD = "password"
    CLASS = "class"


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


_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
_CLASS_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


NOT_YET_HONOURED = frozenset(
    {
        "zookeeper.connect",
        "log.segment.bytes",
        "log.retention.hours",
        "log.retention.minutes",
        "log.retention.ms",
        "log.retention.bytes",
        "compression.type",
        "unclean.leader.election.enable",
        "replica.lag.time.max.ms",
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        "transactional.id.expiration.ms",
        "producer.id.expiration.ms",
        "ssl.endpoint.identification.algorithm",
        "ssl.protocol",
    }
)
"""Configs that parse and validate but that no component acts on yet (later issues)."""


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

    @property
    def honoured(self) -> bool:
        """Whether the broker acts on this config yet (others are accepted and validated)."""
        return self.name not in NOT_YET_HONOURED

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
        name = key or self.name
        value = _parse_type(name, self.type, raw)
        if self.validator is not None and value is not None:
            self.validator(name, value)
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
    if ctype in (ConfigType.INT, ConfigType.LONG):
        low, high = _INT_RANGE if ctype is ConfigType.INT else _LONG_RANGE
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
_COMPRESSION = OneOf(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))
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
    # Network and request handling
    ConfigDef("num.network.threads", T.INT, 3,
              "Processor threads per listener that read requests and write responses.",
              H, CLUSTER, at_least(1)),
    ConfigDef("num.io.threads", T.INT, 8,
              "Request handler threads that process requests.", H, CLUSTER, at_least(1)),
    ConfigDef("queued.max.requests", T.INT, 500,
              "Data-plane requests that may wait for a handler before processors block.",
              H, RO, at_least(1)),
    ConfigDef("socket.request.max.bytes", T.INT, 104857600,
              "Largest request frame accepted; larger sizes close the connection.",
              H, RO, at_least(1)),
    ConfigDef("socket.send.buffer.bytes", T.INT, 102400,
              "SO_SNDBUF of accepted sockets; -1 keeps the OS default.", H, RO),
    ConfigDef("socket.receive.buffer.bytes", T.INT, 102400,
              "SO_RCVBUF of accepted sockets; -1 keeps the OS default.", H, RO),
    ConfigDef("connections.max.idle.ms", T.LONG, 600000,
              "Idle connections are closed after this long.", M, RO),
    # Logs
    ConfigDef("log.dirs", T.LIST, None,
              "Comma-separated directories holding partition logs. Unset: log.dir.", H, RO),
    ConfigDef("log.dir", T.LIST, ["/tmp/kafka-logs"],
              "Log directory used when log.dirs is unset.", H, RO),
    ConfigDef("log.segment.bytes", T.INT, 1073741824,
              "Largest size of one log segment file.", H, CLUSTER, at_least(14)),
    ConfigDef("log.retention.hours", T.INT, 168,
              "Hours a segment is kept; log.retention.minutes and log.retention.ms win.",
              H, CLUSTER),
    ConfigDef("log.retention.minutes", T.INT, None,
              "Minutes a segment is kept; log.retention.ms wins.", H, CLUSTER),
    ConfigDef("log.retention.ms", T.LONG, None,
              "Milliseconds a segment is kept; -1 keeps it forever.", H, CLUSTER),
    ConfigDef("log.retention.bytes", T.LONG, -1,
              "Largest size of a partition log before old segments go; -1 means no limit.",
              H, CLUSTER),
    ConfigDef("compression.type", T.STRING, "producer",
              "Compression of stored batches; 'producer' keeps the producer's codec.",
              H, CLUSTER, _COMPRESSION),
    ConfigDef("message.max.bytes", T.INT, 1048588,
              "Largest record batch the broker accepts.", H, CLUSTER, at_least(0)),
    ConfigDef("min.insync.replicas", T.INT, 1,
              "Replicas that must acknowledge an acks=all produce.", H, CLUSTER, at_least(1)),
    ConfigDef("unclean.leader.election.enable", T.BOOLEAN, False,
              "Allow a replica outside the ISR to become leader, losing data.", H, CLUSTER),
    # Topics
    ConfigDef("num.partitions", T.INT, 1,
              "Partitions of an auto-created topic.", M, RO, at_least(1)),
    ConfigDef("default.replication.factor", T.INT, 1,
              "Replication factor of an auto-created topic.", M, RO, at_least(1)),
    ConfigDef("auto.create.topics.enable", T.BOOLEAN, True,
              "Create a topic when a client asks for metadata of an unknown one.", H, RO),
    ConfigDef("delete.topic.enable", T.BOOLEAN, True,
              "Allow DeleteTopics; false makes it fail.", H, RO),
    # Replication and fetch
    ConfigDef("replica.lag.time.max.ms", T.LONG, 30000,
              "A follower that has not caught up for this long leaves the ISR.", H, RO),
    ConfigDef("fetch.max.bytes", T.INT, 57671680,
              "Largest total size of one Fetch response.", M, RO, at_least(1024)),
    # Group coordinator and offsets
    ConfigDef("offsets.topic.num.partitions", T.INT, 50,
              "Partitions of __consumer_offsets.", H, RO, at_least(1)),
    ConfigDef("offsets.topic.replication.factor", T.INT, 3,
              "Replication factor of __consumer_offsets.", H, RO, between(1, 32767)),
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
    ConfigDef("producer.id.expiration.ms", T.INT, 86400000,
              "A producer id without writes for this long is forgotten.",
              L, CLUSTER, at_least(1)),
    # TLS (SSL and SASL_SSL listeners); each may be set per listener as
    # listener.name.<name>.ssl.*
    ConfigDef("ssl.keystore.type", T.STRING, "JKS",
              "Format of the key store: PKCS12 or PEM (JKS must be converted with keytool).",
              M, BROKER, _STORE_TYPES),
    ConfigDef("ssl.keystore.location", T.STRING, None,
              "Key store with the broker's certificate chain and private key.", H, BROKER),
    ConfigDef("ssl.keystore.password", T.PASSWORD, None,
              "Password of the key store file (PKCS12).", H, BROKER),
    ConfigDef("ssl.key.password", T.PASSWORD, None,
              "Password of the private key in the key store (an encrypted PEM key).", H, BROKER),
    ConfigDef("ssl.truststore.type", T.STRING, "JKS",
              "Format of the trust store: PKCS12 or PEM.", M, BROKER, _STORE_TYPES),
    ConfigDef("ssl.truststore.location", T.STRING, None,
              "Trust store with the CA certificates client certificates must chain to.",
              H, BROKER),
    ConfigDef("ssl.truststore.password", T.PASSWORD, None,
              "Password of the trust store file (PKCS12).", H, BROKER),
    ConfigDef("ssl.client.auth", T.STRING, "none",
              "Client certificates: none, requested (verified when sent) or required.",
              M, BROKER, OneOf(("none", "requested", "required"))),
    ConfigDef("ssl.enabled.protocols", T.LIST, ["TLSv1.2", "TLSv1.3"],
              "TLS versions the listener accepts.", M, BROKER),
    ConfigDef("ssl.protocol", T.STRING, "TLSv1.3",
              "The TLS protocol of the SSL context (the highest version offered).", M, BROKER,
              OneOf(("TLSv1.2", "TLSv1.3", "TLS"))),
    ConfigDef("ssl.cipher.suites", T.LIST, [],
              "OpenSSL names of the TLS 1.2 cipher suites allowed; empty keeps the defaults.",
              L, BROKER),
    ConfigDef("ssl.endpoint.identification.algorithm", T.STRING, "https",
              "Host name verification of peers when the broker is the TLS client (https or "
              "empty).", L, BROKER),
    ConfigDef("ssl.principal.mapping.rules", T.STRING, "DEFAULT",
              "Rules mapping a client certificate's subject DN to a principal name.", L, RO),
    # SASL (SASL_PLAINTEXT and SASL_SSL listeners)
    ConfigDef("sasl.enabled.mechanisms", T.LIST, ["GSSAPI"],
              "SASL mechanisms a listener offers (kplane serves PLAIN, SCRAM-SHA-256 and "
              "SCRAM-SHA-512).", M, BROKER),
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
              "broker.security.authorizer.AclAuthorizer). Empty: no authorization.", L, RO),
    ConfigDef("super.users", T.STRING, "",
              "Semicolon-separated principals allowed everything, e.g. User:admin;User:CN=b.",
              L, RO),
    ConfigDef("allow.everyone.if.no.acl.found", T.BOOLEAN, False,
              "With an authorizer: whether a resource without any ACL is open to everyone.",
              L, RO),
    # kplane
    ConfigDef("kplane.metrics.port", T.INT, -1,
              "Port of the Prometheus HTTP exposition; -1 turns it off, 0 picks a free port.",
              M, RO, between(-1, 65535)),
    ConfigDef("kplane.metrics.host", T.STRING, "127.0.0.1",
              "Address the Prometheus HTTP exposition binds.", M, RO),
)

CONFIGS: Mapping[str, ConfigDef] = {d.name: d for d in CONFIG_DEFS}
"""Every config definition by name."""

LISTENER_PREFIX = "listener.name."
"""Per-listener overrides: ``listener.name.<listener name in lower case>.<config>``."""
