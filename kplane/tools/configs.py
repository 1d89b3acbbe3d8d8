"""``kplane configs``: describe and alter broker, topic and group configs, client quotas
and SCRAM credentials, as ``kafka-configs.sh``.

The options, the checks of the command line and the output follow Apache Kafka's
ConfigCommand with ``--bootstrap-server`` (KIP-226) for the entity types ``brokers``,
``topics`` and ``groups`` (KIP-848's ``consumer.*``, KIP-932's ``share.*``), and for the
client quota entities ``users``, ``clients`` (a user and a client id together with two
``--entity-type``/``--entity-name`` pairs) and ``ips``, each with ``--entity-default``::

    kplane configs --bootstrap-server H:P --entity-type brokers --entity-name 0 --describe
    kplane configs --bootstrap-server H:P --broker-defaults --alter --add-config 'k=v,l=[a,b]'
    kplane configs --bootstrap-server H:P --topic T --alter --delete-config k1,k2
    kplane configs --bootstrap-server H:P --entity-type groups --entity-name G --describe
    kplane configs --bootstrap-server H:P --entity-type clients --entity-name app \
        --alter --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    kplane configs --bootstrap-server H:P --entity-type users --entity-name alice \
        --entity-type clients --entity-default --alter --add-config request_percentage=50
    kplane configs --bootstrap-server H:P --entity-type ips --entity-default --describe

Config changes go through IncrementalAlterConfigs (deletions, then SETs), descriptions
through DescribeConfigs with synonyms; quotas through AlterClientQuotas and
DescribeClientQuotas, a user's SCRAM credentials through AlterUserScramCredentials. A
refused command line or change prints one line on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import decimal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from kplane.broker.quota.entity import IP_CONFIGS, USER_AND_CLIENT_CONFIGS, valid_ip
from kplane.broker.security.scram import MIN_ITERATIONS, SCRAM_MECHANISMS
from kplane.client.admin import (
    Admin,
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    OpType,
    ScramDeletion,
    ScramUpsertion,
)
from kplane.client.group_admin import GroupAdmin
from kplane.client.quota_admin import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    Alteration,
    FilterComponent,
    QuotaAdmin,
)
from kplane.common.network.config import ClientConfig
from kplane.protocol.errors import ErrorCode, KafkaError
from kplane.protocol.topic_names import validate_topic_name
from kplane.tools.admin_session import (
    UsageError,
    add_connection_args,
    client_config,
    read_properties,
    with_admin,
)
from kplane.tools.scram import mechanism

BROKERS = "brokers"
TOPICS = "topics"
USERS = "users"
CLIENTS = "clients"
IPS = "ips"
GROUPS = "groups"
ENTITY_TYPES = (TOPICS, CLIENTS, USERS, BROKERS, IPS, GROUPS)
QUOTA_TYPES = (USERS, CLIENTS, IPS)
_QUOTA_ENTITY_TYPES = {USERS: "user", CLIENTS: "client-id", IPS: "ip"}
"""The client quota entity type of each entity type."""
_RESOURCE_TYPES = {
    TOPICS: ConfigResourceType.TOPIC,
    BROKERS: ConfigResourceType.BROKER,
    GROUPS: ConfigResourceType.GROUP,
}
DEFAULT_BROKER = ""  # the resource name of the cluster-wide broker default

_FORMAT_ERROR = (
    'Invalid entity config: all configs to be added must be in the format "key=val" or '
    '"key=[val1,val2]" to group values which contain commas.'
)
_KEY_CHARS = frozenset("$abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
# Java's ConfigEntry.ConfigSource names, which the output uses.
_SOURCE_NAMES = {
    int(ConfigSource.DYNAMIC_TOPIC_CONFIG): "DYNAMIC_TOPIC_CONFIG",
    int(ConfigSource.DYNAMIC_BROKER_CONFIG): "DYNAMIC_BROKER_CONFIG",
    int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG): "DYNAMIC_DEFAULT_BROKER_CONFIG",
    int(ConfigSource.STATIC_BROKER_CONFIG): "STATIC_BROKER_CONFIG",
    int(ConfigSource.DEFAULT_CONFIG): "DEFAULT_CONFIG",
    int(ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG): "DYNAMIC_BROKER_LOGGER_CONFIG",
    int(ConfigSource.CLIENT_METRICS_CONFIG): "DYNAMIC_CLIENT_METRICS_CONFIG",
    int(ConfigSource.GROUP_CONFIG): "DYNAMIC_GROUP_CONFIG",
}


@dataclass(frozen=True)
class Entity:
    """What the command is about: ``name`` None is every entity of the type (describe
    only), :data:`DEFAULT_BROKER` the cluster-wide broker default."""

    type: str
    name: str | None

    def resource(self, name: str) -> ConfigResource:
        return ConfigResource(_RESOURCE_TYPES[self.type], name)


@dataclass(frozen=True)
class Command:
    """A checked command line; ``child`` is the client id of a user's client quota
    (``--entity-type users ... --entity-type clients ...``)."""

    action: str  # "describe" or "alter"
    entity: Entity
    describe_all: bool = False
    add: Mapping[str, str] = field(default_factory=dict)
    delete: Sequence[str] = ()
    child: Entity | None = None
    first: Entity | None = None
    """The pair given first on the command line (what ``--alter`` reports on)."""


# command line -----------------------------------------------------------------------------
def add_parser(sub: Any) -> None:
    """Register the ``configs`` subcommand."""
    p = sub.add_parser(
        "configs",
        help="describe and alter broker, topic and group configs (kafka-configs.sh)",
        description="Add/remove entity config for a topic, broker or group, or describe it "
        "(kafka-configs.sh with --bootstrap-server).",
    )
    add_connection_args(p)
    p.add_argument("--describe", action="store_true", help="list configs for the given entity")
    p.add_argument("--alter", action="store_true", help="alter the configuration of the entity")
    p.add_argument(
        "--all", action="store_true", help="with --describe: every config, not only dynamic ones"
    )
    p.add_argument(
        "--entity-type",
        action="append",
        help="type of entity (topics/clients/users/brokers/ips/groups)",
    )
    p.add_argument(
        "--entity-name",
        action="append",
        dest="entity_names",
        help="name of entity (topic name/client id/user principal name/broker id/ip/group)",
    )
    p.add_argument(
        "--entity-default",
        action="append_const",
        const="",
        dest="entity_names",
        help="default entity name for clients/users/brokers/ips",
    )
    p.add_argument("--topic", help="the topic's name (--entity-type topics --entity-name)")
    p.add_argument("--client", help="the client id (--entity-type clients --entity-name)")
    p.add_argument("--user", help="the user (--entity-type users --entity-name)")
    p.add_argument("--broker", help="the broker's id (--entity-type brokers --entity-name)")
    p.add_argument("--ip", help="the IP address (--entity-type ips --entity-name)")
    p.add_argument("--group", help="the group (--entity-type groups --entity-name)")
    p.add_argument(
        "--client-defaults",
        action="store_true",
        help="the quota defaults of all clients (--entity-type clients --entity-default)",
    )
    p.add_argument(
        "--user-defaults",
        action="store_true",
        help="the quota defaults of all users (--entity-type users --entity-default)",
    )
    p.add_argument(
        "--broker-defaults",
        action="store_true",
        help="the config defaults for all brokers (--entity-type brokers --entity-default)",
    )
    p.add_argument(
        "--ip-defaults",
        action="store_true",
        help="the connection quota defaults of all IPs (--entity-type ips --entity-default)",
    )
    p.add_argument(
        "--add-config",
        help="key=value pairs of configs to add; square brackets group values which "
        "contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'",
    )
    p.add_argument("--add-config-file", metavar="FILE", help="properties file with configs to add")
    p.add_argument("--delete-config", action="append", help="config keys to remove: 'k1,k2'")
    p.set_defaults(func=run)


def parse_add_config(text: str) -> dict[str, str]:
    """``'k1=v1,k2=[a,b]'`` -> ``{"k1": "v1", "k2": "a,b"}``, as Kafka's tool reads
    ``--add-config``: commas inside square brackets do not separate pairs, the brackets are
    dropped from values, keys and values are trimmed, a value may be empty and may contain
    ``=`` after the first one. Raises :class:`UsageError`."""
    items = _split_top_level(text, ",")
    while items and not items[-1].strip():
        items.pop()  # Java's String.split drops trailing empty strings
    if not items:
        raise UsageError(_FORMAT_ERROR)
    configs: dict[str, str] = {}
    for item in items:
        parts = _split_top_level(item, "=", maxsplit=1)
        if len(parts) != 2 or not parts[0].strip():
            raise UsageError(_FORMAT_ERROR)
        key = parts[0].strip()
        if not set(key) <= _KEY_CHARS:
            raise UsageError(f"Invalid character found for config key: {key}")
        configs[key] = parts[1].replace("[", "").replace("]", "").strip()
    return configs


def _split_top_level(text: str, sep: str, maxsplit: int = -1) -> list[str]:
    """Split at ``sep`` outside square brackets; unbalanced brackets raise UsageError."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"Invalid entity config: unbalanced ']' in {text!r}")
        elif c == sep and depth == 0 and (maxsplit < 0 or len(parts) < maxsplit):
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise UsageError(f"Invalid entity config: unclosed '[' in {text!r}")
    parts.append(text[start:])
    return parts


