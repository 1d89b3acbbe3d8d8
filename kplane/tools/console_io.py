"""What the console producer and consumer share: ``--property`` and ``--*-property`` pairs,
a properties file of client settings, and stopping quietly on SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Sequence

from kplane.tools.admin_session import UsageError, read_properties


def pairs(items: Sequence[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` items of a repeatable option; UsageError naming a malformed one."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{option} takes KEY=VALUE, not {item!r}")
        out[key.strip()] = value
    return out


def client_settings(
    config_file: str | None, properties: Sequence[str], option: str
) -> dict[str, str]:
    """A producer's or consumer's settings: its config file, then its ``--*-property`` pairs."""
    settings = read_properties(config_file) if config_file else {}
    settings.update(pairs(properties, option))
    return settings


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM, which then no longer interrupt anything."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


def stdin_lines() -> asyncio.Queue[bytes]:
    """Lines of stdin as they come, ``b""`` at its end, read by a daemon thread (a blocked
    read never holds up the exit)."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes] = asyncio.Queue()

    def read() -> None:
        for line in iter(sys.stdin.buffer.readline, b""):
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, b"")

    threading.Thread(target=read, name="stdin", daemon=True).start()
    return lines

