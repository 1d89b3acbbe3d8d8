"""Process tuning, in one place: what ``kplane serve`` and the test fixtures' brokers share
(the thread switch interval, set by every KafkaServer at start-up) and what only a
long-running ``kplane serve`` adds once started (the schema warm-up and ``gc.freeze``)."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable, Mapping

import structlog

from kplane.broker.config.kafka_config import KafkaConfig
from kplane.protocol import api

log = structlog.get_logger(__name__)


def set_switch_interval(config: KafkaConfig) -> None:
    """``kplane.gil.switch.interval.us``: CPython's thread switch interval (process-wide)."""
    sys.setswitchinterval(config.get_int("kplane.gil.switch.interval.us") / 1_000_000)


def settle_heap(served: Mapping[int, range], stop: Callable[[], bool]) -> None:
    """Load every served schema now, then move what start-up allocated out of the garbage
    collector's generations: full collections then walk only what requests allocate
    (measured: a full collection over kio's loaded schemas takes about 50 ms otherwise,
    which showed as 40 ms produce-latency spikes). A signal (``stop``) cuts it short.
    Test fixtures leave it out: frozen objects are never collected, and a test process
    starts hundreds of brokers."""
    started = time.monotonic()
    try:
        api.warm(dict(served), stop)
    except OSError as exc:  # no descriptor to read a module with (EMFILE): load them later
        log.warning("schema warm-up stopped; schemas load at first use", reason=str(exc))
        return
    if stop():
        return
    gc.collect()
    gc.freeze()
    log.info("schemas loaded, start-up heap frozen", seconds=round(time.monotonic() - started, 2))
