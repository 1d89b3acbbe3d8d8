"""DelegationTokenManager: create, renew, expire and describe tokens; the cache SCRAM reads.

Kafka's ZooKeeper-mode manager (``DelegationTokenManagerZk``): tokens are enabled by
``delegation.token.secret.key`` (or its alias ``delegation.token.master.key``); every
change is written to the store and announced, and every broker's manager keeps a cache of
all tokens, reloaded one token at a time from the announcements. Each cached token carries
a SCRAM credential per mechanism derived from its HMAC (as base64, 4096 iterations, a
fresh salt), which is what a ``tokenauth=true`` SCRAM login is checked against.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from kplane.broker.config.definitions import Password
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.metadata.config_changes import ChangeNotificationListener
from kplane.broker.security.delegation_token import (
    TokenInformation,
    create_hmac,
    hmac_text,
    new_token_id,
    split_principal,
)
from kplane.broker.security.delegation_token_store import DelegationTokenStore
from kplane.broker.security.scram import MIN_ITERATIONS, ScramCredential, ScramMechanismType
from kplane.protocol.errors import ErrorCode

log = structlog.get_logger(__name__)

ERROR_TIMESTAMP = -1
"""The timestamps of a refused request (Kafka's DelegationTokenManager.ErrorTimestamp)."""


def secret_key(config: KafkaConfig) -> str | None:
    """``delegation.token.secret.key``, else its alias; None when unset or empty (tokens
    disabled, as Kafka's ``tokenAuthEnabled``)."""
    for name in ("delegation.token.secret.key", "delegation.token.master.key"):
        value = config.get(name)
        text = value.value if isinstance(value, Password) else value
        if text:
            return str(text)
    return None


@dataclass(frozen=True)
class DelegationToken:
    """A token's information and its HMAC (the password a client logs in with)."""

    info: TokenInformation
    hmac: bytes


@dataclass(frozen=True)
class _Cached:
    token: DelegationToken
    credentials: dict[ScramMechanismType, ScramCredential]


class DelegationTokenManager:
    """Every token this broker knows, and the operations of the four token APIs."""

    def __init__(
        self,
        store: DelegationTokenStore,
        secret: str | None,
        max_lifetime_ms: int,
        default_renew_ms: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.secret = secret
        self.max_lifetime_ms = max_lifetime_ms
        self.default_renew_ms = default_renew_ms
        self._clock = clock
        self._lock = threading.RLock()  # store watchers may call back on the writing thread
        self._tokens: dict[str, _Cached] = {}
        self._by_hmac: dict[bytes, str] = {}
        self._listener: ChangeNotificationListener | None = None

    @classmethod
    def from_config(
        cls, config: KafkaConfig, store: DelegationTokenStore
    ) -> DelegationTokenManager:
        return cls(
            store,
            secret_key(config),
            config.get_int("delegation.token.max.lifetime.ms"),
            config.get_int("delegation.token.expiry.time.ms"),
        )

    @property
    def enabled(self) -> bool:
        return self.secret is not None

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    # start-up and the cache ------------------------------------------------------------
    def startup(self) -> None:
        """With tokens enabled: the store's paths, every stored token, then the changes."""
        if not self.enabled:
            return
        self.store.create_paths()
        listener = self.store.change_listener()
        listener.subscribe(self.on_token_change)
        with self._lock:
            listener.start()  # changes from here on; the load below covers the rest
            self._listener = listener
            ids = self.store.token_ids()
            for token_id in ids:
                self.on_token_change(token_id)
        log.info("delegation tokens loaded", count=len(self._tokens))

    def on_token_change(self, token_id: str) -> None:
        """A change notification: the stored token replaces the cached one, or it is gone."""
        try:
            info = self.store.get(token_id)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("delegation token not readable", token_id=token_id, reason=str(exc))
            info = None
        with self._lock:
            if info is None:
                self._remove_cached(token_id)
            else:
                self._cache(info)

    def _cache(self, info: TokenInformation) -> DelegationToken:
        assert self.secret is not None
        cached = self._tokens.get(info.token_id)
        token = DelegationToken(info, create_hmac(info.token_id, self.secret))
        if cached is not None:  # a renewal: keep the credentials (no new salts)
            self._tokens[info.token_id] = _Cached(token, cached.credentials)
            return token
        password = hmac_text(token.hmac)
        credentials: dict[ScramMechanismType, ScramCredential] = {
            mechanism: ScramCredential.from_password(
                mechanism, password, secrets.token_bytes(16), MIN_ITERATIONS
            )
            for mechanism in ScramMechanismType
            if mechanism is not ScramMechanismType.UNKNOWN
        }
        self._tokens[info.token_id] = _Cached(token, credentials)
        self._by_hmac[token.hmac] = info.token_id
        return token

    def _remove_cached(self, token_id: str) -> None:
        cached = self._tokens.pop(token_id, None)
        if cached is not None:
            self._by_hmac.pop(cached.token.hmac, None)

    def _update(self, info: TokenInformation) -> DelegationToken:
        """Store, cache and announce a token."""
        self.store.put(info)
        return self._cache(info)

    def _remove(self, token_id: str) -> None:
        self.store.delete(token_id)
        self._remove_cached(token_id)

    # the APIs --------------------------------------------------------------------------
    def create(
        self, owner: str, requester: str, renewers: Iterable[str], max_lifetime_ms: int
    ) -> DelegationToken:
        """A new token; ``max_lifetime_ms`` <= 0 takes ``delegation.token.max.lifetime.ms``,
        a larger one is capped by it. Only with tokens enabled."""
        with self._lock:
            now = self.now_ms()
            lifetime = (
                self.max_lifetime_ms
                if max_lifetime_ms <= 0
                else min(max_lifetime_ms, self.max_lifetime_ms)
            )
            max_timestamp = now + lifetime
            info = TokenInformation(
                token_id=new_token_id(),
                owner=owner,
                requester=requester,
                renewers=tuple(renewers),
                issue_timestamp=now,
                max_timestamp=max_timestamp,
                expiry_timestamp=min(max_timestamp, now + self.default_renew_ms),
            )
            token = self._update(info)
        log.info("delegation token created", token_id=info.token_id, owner=owner)
        return token

    def renew(
        self, principal: str, token_hmac: bytes, renew_period_ms: int
    ) -> tuple[ErrorCode, int]:
        """Move the expiry to now + the period (< 0: ``delegation.token.expiry.time.ms``),
        capped by the maximum; the owner or a renewer only."""
        with self._lock:
            error, info, now = self._renewable(principal, token_hmac)
            if info is None:
                return error, ERROR_TIMESTAMP
            if info.expired(now):
                return ErrorCode.delegation_token_expired, ERROR_TIMESTAMP
            period = self.default_renew_ms if renew_period_ms < 0 else renew_period_ms
            expiry = min(info.max_timestamp, now + period)
            self._update(info.with_expiry(expiry))
        log.info("delegation token renewed", token_id=info.token_id, owner=info.owner)
        return ErrorCode.none, expiry

    def expire(
        self, principal: str, token_hmac: bytes, expiry_period_ms: int
    ) -> tuple[ErrorCode, int]:
        """A period < 0 removes the token at once; else its expiry becomes now + the period
        (capped by the maximum); the owner or a renewer only."""
        with self._lock:
            error, info, now = self._renewable(principal, token_hmac)
            if info is None:
                return error, ERROR_TIMESTAMP
            if expiry_period_ms < 0:
                self._remove(info.token_id)
                expiry = now
            elif info.expired(now):
                return ErrorCode.delegation_token_expired, ERROR_TIMESTAMP
            else:
                expiry = min(info.max_timestamp, now + expiry_period_ms)
                self._update(info.with_expiry(expiry))
        log.info("delegation token expiry set", token_id=info.token_id, expiry_timestamp=expiry)
        return ErrorCode.none, expiry

    def _renewable(
        self, principal: str, token_hmac: bytes
    ) -> tuple[ErrorCode, TokenInformation | None, int]:
        """The token of ``token_hmac`` if tokens are on, it exists and ``principal`` owns or
        renews it (else the error and None), with the time now; under the lock."""
        now = self.now_ms()
        if not self.enabled:
            return ErrorCode.delegation_token_auth_disabled, None, now
        info = self._token_of(token_hmac)
        if info is None:
            return ErrorCode.delegation_token_not_found, None, now
        if not info.owner_or_renewer(principal):
            return ErrorCode.delegation_token_owner_mismatch, None, now
        return ErrorCode.none, info, now

    def tokens(self, eligible: Callable[[TokenInformation], bool]) -> list[DelegationToken]:
        """The cached tokens ``eligible`` accepts, oldest first."""
        with self._lock:
            cached = [c.token for c in self._tokens.values()]
        cached.sort(key=lambda t: (t.info.issue_timestamp, t.info.token_id))
        return [t for t in cached if eligible(t.info)]

    def expire_tokens(self) -> None:
        """Remove every token past its expiry or maximum (the periodic clean-up)."""
        with self._lock:
            now = self.now_ms()
            for cached in list(self._tokens.values()):
                info = cached.token.info
                if info.expired(now):
                    log.info("delegation token expired", token_id=info.token_id, owner=info.owner)
                    self._remove(info.token_id)

    def token_login(
        self, token_id: str, mechanism: ScramMechanismType
    ) -> tuple[str, ScramCredential] | None:
        """The owner's name and the SCRAM credential a ``tokenauth=true`` login with
        ``token_id`` is checked against; None for a token unknown here or expired."""
        with self._lock:
            cached = self._tokens.get(token_id)
        if cached is None or mechanism not in cached.credentials:
            return None
        info = cached.token.info
        if info.expired(self.now_ms()):
            return None
        return split_principal(info.owner)[1], cached.credentials[mechanism]

    def _token_of(self, token_hmac: bytes) -> TokenInformation | None:
        token_id = self._by_hmac.get(bytes(token_hmac))
        cached = self._tokens.get(token_id) if token_id is not None else None
        return cached.token.info if cached is not None else None
