"""structlog, configured once: JSON lines to stderr (journald) or a console renderer on a TTY.

Use the sync methods (`log.info`) everywhere; structlog's async ones run on asyncio's executor.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

import structlog

LogFormat = Literal["json", "console"]
LEVELS = ("debug", "info", "warning", "error", "critical")


def configure(fmt: LogFormat | None = None, level: str = "info", stream: TextIO | None = None) -> None:
    """Log to `stream` (default stderr), as JSON lines unless it is a terminal."""
    stream = sys.stderr if stream is None else stream
    if fmt is None:
        fmt = "console" if stream.isatty() else "json"
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=False) if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
