"""Logging in Spark's Python workers, where kplane's client runs for the data source."""

from __future__ import annotations

import logging

import structlog


def quiet_client_logs() -> None:
    """Keep warnings and errors (data loss, ignored options) of kplane's client: nothing
    configures structlog in a Spark worker, and its default prints every level, debug
    included, to the worker's output."""
    if not structlog.is_configured():
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
