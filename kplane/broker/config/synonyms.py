"""Broker configs that are one setting under several names (Kafka's ``brokerConfigSynonyms``).

Some settings may be given in more than one unit: ``log.retention.ms``, ``log.retention.minutes``
and ``log.retention.hours`` all set how long segments are kept, and the first one set wins.
``log.flush.interval.ms`` falls back to ``log.flush.scheduler.interval.ms`` (but not the other
way round). Every other config is its own only synonym.

Listener overrides (``listener.name.<listener>.<config>``) are not handled here: their synonym
is the bare config.
"""

from __future__ import annotations

from kplane.broker.config.definitions import CONFIGS, DynamicScope

_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)
_FALLBACKS: dict[str, tuple[str, ...]] = {
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}
_SYNONYMS: dict[str, tuple[str, ...]] = {
    **{name: group for group in _GROUPS for name in group},
    **_FALLBACKS,
}

MS_PER_UNIT: dict[str, int] = {
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
}
"""Milliseconds in one unit of the synonyms that are not in milliseconds."""


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker configs that can supply ``name``'s value, highest precedence first.

    ``name`` itself is among them: ``log.retention.hours`` gives ``("log.retention.ms",
    "log.retention.minutes", "log.retention.hours")``; a config without synonyms gives
    ``(name,)``.
    """
    return _SYNONYMS.get(name, (name,))


def dynamic_synonym(name: str) -> str | None:
    """For a read-only config, the dynamic synonym to set instead (``log.retention.hours`` ->
    ``log.retention.ms``); None for a dynamic config, or a read-only one without such a
    synonym."""
    definition = CONFIGS.get(name)
    if definition is None or definition.dynamic is not DynamicScope.READ_ONLY:
        return None
    return next(
        (
            synonym
            for synonym in broker_synonyms(name)
            if CONFIGS[synonym].dynamic is not DynamicScope.READ_ONLY
        ),
        None,
    )
