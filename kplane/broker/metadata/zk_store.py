"""ZooKeeper implementation of the MetadataStore, with kazoo.

Watches keep the embedded store's contract: persistent, called with the path on every
change after registration (not for the state at registration), also for a node that does
not exist yet. ZooKeeper's watches are one-shot, so each is re-armed after it fires and after
every reconnect, comparing a fingerprint of the node (zxids, versions) so that changes missed
while disconnected are still reported once and nothing is reported twice. Several changes
close together may be reported as one. Watchers run in kazoo's threads.

A session that expired takes this broker's ephemeral nodes with it; kazoo opens a new one,
and the callbacks of ``add_session_listener`` run then so the broker can register again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import structlog
from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent, ZnodeStat

from kplane.broker.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    MetadataStore,
    MultiOpError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetDataOp,
    Stat,
    StoreError,
    StoreOp,
    Watcher,
)

log = structlog.get_logger(__name__)

SessionListener = Callable[[], None]
Fingerprint = tuple[int, int] | None


class ZooKeeperUnavailableError(StoreError):
    """ZooKeeper could not be reached, or the connection or session ended mid-request."""


_MAPPED: tuple[tuple[type[Exception], type[StoreError]], ...] = (
    (kz.NoNodeError, NoNodeError),
    (kz.NodeExistsError, NodeExistsError),
    (kz.NotEmptyError, NotEmptyError),
    (kz.BadVersionError, BadVersionError),
    (kz.ConnectionLoss, ZooKeeperUnavailableError),
    (kz.SessionExpiredError, ZooKeeperUnavailableError),  # and ConnectionClosedError
    (kz.OperationTimeoutError, ZooKeeperUnavailableError),
    (KazooTimeoutError, ZooKeeperUnavailableError),
    (kz.KazooException, StoreError),
)
_TRANSIENT = (kz.KazooException, KazooTimeoutError)
_NOT_FAILED = (kz.RolledBackError, kz.RuntimeInconsistency)
"""What a failed multi answers for its ops before and after the one that failed."""


def _store_error(exc: Exception, path: str) -> StoreError | None:
    """kazoo's error as the store's (None for another exception)."""
    for kazoo_error, store_error in _MAPPED:
        if isinstance(exc, kazoo_error):
            return store_error(path)
    return None


@contextmanager
def _mapped(path: str) -> Iterator[None]:
    """Raise kazoo's errors as the store's."""
    try:
        yield
    except _TRANSIENT as exc:
        error = _store_error(exc, path)
        if error is None:
            raise
        raise error from exc


def _stat(zstat: ZnodeStat) -> Stat:
    return Stat(
        version=zstat.version,
        ephemeral=zstat.ephemeralOwner != 0,
        ctime_ms=zstat.ctime,
        mtime_ms=zstat.mtime,
        cversion=zstat.cversion,
    )


def _op_result(result: object) -> str | Stat | None:
    """A multi's answer for one op: the path created, the new stat, None (check, delete)."""
    if isinstance(result, ZnodeStat):
        return _stat(result)
    return result if isinstance(result, str) else None


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/kplane"`` -> ``("h1:2181,h2:2181", "/kplane")``; no chroot -> ``""``."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


