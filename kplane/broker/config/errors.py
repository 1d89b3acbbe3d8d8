"""The one error a bad configuration raises."""

from __future__ import annotations


class ConfigException(ValueError):
    """A configuration kplane cannot start with.

    The message is one line that names the key and the offending entry, so that it can be
    printed as it is before a non-zero exit.
    """

    def __init__(self, message: str, *, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name
