"""Listener parsing and Kafka's listener validation rules (KIP-2, KIP-103, KIP-291)."""

from __future__ import annotations

from typing import Any

import pytest

from kplane.broker.config.endpoint import EndPoint, SecurityProtocol
from kplane.broker.config.errors import ConfigException
from kplane.broker.config.listeners import (
    ListenerConfig,
    default_advertised_host,
    listener_names,
    parse_endpoints,
    parse_protocol_map,
    parse_security_protocol,
    resolve_listeners,
)

PLAINTEXT, SSL = SecurityProtocol.PLAINTEXT, SecurityProtocol.SSL
DEFAULT_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
PMAP = parse_protocol_map(DEFAULT_MAP)


def resolve(**kwargs: Any) -> ListenerConfig:
    args: dict[str, Any] = {
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "advertised_listeners": None,
        "protocol_map": DEFAULT_MAP,
        "inter_broker_listener_name": None,
        "security_inter_broker_protocol": None,
        "control_plane_listener_name": None,
    }
    args.update(kwargs)
    return resolve_listeners(**args)


def error(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ConfigException) as e:
        fn(*args, **kwargs)
    message = str(e.value)
    assert "\n" not in message
    return message


# --- listener.security.protocol.map ------------------------------------------------------


def test_protocol_map_parses_and_upper_cases_names() -> None:
    assert parse_protocol_map(" internal : plaintext , EXTERNAL:SSL ") == {
        "INTERNAL": PLAINTEXT,
        "EXTERNAL": SSL,
    }


def test_protocol_map_empty() -> None:
    assert parse_protocol_map("") == {}


def test_protocol_map_unknown_protocol() -> None:
    msg = error(parse_protocol_map, "INTERNAL:PLAINTEXT,EXTERNAL:TLS")
    assert msg.startswith("listener.security.protocol.map:")
    assert '"TLS"' in msg and '"EXTERNAL"' in msg


def test_protocol_map_malformed_entry() -> None:
    msg = error(parse_protocol_map, "INTERNAL:PLAINTEXT,EXTERNAL")
    assert msg.startswith("listener.security.protocol.map: malformed entry")
    assert '"EXTERNAL"' in msg


def test_protocol_map_duplicate_name() -> None:
    msg = error(parse_protocol_map, "INTERNAL:PLAINTEXT,internal:SSL")
    assert msg.startswith("listener.security.protocol.map: duplicate listener name")
    assert '"INTERNAL"' in msg


def test_security_protocol_case_insensitive_and_unknown() -> None:
    assert parse_security_protocol("sasl_ssl", "k") is SecurityProtocol.SASL_SSL
    msg = error(parse_security_protocol, "TRACE", "security.inter.broker.protocol")
    assert msg.startswith("security.inter.broker.protocol:") and '"TRACE"' in msg


# --- NAME://host:port --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("PLAINTEXT://:9092", EndPoint("PLAINTEXT", "", 9092, PLAINTEXT)),
        (
            "plaintext://broker1.example.com:9092",
            EndPoint("PLAINTEXT", "broker1.example.com", 9092, PLAINTEXT),
        ),
        ("SSL://10.0.0.1:9093", EndPoint("SSL", "10.0.0.1", 9093, SSL)),
        ("SSL://[::1]:9093", EndPoint("SSL", "::1", 9093, SSL)),
        ("SSL://[fe80::1%eth0]:9093", EndPoint("SSL", "fe80::1%eth0", 9093, SSL)),
        ("SSL://::1:9093", EndPoint("SSL", "::1", 9093, SSL)),
        ("PLAINTEXT://localhost:0", EndPoint("PLAINTEXT", "localhost", 0, PLAINTEXT)),
        ("PLAINTEXT://h:65535", EndPoint("PLAINTEXT", "h", 65535, PLAINTEXT)),
    ],
)
def test_parse_endpoint(value: str, expected: EndPoint) -> None:
    assert parse_endpoints(value, PMAP, "listeners") == [expected]


