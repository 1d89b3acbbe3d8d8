"""JAAS login contexts as Kafka's ``sasl.jaas.config`` gives them.

``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";``
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(
    r'\s*(?:(?P<semi>;)|(?P<key>[A-Za-z0-9_.$-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"'
    r"|(?P<bare>[^\s;\"]+))|(?P<word>[A-Za-z0-9_.$-]+))"
)
FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    """A login context that does not parse."""


@dataclass(frozen=True)
class LoginModule:
    """One login module entry: its class, its control flag and its options."""

    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas_config(text: str) -> LoginModule:
    """Parse a one-module ``sasl.jaas.config`` value (Kafka allows exactly one)."""
    pos = 0
    words: list[str] = []
    options: dict[str, str] = {}
    terminated = False
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise JaasError(f"unexpected text at character {pos}: {text[pos : pos + 20]!r}")
        pos = match.end()
        if match.group("semi"):
            terminated = True
            if text[pos:].strip():
                raise JaasError("only one login module is allowed")
            break
        if match.group("key"):
            quoted = match.group("quoted")
            options[match.group("key")] = (
                match.group("bare") if quoted is None else re.sub(r"\\(.)", r"\1", quoted)
            )
        else:
            if options:
                raise JaasError(f"unexpected word {match.group('word')!r} after options")
            words.append(match.group("word"))
    if not terminated:
        raise JaasError("the login module must end with ';'")
    if len(words) != 2 or words[1] not in FLAGS:
        raise JaasError(
            "expected '<LoginModule class> <required|requisite|sufficient|optional> "
            'key="value" ... ;\''
        )
    return LoginModule(words[0], words[1], options)
