"""``listener.name.<listener>.[<mechanism>.]<config>``: a config set for one listener
(KIP-103, KIP-226). One parser and one formatter for every caller."""

from __future__ import annotations

from dataclasses import dataclass

from kplane.broker.config.definitions import CONFIGS, LISTENER_PREFIX


@dataclass(frozen=True, slots=True)
class ListenerKey:
    """A listener-prefixed config key; ``listener`` and ``mechanism`` in lower case."""

    listener: str
    name: str
    mechanism: str | None = None

    @classmethod
    def parse(cls, key: str) -> ListenerKey | None:
        """The parts of ``key``, or None when it is not listener-prefixed. A mechanism is
        read only where the rest after it is a known config (``plain.sasl.jaas.config``)."""
        if not key.startswith(LISTENER_PREFIX):
            return None
        listener, _, rest = key[len(LISTENER_PREFIX) :].partition(".")
        mechanism, _, after = rest.partition(".")
        if rest not in CONFIGS and after in CONFIGS:
            return cls(listener, after, mechanism)
        return cls(listener, rest)

    @classmethod
    def of(cls, listener: str, name: str, mechanism: str | None = None) -> ListenerKey:
        """The key of ``name`` for ``listener`` (any case)."""
        return cls(listener.lower(), name, mechanism.lower() if mechanism else None)

    def __str__(self) -> str:
        middle = f"{self.mechanism}." if self.mechanism else ""
        return f"{LISTENER_PREFIX}{self.listener}.{middle}{self.name}"

    def or_unprefixed(self) -> str:
        """How an error names a setting read from either key: ``<this key> (or <name>)``."""
        return f"{self} (or {self.name})"


def base_name(key: str) -> str:
    """The config a key sets: ``listener.name.l.ssl.keystore.location`` -> the ssl name
    (``listener.name.l.plain.sasl.jaas.config`` -> ``sasl.jaas.config``)."""
    parsed = ListenerKey.parse(key)
    return key if parsed is None else parsed.name
