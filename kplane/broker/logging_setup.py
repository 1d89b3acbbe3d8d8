"""structlog set-up: readable console lines on a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure_logging(
    level: str | None = None, json_output: bool | None = None, cache_loggers: bool = True
) -> None:
    """Configure structlog and stdlib logging once for the process.

    ``KPLANE_LOG_LEVEL`` sets the level (default INFO); ``KPLANE_LOG_FORMAT`` forces
    ``json`` or ``console``. Tests pass ``cache_loggers=False`` so structlog's
    ``capture_logs`` sees every logger, whichever test configured logging first.
    """
    level_name = (level or os.environ.get("KPLANE_LOG_LEVEL", "INFO")).upper()
    numeric = getattr(logging, level_name, logging.INFO)
    if json_output is None:
        fmt = os.environ.get("KPLANE_LOG_FORMAT")
        json_output = fmt == "json" if fmt else not sys.stderr.isatty()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json_output
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=cache_loggers,
    )
    logging.basicConfig(
        level=numeric, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )


def exception_reason(exc: BaseException) -> str:
    """One line naming an exception and where it was raised: bad input is logged so,
    never with a traceback (the traceback goes to debug)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" at {tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"