def parse_delete_config(values: Sequence[str] | None) -> list[str]:
    """The keys of every ``--delete-config k1,k2`` given, trimmed, in order."""
    keys = [k.strip() for value in values or () for k in value.split(",")]
    return [k for k in keys if k]


def parse_command(args: argparse.Namespace) -> Command:
    """Check the command line as Kafka's tool does; raises :class:`UsageError`."""
    action = _action(args)
    entity, child, first = _entity(args, action)
    if action == "describe":
        return Command(action, entity, describe_all=bool(args.all), child=child, first=first)
    add, delete = _changes(args)
    return Command(action, entity, add=add, delete=delete, child=child, first=first)


def _action(args: argparse.Namespace) -> str:
    if args.describe == args.alter:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    if args.describe:
        for option in ("alter", "add_config", "add_config_file", "delete_config"):
            if getattr(args, option):
                raise UsageError(_conflict("describe", option))
        return "describe"
    if args.all:
        raise UsageError(_conflict("alter", "all"))
    return "alter"


def _conflict(used: str, other: str) -> str:
    return f'Option "[{used}]" can\'t be used with option "[{other.replace("_", "-")}]"'


_ENTITY_FLAGS = (
    ("topic", TOPICS),
    ("client", CLIENTS),
    ("user", USERS),
    ("broker", BROKERS),
    ("ip", IPS),
    ("group", GROUPS),
)
_DEFAULTS_FLAGS = (
    ("client_defaults", CLIENTS),
    ("user_defaults", USERS),
    ("broker_defaults", BROKERS),
    ("ip_defaults", IPS),
)


