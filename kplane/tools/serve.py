"""``kplane serve CONFIG [--override key=value ...]``: run one broker in the foreground."""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType
from typing import Any

import structlog

from kplane.broker.config.errors import ConfigException
from kplane.broker.config.kafka_config import KafkaConfig
from kplane.broker.logging_setup import configure_logging
from kplane.broker.metadata.store import StoreError
from kplane.broker.server.kafka_server import KafkaServer

log = structlog.get_logger(__name__)


class StartupInterrupted(BaseException):
    """SIGTERM or SIGINT arrived while start-up was blocked in a wait (a BaseException, so
    no ``except Exception`` on the way swallows it)."""


def _blocked_in_wait(frame: FrameType | None) -> bool:
    """Whether the main thread was waiting (a lock, an event, a future) when the signal came:
    the only places where raising cannot leave half-built state behind."""
    return frame is not None and frame.f_code is threading.Condition.wait.__code__


def add_parser(sub: Any) -> None:
    """Register the ``serve`` subcommand."""
    parser = sub.add_parser("serve", help="start a broker (like kafka-server-start)")
    parser.add_argument("config", help="server.properties file")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a property of the file (repeatable)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Start the broker, wait for SIGTERM or SIGINT, stop it; 0 on a clean stop, 1 when the
    broker halted on a fault (as Kafka exits 1)."""
    configure_logging()
    try:
        config = KafkaConfig.load(args.config, args.override)
    except ConfigException as exc:
        log.error("invalid configuration", error=str(exc))
        return 1
    except OSError as exc:
        log.error("cannot read configuration", path=args.config, error=str(exc))
        return 1
    server = KafkaServer(config)
    stop = threading.Event()
    starting = True

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal starting
        log.info("shutting down", signal=signal.Signals(signum).name)
        stop.set()
        # a start-up that waits (for ZooKeeper, say) is cut short, and what it started is
        # stopped; one that is busy runs to its end, and ``stop`` shuts the broker down then
        if starting and _blocked_in_wait(frame):
            starting = False
            raise StartupInterrupted

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.startup()
        starting = False
    except StartupInterrupted:
        server.shutdown()  # a no-op unless the signal came just after start-up returned
        return 0
    except ConfigException as exc:
        log.error("invalid configuration", error=str(exc))
        return 1
    except OSError as exc:
        log.error("cannot bind listener", error=str(exc))
        return 1
    except RuntimeError as exc:
        log.error("cannot start", error=str(exc))
        return 1
    except StoreError as exc:
        log.error("metadata store unavailable", error=str(exc))
        return 1
    server.settle_heap(stop.is_set)
    while not stop.wait(0.5):
        if server.await_shutdown(0):  # the broker stopped itself (every log dir failed)
            return 1 if server.halted else 0
    server.shutdown()
    return 0
