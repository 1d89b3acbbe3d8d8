"""The test ZooKeeper (``kplane.tools.zookeeper``): a client that connects while it starts.

ZooKeeper 3.8 accepts connections while it loads its database; one it closed then was never
closed for real (ZOOKEEPER-5051), and its client waited until its session expired. The
harness's connection factory loads the database first: every connection made during a
restart is answered or closed.
"""

from __future__ import annotations

import socket
import struct
import threading

from kplane.tools.zookeeper import ZooKeeperServer

# An answer, or the connection's end, comes in milliseconds once the port accepts; a
# connection left open past this waits for nothing.
ANSWER_WAIT = 20.0


def _connect_request(session_timeout_ms: int = 6000) -> bytes:
    """A ConnectRequest for a new session: protocol 0, no zxid, no session, zero password."""
    body = struct.pack(">iqiqi", 0, 0, session_timeout_ms, 0, 16) + bytes(16) + b"\x00"
    return struct.pack(">i", len(body)) + body


def _first_reply(port: int) -> bytes | None:
    """What a ConnectRequest gets: the answer's first bytes, ``b""`` if closed, None if refused."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WAIT)
    except ConnectionRefusedError:
        return None
    with sock:
        try:
            sock.sendall(_connect_request())
            return sock.recv(4)
        except (ConnectionResetError, BrokenPipeError):
            return b""


def test_connections_during_a_restart_are_answered_or_closed(
    zookeeper_server: ZooKeeperServer,
) -> None:
    restarted = threading.Event()

    def restart() -> None:
        zookeeper_server.restart()
        restarted.set()

    zookeeper_server.stop()
    replies: list[bytes] = []
    starter = threading.Thread(target=restart)
    starter.start()
    try:
        # connect as fast as the port allows, from before it is bound until the server serves
        while not (restarted.is_set() and replies and replies[-1]):
            reply = _first_reply(zookeeper_server.port)
            if reply is not None:
                replies.append(reply)
    except TimeoutError:
        raise AssertionError(
            f"a connection made while ZooKeeper started was neither answered nor closed "
            f"within {ANSWER_WAIT} s, after {len(replies)} that were"
        ) from None
    finally:
        starter.join()
    assert replies[-1], "the restarted server never answered"
