"""Kafka error codes (kio's ErrorCode) and the exceptions that carry them."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ("ErrorCode", "KafkaError")


class KafkaError(Exception):
    """An error answered to a client with ``code`` and an optional message."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
