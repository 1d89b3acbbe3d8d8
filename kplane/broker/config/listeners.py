"""Listener configs (KIP-2, KIP-103, KIP-291): parsing and Kafka's validation rules.

Every failure raises :class:`ConfigException` with one line naming the key and the offending
entry.

Choices where Kafka leaves room:

* An empty host (``PLAINTEXT://:9092``) binds every interface. When such an endpoint is
  advertised (``advertised.listeners`` unset, or an empty host in it), Kafka publishes
  ``InetAddress.getLocalHost().getCanonicalHostName()``; kplane publishes ``socket.getfqdn()``
  when that name resolves, and ``localhost`` otherwise, so a broker on a machine without DNS
  still answers with a host its local clients can reach.
* Wildcard addresses (``0.0.0.0``, ``::``) are rejected in the advertised endpoints, explicit or
  taken from ``listeners`` (Kafka rejects ``0.0.0.0`` the same way): clients cannot connect to
  them, so the operator must say what to advertise.
* Port 0 (pick a free port) is exempt from the duplicate-port rule, as in Kafka; an advertised
  port 0 stands for the port the listener actually bound.
* A blank ``advertised.listeners`` counts as unset.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.config.errors import ConfigException

LISTENERS = "listeners"
ADVERTISED_LISTENERS = "advertised.listeners"
LISTENER_SECURITY_PROTOCOL_MAP = "listener.security.protocol.map"
INTER_BROKER_LISTENER_NAME = "inter.broker.listener.name"
SECURITY_INTER_BROKER_PROTOCOL = "security.inter.broker.protocol"
CONTROL_PLANE_LISTENER_NAME = "control.plane.listener.name"

_HOST_CHARS = r"[0-9a-zA-Z\-%._:]*"
_ENDPOINT = re.compile(
    rf"^(?P<name>[^\s:/,]+)://(?:\[(?P<v6>{_HOST_CHARS})\]|(?P<host>{_HOST_CHARS})):(?P<port>-?[0-9]+)$"
)


def normalise(listener_name: str) -> str:
    """Listener names are case-insensitive; Kafka upper-cases them."""
    return listener_name.strip().upper()


def parse_security_protocol(value: str, key: str) -> SecurityProtocol:
    """A security protocol name, case-insensitive."""
    try:
        return SecurityProtocol[value.strip().upper()]
    except KeyError:
        raise ConfigException(
            f'{key}: unknown security protocol "{value.strip()}", '
            f"expected one of {_names(SecurityProtocol.__members__)}",
            name=key,
        ) from None


def parse_protocol_map(
    value: str, key: str = LISTENER_SECURITY_PROTOCOL_MAP
) -> dict[str, SecurityProtocol]:
    """Parse ``NAME:PROTOCOL,...`` into upper-cased listener names mapped to protocols."""
    result: dict[str, SecurityProtocol] = {}
    for entry in _entries(value):
        name, sep, protocol = entry.rpartition(":")
        name = normalise(name)
        if not sep or not name or not protocol.strip():
            raise ConfigException(
                f'{key}: malformed entry "{entry}" in "{value}", expected NAME:PROTOCOL', name=key
            )
        if name in result:
            raise ConfigException(f'{key}: duplicate listener name "{name}" in "{value}"', name=key)
        try:
            result[name] = SecurityProtocol[protocol.strip().upper()]
        except KeyError:
            raise ConfigException(
                f'{key}: unknown security protocol "{protocol.strip()}" for listener name '
                f'"{name}" in "{value}", expected one of {_names(SecurityProtocol.__members__)}',
                name=key,
            ) from None
    return result


def parse_endpoints(
    value: str,
    protocol_map: Mapping[str, SecurityProtocol],
    key: str,
    *,
    distinct_ports: bool | None = None,
) -> list[EndPoint]:
    """Parse ``NAME://host:port,...`` into endpoints, as Kafka's ``listenerListToEndPoints``.

    Names must be mapped in ``protocol_map`` and distinct. Ports must be distinct too when
    ``distinct_ports`` (by default only for ``listeners``): two listeners may share a port only
    when one has an IPv4 address and the other an IPv6 address.
    """
    endpoints = [_parse_endpoint(entry, value, protocol_map, key) for entry in _entries(value)]
    seen: set[str] = set()
    for ep in endpoints:
        if ep.listener_name in seen:
            raise ConfigException(
                f'{key}: duplicate listener name "{ep.listener_name}" in "{value}"', name=key
            )
        seen.add(ep.listener_name)
    if distinct_ports if distinct_ports is not None else key == LISTENERS:
        _check_distinct_ports(endpoints, value, key)
    return endpoints


def listener_names(value: str) -> set[str]:
    """The names of the well-formed entries of a ``listeners`` value (the rest is for
    ``parse_endpoints`` to refuse)."""
    return {normalise(m["name"]) for entry in _entries(value) if (m := _ENDPOINT.match(entry))}


def _entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def _parse_endpoint(
    entry: str, value: str, protocol_map: Mapping[str, SecurityProtocol], key: str
) -> EndPoint:
    m = _ENDPOINT.match(entry)
    host = "" if m is None else (m["v6"] if m["v6"] is not None else m["host"])
    if m is None or ((":" in host or m["v6"] is not None) and _ip_version(host) != 6):
        raise ConfigException(
            f'{key}: malformed listener "{entry}" in "{value}", expected NAME://host:port',
            name=key,
        )
    port = int(m["port"])
    if not 0 <= port <= 65535:
        raise ConfigException(f'{key}: port {port} of "{entry}" is outside 0..65535', name=key)
    name = normalise(m["name"])
    protocol = protocol_map.get(name)
    if protocol is None:
        raise ConfigException(
            f'{key}: listener name "{name}" of "{entry}" has no security protocol in '
            f"{LISTENER_SECURITY_PROTOCOL_MAP} (mapped: {_names(protocol_map)})",
            name=key,
        )
    return EndPoint(name, host, port, protocol)


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None


def _check_distinct_ports(endpoints: list[EndPoint], value: str, key: str) -> None:
    by_port: dict[int, list[EndPoint]] = {}
    for ep in endpoints:
        if ep.port != 0:
            by_port.setdefault(ep.port, []).append(ep)
    for port, group in by_port.items():
        if len(group) == 1:
            continue
        versions = sorted(str(_ip_version(ep.host)) for ep in group)
        if versions != ["4", "6"]:
            shared = " and ".join(f'"{ep.connection_string}"' for ep in group)
            raise ConfigException(
                f"{key}: duplicate port {port} in {shared}; listeners may share a port only "
                "when one has an IPv4 address and the other an IPv6 address",
                name=key,
            )


def _names(names: Iterable[str]) -> str:
    return ", ".join(names) or "none"


@functools.cache
def default_advertised_host() -> str:
    """The host advertised for an endpoint with an empty host (see the module docstring)."""
    fqdn = socket.getfqdn()
    try:
        socket.getaddrinfo(fqdn, None)
    except OSError:
        return "localhost"
    return fqdn or "localhost"


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """The validated listener configs of one broker."""

    listeners: tuple[EndPoint, ...]
    advertised_listeners: tuple[EndPoint, ...]
    protocol_map: Mapping[str, SecurityProtocol]
    inter_broker_listener_name: str
    inter_broker_security_protocol: SecurityProtocol
    control_plane_listener_name: str | None


def resolve_listeners(
    *,
    listeners: str,
    advertised_listeners: str | None,
    protocol_map: str,
    inter_broker_listener_name: str | None,
    security_inter_broker_protocol: str | None,
    control_plane_listener_name: str | None,
) -> ListenerConfig:
    """Parse and cross-check the listener configs as Kafka's ``KafkaConfig`` does.

    ``None`` means the config is not set; ``security_inter_broker_protocol`` then defaults to
    PLAINTEXT, and setting it explicitly together with ``inter_broker_listener_name`` is an
    error even when its value is the default.
    """
    pmap = parse_protocol_map(protocol_map)
    bound = parse_endpoints(listeners, pmap, LISTENERS)
    if not bound:
        raise ConfigException(f'{LISTENERS}: no listener defined in "{listeners}"', name=LISTENERS)
    implicit = advertised_listeners is None or not advertised_listeners.strip()
    advertised = (
        list(bound)
        if implicit
        else parse_endpoints(advertised_listeners or "", pmap, ADVERTISED_LISTENERS)
    )
    advertised = _check_advertised(advertised, bound, implicit)
    names = [ep.listener_name for ep in advertised]
    ib_name, ib_protocol = _inter_broker(
        pmap, names, inter_broker_listener_name, security_inter_broker_protocol
    )
    cp_name = _control_plane(pmap, bound, names, ib_name, control_plane_listener_name)
    return ListenerConfig(
        listeners=tuple(bound),
        advertised_listeners=tuple(advertised),
        protocol_map=pmap,
        inter_broker_listener_name=ib_name,
        inter_broker_security_protocol=ib_protocol,
        control_plane_listener_name=cp_name,
    )


def _check_advertised(
    advertised: list[EndPoint], bound: list[EndPoint], implicit: bool
) -> list[EndPoint]:
    key = ADVERTISED_LISTENERS
    bound_names = [ep.listener_name for ep in bound]
    origin = f" (taken from {LISTENERS}; set {ADVERTISED_LISTENERS})" if implicit else ""
    result = []
    for ep in advertised:
        if ep.listener_name not in bound_names:
            raise ConfigException(
                f'{key}: listener name "{ep.listener_name}" of "{ep.connection_string}" is not '
                f"defined in {LISTENERS} ({_names(bound_names)})",
                name=key,
            )
        if ep.host and _is_wildcard(ep.host):
            raise ConfigException(
                f'{key}: wildcard host "{ep.host}" of "{ep.connection_string}" cannot be '
                f"advertised, clients cannot connect to it{origin}",
                name=key,
            )
        if not ep.host:
            ep = EndPoint(
                ep.listener_name, default_advertised_host(), ep.port, ep.security_protocol
            )
        result.append(ep)
    return result


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _inter_broker(
    pmap: Mapping[str, SecurityProtocol],
    advertised_names: list[str],
    name_value: str | None,
    protocol_value: str | None,
) -> tuple[str, SecurityProtocol]:
    if name_value is not None and name_value.strip():
        if protocol_value is not None:
            raise ConfigException(
                f"{INTER_BROKER_LISTENER_NAME}: set only one of {INTER_BROKER_LISTENER_NAME} "
                f'("{name_value.strip()}") and {SECURITY_INTER_BROKER_PROTOCOL} '
                f'("{protocol_value.strip()}")',
                name=INTER_BROKER_LISTENER_NAME,
            )
        name = normalise(name_value)
        protocol = pmap.get(name)
        if protocol is None:
            raise ConfigException(
                f'{INTER_BROKER_LISTENER_NAME}: listener name "{name}" has no security '
                f"protocol in {LISTENER_SECURITY_PROTOCOL_MAP} (mapped: {_names(pmap)})",
                name=INTER_BROKER_LISTENER_NAME,
            )
        if name not in advertised_names:
            raise ConfigException(
                f'{INTER_BROKER_LISTENER_NAME}: listener name "{name}" is not among '
                f"{ADVERTISED_LISTENERS} ({_names(advertised_names)})",
                name=INTER_BROKER_LISTENER_NAME,
            )
        return name, protocol
    key = SECURITY_INTER_BROKER_PROTOCOL
    protocol = parse_security_protocol(protocol_value or SecurityProtocol.PLAINTEXT.name, key)
    if protocol.name not in advertised_names:
        default = "" if protocol_value is not None else " (the default)"
        raise ConfigException(
            f'{key}: no listener named "{protocol.name}"{default} among {ADVERTISED_LISTENERS} '
            f"({_names(advertised_names)}); set {INTER_BROKER_LISTENER_NAME} instead",
            name=key,
        )
    return protocol.name, protocol


def _control_plane(
    pmap: Mapping[str, SecurityProtocol],
    bound: list[EndPoint],
    advertised_names: list[str],
    inter_broker_name: str,
    value: str | None,
) -> str | None:
    key = CONTROL_PLANE_LISTENER_NAME
    if value is None or not value.strip():
        return None
    name = normalise(value)
    bound_names = [ep.listener_name for ep in bound]
    problem = None
    if name not in pmap:
        problem = (
            f"has no security protocol in {LISTENER_SECURITY_PROTOCOL_MAP} (mapped: {_names(pmap)})"
        )
    elif name not in bound_names:
        problem = f"is not defined in {LISTENERS} ({_names(bound_names)})"
    elif name not in advertised_names:
        problem = f"is not among {ADVERTISED_LISTENERS} ({_names(advertised_names)})"
    elif name == inter_broker_name:
        problem = "is also the inter-broker listener; the control plane needs a listener of its own"
    if problem is not None:
        raise ConfigException(f'{key}: listener name "{name}" {problem}', name=key)
    return name