def test_parse_endpoints_trims_and_skips_empty_entries() -> None:
    eps = parse_endpoints(" PLAINTEXT://a:1 , ,SSL://b:2,", PMAP, "listeners")
    assert [e.connection_string for e in eps] == ["PLAINTEXT://a:1", "SSL://b:2"]


def test_ipv6_connection_string_round_trips() -> None:
    (ep,) = parse_endpoints("SSL://[::1]:9093", PMAP, "listeners")
    assert ep.connection_string == "SSL://[::1]:9093"


@pytest.mark.parametrize(
    "entry",
    [
        "PLAINTEXT:/:9092",
        "PLAINTEXT://host",
        "://host:9092",
        "PLAINTEXT://host:port",
        "PLAINTEXT://ho st:9092",
        "PLAINTEXT://[::1:9092",
        "PLAINTEXT://[host]:9092",
        "PLAINTEXT://host:1:9092",
        "localhost:9092",
    ],
)
def test_malformed_listener(entry: str) -> None:
    msg = error(parse_endpoints, f"SSL://:9093,{entry}", PMAP, "listeners")
    assert msg.startswith("listeners: malformed listener")
    assert f'"{entry}"' in msg


@pytest.mark.parametrize("port", ["65536", "-1"])
def test_port_out_of_range(port: str) -> None:
    msg = error(parse_endpoints, f"PLAINTEXT://h:{port}", PMAP, "listeners")
    assert msg.startswith("listeners: port") and f'"PLAINTEXT://h:{port}"' in msg


def test_unmapped_listener_name() -> None:
    msg = error(parse_endpoints, "PLAINTEXT://:9092,CLIENT://:9093", PMAP, "listeners")
    assert msg.startswith("listeners:")
    assert '"CLIENT"' in msg and '"CLIENT://:9093"' in msg
    assert "listener.security.protocol.map" in msg


def test_duplicate_listener_name() -> None:
    value = "PLAINTEXT://:9092,PLAINTEXT://:9093"
    msg = error(parse_endpoints, value, PMAP, "listeners")
    assert msg == f'listeners: duplicate listener name "PLAINTEXT" in "{value}"'


def test_duplicate_listener_name_is_case_insensitive() -> None:
    msg = error(parse_endpoints, "PLAINTEXT://:9092,plaintext://:9093", PMAP, "listeners")
    assert 'duplicate listener name "PLAINTEXT"' in msg


def test_duplicate_port() -> None:
    msg = error(parse_endpoints, "PLAINTEXT://a:9092,SSL://b:9092", PMAP, "listeners")
    assert msg.startswith("listeners: duplicate port 9092")
    assert '"PLAINTEXT://a:9092"' in msg and '"SSL://b:9092"' in msg


def test_same_port_allowed_for_one_ipv4_and_one_ipv6_listener() -> None:
    eps = parse_endpoints("PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092", PMAP, "listeners")
    assert [e.port for e in eps] == [9092, 9092]
    eps = parse_endpoints("PLAINTEXT://0.0.0.0:9092,SSL://[::]:9092", PMAP, "listeners")
    assert len(eps) == 2


def test_same_port_rejected_for_two_ipv4_listeners() -> None:
    msg = error(
        parse_endpoints, "PLAINTEXT://127.0.0.1:9092,SSL://10.0.0.1:9092", PMAP, "listeners"
    )
    assert "duplicate port 9092" in msg and "IPv4" in msg


def test_same_port_rejected_when_a_third_listener_joins_ipv4_and_ipv6() -> None:
    value = "PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092,SASL_SSL://host:9092"
    msg = error(parse_endpoints, value, PMAP, "listeners")
    assert "duplicate port 9092" in msg and '"SASL_SSL://host:9092"' in msg