def _entity_types(args: argparse.Namespace) -> list[str]:
    """Kafka's order: ``--entity-type`` values, then the entity flags, then the defaults."""
    types = list(args.entity_type or ())
    types += [t for option, t in _ENTITY_FLAGS if getattr(args, option) is not None]
    types += [t for option, t in _DEFAULTS_FLAGS if getattr(args, option)]
    return types


def _entity_names(args: argparse.Namespace) -> list[str]:
    """``--entity-name`` and ``--entity-default`` (``""``) in command-line order, then the
    entity flags' names and the defaults flags' ``""``."""
    names = [str(n) for n in args.entity_names or ()]
    names += [str(getattr(args, option)) for option, _ in _ENTITY_FLAGS if getattr(args, option)]
    names += ["" for option, _ in _DEFAULTS_FLAGS if getattr(args, option)]
    return names


def _entity(args: argparse.Namespace, action: str) -> tuple[Entity, Entity | None, Entity]:
    """The entity (and a user's client id entity), checked as Kafka's tool checks them."""
    types = _entity_types(args)
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise UsageError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    for t in types:
        if t not in ENTITY_TYPES:
            raise UsageError(
                f"Invalid entity type {t}, the entity type must be one of "
                f"{', '.join(ENTITY_TYPES)} with a --bootstrap-server argument"
            )
    if not types:
        raise UsageError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {USERS, CLIENTS}:
        raise UsageError(f"Only '{USERS}' and '{CLIENTS}' entity types may be specified together")
    generic = args.entity_type or args.entity_names
    flags = any(getattr(args, o) is not None for o, _ in _ENTITY_FLAGS) or any(
        getattr(args, o) for o, _ in _DEFAULTS_FLAGS
    )
    if generic and flags:
        raise UsageError(
            "--entity-{type,name,default} should not be used in conjunction with specific "
            "entity flags"
        )
    names = _entity_names(args)
    if types[0] in QUOTA_TYPES:
        return _quota_entities(types, names, action)
    if len(names) > 1:
        raise UsageError("Only one of --entity-name or --entity-default may be specified")
    entity = Entity(types[0], names[0] if names else None)
    _check_name(entity, action)
    return entity, None, entity


