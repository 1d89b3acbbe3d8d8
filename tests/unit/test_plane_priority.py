"""ControlPlanePriority: data-plane threads pause while a control-plane socket has unread
bytes or a control request is in flight, and never longer than the bound (real sockets)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import pytest

from kplane.broker.network.plane_priority import ControlPlanePriority


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def data_thread(priority: ControlPlanePriority) -> threading.Event:
    """A data-plane thread reaching a safe point; the event is set once it goes on."""
    went_on = threading.Event()

    def run() -> None:
        priority.yield_to_control()
        went_on.set()

    threading.Thread(target=run, daemon=True).start()
    return went_on


def test_a_data_thread_waits_until_the_control_processor_reads(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    control, peer = pair
    priority = ControlPlanePriority(max_pause_s=60, poll_interval_ns=0)
    priority.watch(control.fileno())
    assert not priority.control_waiting()
    data_thread(priority).wait(10)  # nothing to yield to: goes on

    peer.sendall(b"request")
    assert priority.control_waiting()
    went_on = data_thread(priority)
    assert not went_on.wait(0.3)  # paused: the control socket has unread bytes
    assert control.recv(100) == b"request"
    assert went_on.wait(10)
    assert not priority.control_waiting()
    priority.close()


def test_a_data_thread_waits_while_a_control_request_is_in_flight() -> None:
    priority = ControlPlanePriority(max_pause_s=60)
    priority.begin()
    priority.begin()
    went_on = data_thread(priority)
    priority.end()
    assert not went_on.wait(0.3)  # one of two still in flight
    priority.end()
    assert went_on.wait(10)
    priority.close()


def test_a_pause_is_bounded(pair: tuple[socket.socket, socket.socket]) -> None:
    control, peer = pair
    priority = ControlPlanePriority(max_pause_s=0.05)
    priority.watch(control.fileno())
    peer.sendall(b"never read")
    priority.begin()  # and never ended
    assert data_thread(priority).wait(10)
    priority.close()


def test_unwatch_releases_the_duplicate(pair: tuple[socket.socket, socket.socket]) -> None:
    control, peer = pair
    priority = ControlPlanePriority(poll_interval_ns=0)
    before = open_fds()
    priority.watch(control.fileno())
    assert open_fds() == before + 1
    priority.unwatch(control.fileno())
    assert open_fds() == before
    peer.sendall(b"x")
    assert not priority.control_waiting()  # no longer watched
    priority.unwatch(control.fileno())  # twice is harmless
    priority.close()


def test_close_releases_everything_still_watched(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    control, _peer = pair
    before = open_fds()
    priority = ControlPlanePriority()
    priority.watch(control.fileno())
    priority.close()
    assert open_fds() == before


def test_the_sockets_are_polled_at_most_every_interval(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    control, peer = pair
    priority = ControlPlanePriority(poll_interval_ns=3600 * 10**9)
    priority.watch(control.fileno())
    assert not priority.control_waiting()  # polled: nothing unread
    peer.sendall(b"request")
    assert not priority.control_waiting()  # not polled again within the interval
    priority.begin()
    assert priority.control_waiting()  # an in-flight request needs no poll
    priority.end()
    priority.close()


def test_a_connection_that_stopped_reading_does_not_count(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    control, peer = pair
    priority = ControlPlanePriority(poll_interval_ns=0)
    priority.watch(control.fileno())
    priority.pause_watch(control.fileno(), True)  # a pipelined request held back
    peer.sendall(b"next request")
    assert not priority.control_waiting()
    priority.pause_watch(control.fileno(), False)
    assert priority.control_waiting()
    priority.close()