def test_port_zero_may_repeat() -> None:
    assert len(parse_endpoints("PLAINTEXT://:0,SSL://:0", PMAP, "listeners")) == 2


def test_advertised_listeners_may_share_ports() -> None:
    eps = parse_endpoints("PLAINTEXT://a:9092,SSL://b:9092", PMAP, "advertised.listeners")
    assert len(eps) == 2


# --- cross-checks ----------------------------------------------------------------------


def test_defaults_resolve() -> None:
    cfg = resolve(listeners="PLAINTEXT://127.0.0.1:9092")
    assert cfg.listeners == (EndPoint("PLAINTEXT", "127.0.0.1", 9092, PLAINTEXT),)
    assert cfg.advertised_listeners == cfg.listeners
    assert cfg.inter_broker_listener_name == "PLAINTEXT"
    assert cfg.inter_broker_security_protocol is PLAINTEXT
    assert cfg.control_plane_listener_name is None


def test_no_listener() -> None:
    assert error(resolve, listeners=" , ").startswith("listeners: no listener defined")


def test_advertised_duplicate_name() -> None:
    value = "PLAINTEXT://a:9092,PLAINTEXT://b:9092"
    msg = error(resolve, advertised_listeners=value)
    assert msg == f'advertised.listeners: duplicate listener name "PLAINTEXT" in "{value}"'


def test_advertised_name_missing_from_listeners() -> None:
    msg = error(resolve, advertised_listeners="PLAINTEXT://a:9092,SSL://a:9093")
    assert msg.startswith("advertised.listeners:")
    assert '"SSL"' in msg and '"SSL://a:9093"' in msg and "listeners (PLAINTEXT)" in msg


def test_advertised_unmapped_name() -> None:
    msg = error(resolve, advertised_listeners="OUTSIDE://a:9092")
    assert msg.startswith("advertised.listeners:") and '"OUTSIDE"' in msg


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]"])
def test_advertised_wildcard_host(host: str) -> None:
    msg = error(resolve, advertised_listeners=f"PLAINTEXT://{host}:9092")
    assert msg.startswith("advertised.listeners: wildcard host")
    assert f'"PLAINTEXT://{host}:9092"' in msg


def test_implicit_advertised_wildcard_host() -> None:
    msg = error(resolve, listeners="PLAINTEXT://0.0.0.0:9092")
    assert msg.startswith('advertised.listeners: wildcard host "0.0.0.0"')
    assert "taken from listeners" in msg


def test_empty_host_advertises_default_host() -> None:
    cfg = resolve(listeners="PLAINTEXT://:9092")
    assert cfg.listeners[0].host == ""
    assert cfg.advertised_listeners[0].host == default_advertised_host()
    assert default_advertised_host()


def test_blank_advertised_listeners_counts_as_unset() -> None:
    cfg = resolve(advertised_listeners="  ")
    assert cfg.advertised_listeners == cfg.listeners


def test_advertised_differs_from_listeners() -> None:
    cfg = resolve(
        listeners="INTERNAL://127.0.0.1:9093,EXTERNAL://127.0.0.1:9094",
        advertised_listeners="INTERNAL://127.0.0.1:9093,EXTERNAL://localhost:9094",
        protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:SSL",
        inter_broker_listener_name="internal",
    )
    assert cfg.inter_broker_listener_name == "INTERNAL"
    assert cfg.advertised_listeners[1] == EndPoint("EXTERNAL", "localhost", 9094, SSL)


def test_advertised_subset_of_listeners() -> None:
    cfg = resolve(
        listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        advertised_listeners="PLAINTEXT://localhost:9092",
    )
    assert [e.listener_name for e in cfg.advertised_listeners] == ["PLAINTEXT"]


def test_inter_broker_name_and_protocol_both_set() -> None:
    msg = error(
        resolve, inter_broker_listener_name="PLAINTEXT", security_inter_broker_protocol="PLAINTEXT"
    )
    assert msg.startswith("inter.broker.listener.name: set only one of")
    assert "security.inter.broker.protocol" in msg


