"""One parser and formatter for listener-prefixed config keys."""

from kplane.broker.config.listener_key import ListenerKey, base_name


def test_parse_and_format_round_trip() -> None:
    for key, parts in [
        (
            "listener.name.external.ssl.keystore.location",
            ("external", "ssl.keystore.location", None),
        ),
        (
            "listener.name.sasl_ssl.plain.sasl.jaas.config",
            ("sasl_ssl", "sasl.jaas.config", "plain"),
        ),
        ("listener.name.x.not.a.config", ("x", "not.a.config", None)),
    ]:
        parsed = ListenerKey.parse(key)
        assert parsed is not None
        assert (parsed.listener, parsed.name, parsed.mechanism) == parts
        assert str(parsed) == key


def test_plain_keys_and_base_names() -> None:
    assert ListenerKey.parse("ssl.keystore.location") is None
    assert base_name("listener.name.l.scram-sha-256.sasl.jaas.config") == "sasl.jaas.config"
    assert base_name("num.io.threads") == "num.io.threads"
    key = ListenerKey.of("EXTERNAL", "sasl.jaas.config", "PLAIN")
    assert str(key) == "listener.name.external.plain.sasl.jaas.config"
    assert ListenerKey.of("A", "ssl.client.auth").or_unprefixed() == (
        "listener.name.a.ssl.client.auth (or ssl.client.auth)"
    )
