"""SASL authentication of a client connection: SaslHandshake v1, then SaslAuthenticate.

PLAIN sends one token; SCRAM-SHA-256/512 (RFC 5802, the client side is `scramp`'s) take two
round trips and check the broker's signature at the end; with a delegation token the
client-first message carries Kafka's ``tokenauth=true`` extension. A refusal raises
SaslAuthenticationError with the broker's error code and message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kplane.common.network.security import AuthenticationError
from kplane.protocol import api
from kplane.protocol.api_keys import ApiKey
from kplane.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kplane.common.network.connection import BrokerConnection

PLAIN = "PLAIN"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
TOKEN_AUTH_EXTENSION = ",tokenauth=true"


@dataclass(frozen=True)
class SaslCredentials:
    """What a connection authenticates with."""

    mechanism: str
    username: str
    password: str = field(repr=False)
    token_auth: bool = False
    """SCRAM with a delegation token (the ``tokenauth=true`` extension, KIP-48): the user
    is the token id, the password its HMAC in base64."""


class SaslAuthenticationError(AuthenticationError, KafkaError):
    """The broker refused the SASL handshake or the credentials (``code`` says which)."""


async def authenticate(conn: BrokerConnection, credentials: SaslCredentials) -> None:
    """Run the whole exchange on ``conn``, right after ApiVersions."""
    mechanism = credentials.mechanism
    if (
        1 not in conn.versions.get(ApiKey.SASL_HANDSHAKE, ())
        or ApiKey.SASL_AUTHENTICATE not in conn.versions
    ):
        raise SaslAuthenticationError(
            ErrorCode.unsupported_version,
            f"{conn.address} does not serve SaslHandshake v1 and SaslAuthenticate",
        )
    response = await conn.request(
        ApiKey.SASL_HANDSHAKE,
        lambda v: api.make(api.request_class(ApiKey.SASL_HANDSHAKE, v), mechanism=mechanism),
    )
    if response.error_code != ErrorCode.none:
        enabled = ", ".join(response.mechanisms) or "no SASL mechanism (not a SASL listener?)"
        raise SaslAuthenticationError(
            response.error_code,
            f"SASL handshake for {mechanism} refused by {conn.address}: "
            f"{response.error_code.name.upper()}; the listener enables {enabled}",
        )

    async def exchange(token: bytes) -> bytes:
        response = await conn.request(
            ApiKey.SASL_AUTHENTICATE,
            lambda v: api.make(api.request_class(ApiKey.SASL_AUTHENTICATE, v), auth_bytes=token),
        )
        if response.error_code != ErrorCode.none:
            raise SaslAuthenticationError(
                response.error_code,
                f"{mechanism} authentication of {credentials.username!r} on {conn.address} "
                f"failed: {response.error_code.name.upper()}: "
                f"{response.error_message or 'no message'}",
            )
        return bytes(response.auth_bytes)

    if mechanism == PLAIN:
        await exchange(f"\0{credentials.username}\0{credentials.password}".encode())
        return
    import scramp  # only SCRAM needs it; imported here to keep start-up short

    client = scramp.ScramClient([mechanism], credentials.username, credentials.password)
    try:
        first = client.get_client_first()
        if credentials.token_auth:  # an extension ends the bare message the proof signs
            first += TOKEN_AUTH_EXTENSION
            client.client_first_bare += TOKEN_AUTH_EXTENSION
        client.set_server_first((await exchange(first.encode())).decode())
        client.set_server_final((await exchange(client.get_client_final().encode())).decode())
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        raise SaslAuthenticationError(
            ErrorCode.sasl_authentication_failed,
            f"{mechanism} exchange with {conn.address} failed: {exc}",
        ) from exc
