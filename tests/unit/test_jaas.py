"""JAAS login contexts as sasl.jaas.config gives them."""

import pytest

from kplane.common.jaas import JaasError, parse_jaas_config


def test_plain_login_module_with_users() -> None:
    module = parse_jaas_config(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="a\\"b" user_admin="admin-secret" user_bob=bare;'
    )
    assert module.name.endswith("PlainLoginModule") and module.flag == "required"
    assert module.options == {
        "username": "admin",
        "password": 'a"b',
        "user_admin": "admin-secret",
        "user_bob": "bare",
    }


@pytest.mark.parametrize(
    "text",
    [
        'PlainLoginModule required user_a="b"',  # no ';'
        'PlainLoginModule maybe user_a="b";',  # bad flag
        'required user_a="b";',  # no module
        "A required; B required;",  # two modules
        'A required user_a="unterminated;',
    ],
)
def test_malformed_contexts_are_refused(text: str) -> None:
    with pytest.raises(JaasError):
        parse_jaas_config(text)
