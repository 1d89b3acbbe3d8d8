"""Lifecycle: what start-up started, so that shutdown stops it in reverse."""

from __future__ import annotations

from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class Lifecycle:
    """One list of stop steps, appended as components start; ``shutdown`` runs them last
    first, each even when an earlier one failed, so a half-started broker is cleaned up."""

    def __init__(self) -> None:
        self._stops: list[tuple[str, Callable[[], object]]] = []

    def on_shutdown(self, name: str, stop: Callable[[], object]) -> None:
        """Run ``stop`` at shutdown, before every step registered earlier."""
        self._stops.append((name, stop))

    def shutdown(self) -> None:
        """Run every step registered, in reverse order."""
        while self._stops:
            name, stop = self._stops.pop()
            try:
                stop()
            except Exception:
                log.exception("shutdown step failed", step=name)
