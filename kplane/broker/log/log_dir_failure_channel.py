"""LogDirFailureChannel: the log dirs that failed, as Kafka's (KIP-112, "Handle disk failure
for JBOD").

An I/O error on any file of a log dir (a segment's append, roll, flush or index, a
checkpoint, a producer-state snapshot) takes the whole dir offline. The first error is one
error line, and the dir is queued once for the LogDirFailureHandler thread, which stops
serving the dir's replicas (``ReplicaManager.handle_log_dir_failure``). The errors after it
on that dir (threads that were writing at the same moment, background tasks) are logged
once per interval with a count. The caller gets a KafkaStorageError: the partition answers
``KAFKA_STORAGE_ERROR`` (56).
"""

from __future__ import annotations

import errno
import queue
import threading
from collections.abc import Callable

import structlog

from kplane.broker.utils.interval_log import IntervalWarning
from kplane.protocol.errors import ErrorCode, KafkaError

log = structlog.get_logger(__name__)

POLL_INTERVAL_S = 1.0
"""How often the handler thread, when no dir failed, logs the repeated errors counted."""


class KafkaStorageError(KafkaError):
    """Kafka's KafkaStorageException: the partition's log dir is offline."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.kafka_storage_error, message)


def describe(error: OSError) -> str:
    """``ENOSPC: No space left on device`` (the errno's name and its text)."""
    name = errno.errorcode.get(error.errno or 0)
    text = error.strerror or str(error)
    return f"{name}: {text}" if name else text


class LogDirFailureChannel:
    """The offline log dirs (by path), each queued once for the handler. Thread-safe."""

    def __init__(self) -> None:
        self._offline: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._repeated = IntervalWarning("I/O error in an offline log dir")

    def is_offline(self, log_dir: str) -> bool:
        """Whether ``log_dir`` failed (nothing more is read or written there)."""
        return log_dir in self._offline

    def maybe_add_offline_log_dir(self, log_dir: str, action: str, error: OSError) -> None:
        """``action`` (what failed, e.g. ``append orders-0``) failed with ``error`` in
        ``log_dir``: the dir goes offline, logged and queued the first time."""
        with self._lock:
            first = log_dir not in self._offline
            if first:
                self._offline = self._offline | {log_dir}
        if not first:
            self._repeated.record(log_dir=log_dir, action=action, error=describe(error))
            return
        log.error(
            "log dir failed: its replicas go offline",
            log_dir=log_dir,
            action=action,
            error=describe(error),
        )
        self._queue.put(log_dir)

    def take_next_offline_log_dir(self, timeout_s: float) -> str | None:
        """The next dir that failed, waiting up to ``timeout_s``; None when none did."""
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def flush(self) -> None:
        """Log the repeated errors counted, once their interval has passed."""
        self._repeated.flush()


class LogDirFailureHandler:
    """Kafka's LogDirFailureHandler: one thread that gives each failed log dir, in turn,
    to ``handle``."""

    def __init__(self, channel: LogDirFailureChannel, handle: Callable[[str], None]) -> None:
        self._channel = channel
        self._handle = handle
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="LogDirFailureHandler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            log_dir = self._channel.take_next_offline_log_dir(POLL_INTERVAL_S)
            if log_dir is None:
                self._channel.flush()
                continue
            try:
                self._handle(log_dir)
            except Exception as exc:  # the thread outlives one dir's handling
                log.warning("log dir failure not handled", log_dir=log_dir, reason=str(exc))

    def shutdown(self) -> None:
        """Stop the thread (a dir being handled is finished first)."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