class ZooKeeperMetadataStore(MetadataStore):
    """The store in a ZooKeeper ensemble (``zookeeper.connect``, chroot included)."""

    def __init__(
        self, connect: str, session_timeout_ms: int = 18000, connection_timeout_ms: int = 18000
    ) -> None:
        hosts, chroot = split_connect(connect)
        timeout = session_timeout_ms / 1000
        start_timeout = connection_timeout_ms / 1000
        if chroot:
            _ensure_chroot(hosts, chroot, timeout, start_timeout)
        self._client = KazooClient(hosts=hosts + chroot, timeout=timeout)
        _start(self._client, start_timeout, connect)
        self._lock = threading.Lock()
        self._watches: list[_Watch] = []
        self._session_listeners: list[SessionListener] = []
        self._session_lost = False
        self._closed = False
        self._connect = connect
        self._client.add_listener(self._on_state)

    @property
    def client(self) -> KazooClient:
        """The kazoo client (for tools and tests)."""
        return self._client

    # MetadataStore -------------------------------------------------------------------
    def create(
        self,
        path: str,
        data: bytes = b"",
        ephemeral: bool = False,
        makepath: bool = False,
        sequential: bool = False,
    ) -> str:
        with _mapped(path):
            created: str = self._client.create(
                path, data, ephemeral=ephemeral, sequence=sequential, makepath=makepath
            )
        return created

    def get(self, path: str) -> tuple[bytes, Stat]:
        with _mapped(path):
            data, zstat = self._client.get(path)
        return data or b"", _stat(zstat)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        with _mapped(path):
            return _stat(self._client.set(path, data, version=version))

    def delete(self, path: str, recursive: bool = False) -> None:
        with _mapped(path):
            # kazoo's recursive delete ignores a missing node; the store reports it
            if recursive and self._client.exists(path) is None:
                raise NoNodeError(path)
            self._client.delete(path, recursive=recursive)

    def exists(self, path: str) -> Stat | None:
        with _mapped(path):
            zstat = self._client.exists(path)
        return None if zstat is None else _stat(zstat)

    def get_children(self, path: str) -> list[str]:
        with _mapped(path):
            return sorted(self._client.get_children(path))

    def multi(self, ops: Sequence[StoreOp]) -> list[str | Stat | None]:
        transaction = self._client.transaction()
        for op in ops:
            if isinstance(op, CheckOp):
                transaction.check(op.path, op.version)
            elif isinstance(op, CreateOp):
                transaction.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetDataOp):
                transaction.set_data(op.path, op.data, op.version)
            else:
                transaction.delete(op.path, op.version)
        with _mapped(ops[0].path if ops else "/"):
            results = transaction.commit()
        for index, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, _NOT_FAILED):
                error = _store_error(result, ops[index].path) or StoreError(ops[index].path)
                raise MultiOpError(index, error) from result
        return [_op_result(r) for r in results]

    def watch_children(self, path: str, watcher: Watcher) -> None:
        self._add_watch(_Watch(self._client, path, watcher, children=True))

    def watch_data(self, path: str, watcher: Watcher) -> None:
        self._add_watch(_Watch(self._client, path, watcher, children=False))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._watches.clear()
        self._client.stop()
        self._client.close()

    # sessions ------------------------------------------------------------------------
    def add_session_listener(self, callback: SessionListener) -> None:
        """Call ``callback()`` (in a kazoo thread) each time a new session replaces one that
        expired: this client's ephemeral nodes are gone and must be created again."""
        with self._lock:
            self._session_listeners.append(callback)

    def _add_watch(self, watch: _Watch) -> None:
        with _mapped(watch.path):
            watch.arm()
        with self._lock:
            self._watches.append(watch)

    def _on_state(self, state: str) -> None:
        """kazoo's connection listener: runs in its connection thread, must not block."""
        if self._closed:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("zookeeper session lost", connect=self._connect)
        elif state == KazooState.SUSPENDED:
            log.warning("zookeeper connection suspended", connect=self._connect)
        elif state == KazooState.CONNECTED:
            new_session, self._session_lost = self._session_lost, False
            log.info("zookeeper connected", connect=self._connect, new_session=new_session)
            self._client.handler.spawn(self._after_connect, new_session)

    def _after_connect(self, new_session: bool) -> None:
        # kazoo drops every watch on a disconnect: arm them again, reporting missed changes
        with self._lock:
            watches = list(self._watches)
        for watch in watches:
            watch.refresh()
        if not new_session:
            return
        with self._lock:
            listeners = list(self._session_listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:
                log.exception("zookeeper session listener failed", listener=repr(listener))


class _Watch:
    """A persistent watch made of ZooKeeper's one-shot ones."""

    def __init__(self, client: KazooClient, path: str, watcher: Watcher, children: bool) -> None:
        self.path = path
        self._client = client
        self._watcher = watcher
        self._children = children
        self._lock = threading.Lock()
        self._last: Fingerprint = None

    def arm(self) -> None:
        """Set the ZooKeeper watch and remember the state it starts from."""
        with self._lock:
            self._last = self._read()

    def _read(self) -> Fingerprint:
        """Set the watch; the node's (czxid, cversion) or (czxid, mzxid), None if missing."""
        while True:
            if self._children:
                try:
                    _, zstat = self._client.get_children(
                        self.path, watch=self._on_event, include_data=True
                    )
                    return zstat.czxid, zstat.cversion
                except kz.NoNodeError:
                    pass
            zstat = self._client.exists(self.path, watch=self._on_event)
            if zstat is None:
                return None
            if not self._children:
                return zstat.czxid, zstat.mzxid
            # created in between: watch its children instead

    def _changed(self, old: Fingerprint, new: Fingerprint) -> bool:
        if not self._children:
            return old != new
        if new is None:  # deleted: a change of its parent's children, not of its own
            return False
        if old is None:  # created: a change only if children came along
            return new[1] > 0
        return old != new

    def _on_event(self, event: WatchedEvent) -> None:
        # a NONE event is a disconnect: the store re-arms everything once connected again
        if event.type != EventType.NONE:
            self.refresh()

    def refresh(self) -> None:
        """Re-arm and call the watcher if the node changed since the last look."""
        with self._lock:
            try:
                current = self._read()
            except _TRANSIENT as exc:
                log.debug("zookeeper watch not re-armed yet", path=self.path, error=repr(exc))
                return
            fire = self._changed(self._last, current)
            self._last = current
        if fire:
            try:
                self._watcher(self.path)
            except StoreError as exc:  # ZooKeeper went away (a session closing at shutdown)
                log.warning("zookeeper watcher failed", path=self.path, reason=repr(exc))
            except Exception:
                log.exception("zookeeper watcher failed", path=self.path)


def _start(client: KazooClient, timeout: float, connect: str) -> None:
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError as exc:
        client.close()
        raise ZooKeeperUnavailableError(f"no ZooKeeper at {connect} within {timeout}s") from exc


def _ensure_chroot(hosts: str, chroot: str, timeout: float, start_timeout: float) -> None:
    """Create the chroot path (kazoo expects it to exist before a chrooted client starts)."""
    client = KazooClient(hosts=hosts, timeout=timeout)
    _start(client, start_timeout, hosts)
    try:
        with _mapped(chroot):
            client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
