"""Delegation tokens in the metadata store, at Kafka's ZooKeeper paths.

``/delegation_token/tokens/<token id>`` holds a token (``TokenInformation.to_json``); each
change adds ``/delegation_token/token_changes/token_change_<sequence>`` holding the token id,
which every broker follows (``ChangeNotificationListener``) to update its cache.
Notifications older than Kafka's 15 minutes are dropped when a new one is written.
"""

from __future__ import annotations

import contextlib

from kplane.broker.metadata.config_changes import ChangeNotificationListener, purge_notifications
from kplane.broker.metadata.store import MetadataStore, NodeExistsError, NoNodeError
from kplane.broker.security.delegation_token import TokenInformation

ROOT = "/delegation_token"
TOKENS = f"{ROOT}/tokens"
TOKEN_CHANGES = f"{ROOT}/token_changes"
TOKEN_CHANGE_PREFIX = f"{TOKEN_CHANGES}/token_change_"


class DelegationTokenStore:
    """Reads and writes tokens; every write announces the token id."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def create_paths(self) -> None:
        for path in (TOKENS, TOKEN_CHANGES):
            with contextlib.suppress(NodeExistsError):
                self.store.create(path, makepath=True)

    def token_ids(self) -> list[str]:
        try:
            return self.store.get_children(TOKENS)
        except NoNodeError:
            return []

    def get(self, token_id: str) -> TokenInformation | None:
        """The stored token; None when missing. ValueError/KeyError/TypeError when its node
        does not hold a token."""
        try:
            data = self.store.get(f"{TOKENS}/{token_id}")[0]
        except NoNodeError:
            return None
        return TokenInformation.from_json(data)

    def put(self, token: TokenInformation) -> None:
        with self.store.batch():
            self.store.set_or_create(f"{TOKENS}/{token.token_id}", token.to_json())
            self._announce(token.token_id)

    def delete(self, token_id: str) -> None:
        with self.store.batch():
            with contextlib.suppress(NoNodeError):
                self.store.delete(f"{TOKENS}/{token_id}")
            self._announce(token_id)

    def change_listener(self) -> ChangeNotificationListener:
        """A listener calling its subscribers with the id of each changed token."""
        return ChangeNotificationListener(self.store, TOKEN_CHANGES, bytes.decode)

    def _announce(self, token_id: str) -> None:
        self.store.create(TOKEN_CHANGE_PREFIX, token_id.encode(), sequential=True, makepath=True)
        purge_notifications(self.store, TOKEN_CHANGES)
