"""Errors of the engine backend, each a one-line message (see `evertune.errors`)."""

from __future__ import annotations

from collections.abc import Sequence

from evertune.errors import FailedPrecondition, InvalidArgument, Unavailable


class InvalidEngineConfig(InvalidArgument):
    """An engine config is malformed (a value out of range, an unknown kind, a missing model)."""


class KnobRefused(InvalidArgument):
    """A knob (or a combination) cannot run on the target hardware; nothing was started.

    `reasons` holds one line per refused knob; the message joins them.
    """

    def __init__(self, reasons: Sequence[str], *, hardware: str) -> None:
        self.reasons: list[str] = list(reasons)
        self.hardware = hardware
        super().__init__(f"engine config refused on {hardware}: " + "; ".join(self.reasons))


class EngineStartFailed(Unavailable):
    """An engine process exited or did not become ready in time.

    The message says why in one line; `log_tail` holds the last lines of the engine's log (the CLI
    prints them under the message) and `log_file` says where the whole log is.
    """

    def __init__(self, message: str, *, log_tail: Sequence[str] = (), log_file: str = "") -> None:
        self.log_tail: list[str] = list(log_tail)
        self.log_file = log_file
        super().__init__(message)


class EngineNotRunning(FailedPrecondition):
    """An operation needs a started engine (`start()` was not called, or it was stopped)."""


class MetricsUnavailable(Unavailable):
    """The engine's /metrics endpoint could not be read or parsed."""