def test_inter_broker_name_unmapped() -> None:
    msg = error(resolve, inter_broker_listener_name="REPLICATION")
    assert msg.startswith('inter.broker.listener.name: listener name "REPLICATION"')
    assert "listener.security.protocol.map" in msg


def test_inter_broker_name_not_advertised() -> None:
    msg = error(
        resolve,
        listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        advertised_listeners="PLAINTEXT://localhost:9092",
        inter_broker_listener_name="SSL",
    )
    assert msg.startswith('inter.broker.listener.name: listener name "SSL"')
    assert "advertised.listeners (PLAINTEXT)" in msg


def test_inter_broker_protocol_selects_listener_of_that_name() -> None:
    cfg = resolve(
        listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
        security_inter_broker_protocol="ssl",
    )
    assert cfg.inter_broker_listener_name == "SSL"
    assert cfg.inter_broker_security_protocol is SSL


def test_inter_broker_protocol_without_listener_of_that_name() -> None:
    msg = error(resolve, security_inter_broker_protocol="SSL")
    assert msg.startswith('security.inter.broker.protocol: no listener named "SSL"')


def test_default_inter_broker_protocol_needs_a_plaintext_listener() -> None:
    msg = error(
        resolve,
        listeners="INTERNAL://127.0.0.1:9093",
        protocol_map="INTERNAL:PLAINTEXT",
    )
    assert msg.startswith('security.inter.broker.protocol: no listener named "PLAINTEXT"')
    assert "(the default)" in msg and "inter.broker.listener.name" in msg


def test_inter_broker_protocol_unknown() -> None:
    msg = error(resolve, security_inter_broker_protocol="TRACE")
    assert msg.startswith("security.inter.broker.protocol:") and '"TRACE"' in msg


# --- control.plane.listener.name (KIP-291) ---------------------------------------------

CP = {
    "listeners": "CONTROLLER://127.0.0.1:9091,INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
    "protocol_map": "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,EXTERNAL:SSL",
    "inter_broker_listener_name": "INTERNAL",
}


def test_control_plane_listener() -> None:
    cfg = resolve(**CP, control_plane_listener_name="controller")
    assert cfg.control_plane_listener_name == "CONTROLLER"


def test_control_plane_listener_unmapped() -> None:
    msg = error(resolve, **CP, control_plane_listener_name="CONTROL")
    assert msg.startswith('control.plane.listener.name: listener name "CONTROL"')
    assert "listener.security.protocol.map" in msg


def test_control_plane_listener_not_in_listeners() -> None:
    msg = error(
        resolve,
        **{**CP, "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093"},
        control_plane_listener_name="CONTROLLER",
    )
    assert msg.startswith('control.plane.listener.name: listener name "CONTROLLER"')
    assert "not defined in listeners (INTERNAL, EXTERNAL)" in msg


def test_control_plane_listener_not_advertised() -> None:
    msg = error(
        resolve,
        **CP,
        advertised_listeners="INTERNAL://localhost:9092,EXTERNAL://localhost:9093",
        control_plane_listener_name="CONTROLLER",
    )
    assert msg.startswith('control.plane.listener.name: listener name "CONTROLLER"')
    assert "advertised.listeners (INTERNAL, EXTERNAL)" in msg


def test_control_plane_listener_equal_to_inter_broker_listener() -> None:
    msg = error(resolve, **CP, control_plane_listener_name="internal")
    assert msg.startswith('control.plane.listener.name: listener name "INTERNAL"')
    assert "inter-broker listener" in msg


def test_listener_names_of_the_well_formed_entries() -> None:
    value = "plaintext://:9092, EXTERNAL://[::1]:9093,bad-entry, x://h:1"
    assert listener_names(value) == {"PLAINTEXT", "EXTERNAL", "X"}
    assert listener_names("") == set()