def _quota_entities(
    types: list[str], names: list[str], action: str
) -> tuple[Entity, Entity | None, Entity]:
    """Kafka's parseClientQuotaEntity: a name per type for ``--alter``; a user comes
    first whichever order the pairs were given in."""
    if action == "alter":
        if not names:
            raise UsageError(
                "An entity-name or default entity must be specified with --alter of users, "
                "clients, brokers or ips"
            )
        if len(names) != len(types):
            raise UsageError(
                "--entity-name or --entity-default must be specified with each --entity-type "
                "for --alter"
            )
    if len(names) > len(types):
        raise UsageError("More entity names specified than entity types")
    pairs = [Entity(t, n) for t, n in zip_longest(types, names)]
    for pair in pairs:
        if pair.type == IPS and pair.name and not valid_ip(pair.name):
            raise UsageError(
                f"The entity name for {IPS} must be a valid IP or resolvable host, but it is: "
                f"{pair.name}"
            )
    ordered = list(reversed(pairs)) if pairs[0].type == CLIENTS and len(pairs) == 2 else pairs
    return ordered[0], ordered[1] if len(ordered) > 1 else None, pairs[0]


def _check_name(entity: Entity, action: str) -> None:
    if entity.type == GROUPS:
        if entity.name == DEFAULT_BROKER:
            raise UsageError("--entity-default is only supported for --entity-type brokers")
        if entity.name is None and action == "alter":
            raise UsageError("an entity name must be specified with --alter of groups")
        return
    if entity.type == TOPICS:
        if entity.name == DEFAULT_BROKER:
            raise UsageError("--entity-default is only supported for --entity-type brokers")
        if entity.name is None and action == "alter":
            raise UsageError("an entity name must be specified with --alter of topics")
        if entity.name is not None:
            try:
                validate_topic_name(entity.name)
            except KafkaError as exc:
                raise UsageError(str(exc)) from None
        return
    if entity.name is None and action == "alter":
        raise UsageError(
            "an entity-name or default entity must be specified with --alter of brokers"
        )
    if entity.name and not _is_int(entity.name):
        raise UsageError(
            "The entity name for brokers must be a valid integer broker id, but it is: "
            f"{entity.name}"
        )


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _changes(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    if args.add_config is not None and args.add_config_file is not None:
        raise UsageError("Only one of --add-config or --add-config-file must be specified")
    if args.add_config is None and args.add_config_file is None and not args.delete_config:
        raise UsageError(
            "At least one of --add-config, --add-config-file, or --delete-config must be "
            "specified with --alter"
        )
    add: dict[str, str] = {}
    if args.add_config_file is not None:
        add = read_properties(args.add_config_file)
    if args.add_config is not None:
        add = parse_add_config(args.add_config)
    return add, parse_delete_config(args.delete_config)


# output ----------------------------------------------------------------------------------
def source_name(source: int) -> str:
    """Kafka's name of a config source (``UNKNOWN`` for one it does not know)."""
    return _SOURCE_NAMES.get(source, "UNKNOWN")


def dynamic_source(entity_type: str, name: str) -> int:
    """The source of the configs set on this entity itself."""
    if entity_type == TOPICS:
        return int(ConfigSource.DYNAMIC_TOPIC_CONFIG)
    if entity_type == GROUPS:
        return int(ConfigSource.GROUP_CONFIG)
    if name == DEFAULT_BROKER:
        return int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    return int(ConfigSource.DYNAMIC_BROKER_CONFIG)


def describe_header(entity_type: str, name: str, describe_all: bool) -> str:
    """The line before an entity's configs."""
    if entity_type == BROKERS and name == DEFAULT_BROKER:
        return f"Default configs for {entity_type} in the cluster are:"
    scope = "All" if describe_all else "Dynamic"
    return f"{scope} configs for {entity_type[:-1]} {name} are:"


def _shown(value: str | None, sensitive: bool) -> str:
    return "null" if value is None or sensitive else value


def format_entry(entry: ConfigEntry) -> str:
    """``  name=value sensitive=false synonyms={SOURCE:name=value, ...}``."""
    synonyms = ", ".join(
        f"{source_name(s.source)}:{s.name}={_shown(s.value, entry.is_sensitive)}"
        for s in entry.synonyms
    )
    value = _shown(entry.value, entry.is_sensitive)
    sensitive = "true" if entry.is_sensitive else "false"
    return f"  {entry.name}={value} sensitive={sensitive} synonyms={{{synonyms}}}"


def describe_lines(
    entity_type: str, name: str, entries: Mapping[str, ConfigEntry], describe_all: bool
) -> list[str]:
    """The header and, sorted by name, the entity's dynamic configs (every one with
    ``describe_all``)."""
    source = dynamic_source(entity_type, name)
    shown = [e for e in entries.values() if describe_all or e.source == source]
    return [describe_header(entity_type, name, describe_all)] + [
        format_entry(e) for e in sorted(shown, key=lambda e: e.name)
    ]


def completed_message(entity: Entity) -> str:
    """What a successful ``--alter`` prints."""
    if entity.name:
        return f"Completed updating config for {entity.type[:-1]} {entity.name}."
    return f"Completed updating default config for {entity.type} in the cluster."


def alter_ops(add: Mapping[str, str], delete: Sequence[str]) -> list[AlterConfigOp]:
    """Deletions first, then the SETs, as Kafka's tool sends them."""
    return [AlterConfigOp(k, op=OpType.DELETE) for k in delete] + [
        AlterConfigOp(k, v, OpType.SET) for k, v in add.items()
    ]


def _error_line(error: KafkaError) -> str:
    code = error.code.name.upper()
    return (
        f"kplane configs: {code}: {error.message}" if error.message else f"kplane configs: {code}"
    )


# running ---------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    """Run the command; 0 on success, 1 when the command line or the broker refused it."""
    try:
        command = parse_command(args)
        config = client_config(args)
    except (UsageError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return asyncio.run(_run(config, command, args.bootstrap_server))


async def _run(config: ClientConfig, command: Command, bootstrap: str) -> int:
    if command.entity.type in QUOTA_TYPES:
        body = describe_quotas if command.action == "describe" else alter_quotas
    else:
        body = _describe if command.action == "describe" else _alter
    return await with_admin("kplane configs", config, bootstrap, lambda a: body(a, command))


def _pairs(command: Command) -> list[Entity]:
    return [command.entity] + ([command.child] if command.child is not None else [])


def quota_filter(command: Command) -> list[FilterComponent]:
    """Kafka's ``ClientQuotaFilter.containsOnly`` of the entity: a name matches exactly,
    ``--entity-default`` the default, no name any."""
    components = []
    for pair in _pairs(command):
        kind = _QUOTA_ENTITY_TYPES[pair.type]
        if pair.name is None:
            components.append(FilterComponent(kind, MATCH_SPECIFIED))
        elif pair.name == "":
            components.append(FilterComponent(kind, MATCH_DEFAULT))
        else:
            components.append(FilterComponent(kind, MATCH_EXACT, pair.name))
    return components


def java_double(value: float) -> str:
    """A double as Java's ``Double.toString`` writes it (``1048576.0``, ``1.048576E8``),
    as Kafka's tool prints quota values."""
    if value == 0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    sign, digits, exponent = decimal.Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    power = len(digits) - 1 + exponent
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def describe_quota_line(
    entity: Sequence[tuple[str, str | None]], values: Mapping[str, float]
) -> str:
    """``Quota configs for user-principal 'alice', the default client-id are k=v, ...``."""
    names = dict(entity)
    parts = []
    for kind, shown in (("user", "user-principal"), ("client-id", "client-id"), ("ip", "ip")):
        if kind in names:
            name = names[kind]
            parts.append(f"{shown} '{name}'" if name is not None else f"the default {shown}")
    entries = ", ".join(f"{k}={java_double(v)}" for k, v in values.items())
    return f"Quota configs for {', '.join(parts)} are {entries}"


async def describe_quotas(admin: Admin, command: Command) -> int:
    """The quotas of the entities the command names, then (for users, not defaults) their
    SCRAM credentials, as kafka-configs prints them."""
    try:
        found = await QuotaAdmin(admin).describe_client_quotas(quota_filter(command), strict=True)
    except KafkaError as exc:
        print(_error_line(exc), file=sys.stderr)
        return 1
    for entity, values in sorted(found.items(), key=lambda e: str(e[0])):
        print(describe_quota_line(entity, values))
    if command.entity.type == USERS and command.child is None and command.entity.name != "":
        return await describe_users(admin, command)
    return 0


async def alter_quotas(admin: Admin, command: Command) -> int:
    """Alter an entity's quotas (or a user's SCRAM credentials), with Kafka's checks."""
    try:
        scram = _quota_changes_are_scram(command)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 1
    if scram:
        return await alter_users(admin, command)
    quotas = QuotaAdmin(admin)
    entity = tuple((_QUOTA_ENTITY_TYPES[p.type], p.name or None) for p in _pairs(command))
    try:
        ops: dict[str, float | None] = {k: _quota_value(k, v) for k, v in command.add.items()}
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 1
    if command.delete:
        try:
            current = await quotas.describe_client_quotas(quota_filter(command), strict=True)
        except KafkaError as exc:
            print(_error_line(exc), file=sys.stderr)
            return 1
        existing = next(iter(current.values()), {})
        missing = [k for k in command.delete if k not in existing]
        if missing:
            print(f"kplane configs: Invalid config(s): {','.join(missing)}", file=sys.stderr)
            return 1
        ops.update(dict.fromkeys(command.delete))
    outcome = await quotas.alter_client_quotas([Alteration(entity, ops)])
    error = next(iter(outcome.values()), None)
    if error is not None:
        print(_error_line(error), file=sys.stderr)
        return 1
    print(completed_message(command.first or command.entity))
    return 0


def _quota_changes_are_scram(command: Command) -> bool:
    """Which of quotas or SCRAM credentials the changes are (Kafka's checks)."""
    keys = [*command.add, *command.delete]
    if command.entity.type == IPS:
        unknown = [k for k in keys if k not in IP_CONFIGS]
        if unknown:
            raise UsageError(
                f"Only connection quota configs can be added for '{IPS}' using "
                f"--bootstrap-server. Unexpected config names: {','.join(unknown)}"
            )
        return False
    scram = [k for k in keys if k in SCRAM_MECHANISMS]
    quota = [k for k in keys if k in USER_AND_CLIENT_CONFIGS]
    unknown = [k for k in keys if k not in SCRAM_MECHANISMS and k not in USER_AND_CLIENT_CONFIGS]
    if command.entity.type == CLIENTS or command.child is not None:
        if unknown or scram:
            raise UsageError(
                f"Only quota configs can be added for '{CLIENTS}' using --bootstrap-server. "
                f"Unexpected config names: {','.join(unknown + scram)}"
            )
        return False
    if unknown:
        raise UsageError(
            f"Only quota and SCRAM credential configs can be added for '{USERS}' using "
            f"--bootstrap-server. Unexpected config names: {','.join(unknown)}"
        )
    if scram:
        if command.entity.name == "":
            raise UsageError(
                "The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                "Credentials using --bootstrap-server."
            )
        if quota:
            raise UsageError(
                f"Cannot alter both quota and SCRAM credential configs simultaneously for "
                f"'{USERS}' using --bootstrap-server."
            )
        return True
    return False


def _quota_value(key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"Cannot parse quota configuration value for {key}: {value}") from None


def scram_changes(user: str, add: Mapping[str, str], delete: Sequence[str]) -> list[Any]:
    """``--add-config 'SCRAM-SHA-256=[iterations=8192,password=p]'`` and ``--delete-config
    SCRAM-SHA-512`` of a user as SCRAM upsertions and deletions; UsageError for any other
    key."""
    changes: list[Any] = []
    for key in [*add, *delete]:
        if key not in SCRAM_MECHANISMS:
            raise UsageError(
                f"kplane configs: {key}: only {' and '.join(SCRAM_MECHANISMS)} are SCRAM "
                "credentials"
            )
    for key in delete:
        changes.append(ScramDeletion(user, mechanism(key)))
    for key, value in add.items():
        fields = dict(item.split("=", 1) for item in value.split(",") if "=" in item)
        if "password" not in fields:
            raise UsageError(f"kplane configs: {key}: needs password=... (and iterations=N)")
        iterations = int(fields.get("iterations", MIN_ITERATIONS))
        changes.append(ScramUpsertion(user, mechanism(key), fields["password"], iterations))
    return changes


async def alter_users(admin: Admin, command: Command) -> int:
    """Create, replace or delete a user's SCRAM credentials."""
    user = command.entity.name
    assert user is not None  # parse_command requires a user for --alter
    try:
        changes = scram_changes(user, command.add, command.delete)
    except (UsageError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    error = (await admin.alter_user_scram_credentials(changes)).get(user)
    if error is not None:
        print(_error_line(error), file=sys.stderr)
        return 1
    print(f"Completed updating config for user {user}.")
    return 0


async def describe_users(admin: Admin, command: Command) -> int:
    """Each user's SCRAM mechanisms and iterations, as kafka-configs prints them."""
    users = None if command.entity.name is None else [command.entity.name]
    for user, described in sorted((await admin.describe_user_scram_credentials(users)).items()):
        if described.error is not None:
            if users is None or described.error.code != ErrorCode.resource_not_found:
                print(_error_line(described.error), file=sys.stderr)
                return 1
            continue
        credentials = ", ".join(
            f"{c.mechanism.name.replace('_', '-')}=iterations={c.iterations}"
            for c in described.credentials
        )
        print(f"SCRAM credential configs for user-principal '{user}' are {credentials}")
    return 0


async def _alter(admin: Admin, command: Command) -> int:
    name = command.entity.name
    assert name is not None  # parse_command requires a name or the default for --alter
    resource = command.entity.resource(name)
    answers = await admin.incremental_alter_configs(
        {resource: alter_ops(command.add, command.delete)}
    )
    error = answers.get(resource)
    if error is not None:
        print(_error_line(error), file=sys.stderr)
        return 1
    print(completed_message(command.entity))
    return 0


async def _describe(admin: Admin, command: Command) -> int:
    entity = command.entity
    names = [entity.name] if entity.name is not None else await _every_entity(admin, entity.type)
    described = await admin.describe_configs(
        [entity.resource(n) for n in names], include_synonyms=True
    )
    for name in names:
        result = described.get(entity.resource(name))
        if result is None:
            print(f"kplane configs: the broker did not describe {name!r}", file=sys.stderr)
            return 1
        if result.error is not None:
            print(_error_line(result.error), file=sys.stderr)
            return 1
        print("\n".join(describe_lines(entity.type, name, result.entries, command.describe_all)))
    return 0


async def _every_entity(admin: Admin, entity_type: str) -> list[str]:
    """Every topic (internal ones too), every group, or every broker then the cluster
    default."""
    if entity_type == GROUPS:
        return [g.group_id for g in await GroupAdmin(admin).list_groups()]
    if entity_type == BROKERS:
        cluster = await admin.client.refresh_metadata()
        return [str(b) for b in sorted(cluster.brokers)] + [DEFAULT_BROKER]
    return [t.name for t in await admin.describe_topics() if t.error is None]
