"""EndPoint and SecurityProtocol: the listener vocabulary of KIP-2 and KIP-103."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class SecurityProtocol(enum.Enum):
    """The four security protocols a listener can speak."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One listener: a name, the address it binds or advertises, and its protocol.

    ``host`` is ``""`` when the listener binds every interface (``NAME://:9092`` or
    ``0.0.0.0``).
    """

    listener_name: str
    host: str
    port: int
    security_protocol: SecurityProtocol

    @property
    def connection_string(self) -> str:
        """``NAME://host:port`` as Kafka writes it in a broker registration."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"
