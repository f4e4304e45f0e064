"""structlog, configured once per process: JSON lines in services, a readable console in the CLI.

Ids (endpoint, deployment, request, service) are bound with context variables, so every log line
written inside a `bound_ids(...)` block carries them without passing a logger around.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import structlog

_configured = False


def configure_logging(fmt: Literal["auto", "json", "console"] = "auto", level: str = "info") -> None:
    """Configure structlog and the standard library's root logger. Later calls change nothing.

    `auto` renders for people when stderr is a terminal and JSON lines otherwise (services under a
    supervisor, CI, log shippers).
    """
    global _configured
    if _configured:
        return
    _configured = True
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
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
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")


@contextmanager
def bound_ids(**ids: str) -> Iterator[None]:
    """Bind ids (endpoint=, deployment=, request=, ...) to every log line in this block."""
    clean = {key: value for key, value in ids.items() if value}
    with structlog.contextvars.bound_contextvars(**clean):
        yield


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
