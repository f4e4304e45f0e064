"""A one-line progress bar on stderr while a replay runs: sent, done, errors, in flight, recent TTFT.

Wire it as `replay(..., on_sent=progress.sent, on_result=progress.done)` and call `close()` at the
end. Redraws at most `max_rate_hz` times a second (the callbacks run on the loop that measures, so
they stay cheap), and draws nothing when the stream is not a terminal unless told to.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import TextIO

from evertune.domain.percentiles import percentile
from evertune.domain.replay.results import RequestResult

BAR_WIDTH = 20  #: characters of the bar itself
RECENT = 200  #: TTFTs the "current p50" is taken over


class Progress:
    """Counts sent/done/errors and redraws one line, throttled."""

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        max_rate_hz: float = 4.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.interval_s = 1.0 / max_rate_hz
        self.clock = clock
        self.sent_count = 0
        self.done_count = 0
        self.errors = 0
        self.never_sent = 0
        self.recent_ttft_ms: deque[float] = deque(maxlen=RECENT)
        self._last_draw: float | None = None

    @property
    def in_flight(self) -> int:
        """Sent and not yet done (a request never sent is done without having been sent)."""
        return self.sent_count - (self.done_count - self.never_sent)

    def sent(self, request_id: str) -> None:
        """`on_sent` callback of `replay`."""
        self.sent_count += 1
        self._maybe_draw()

    def done(self, result: RequestResult) -> None:
        """`on_result` callback of `replay`."""
        self.done_count += 1
        if result.error_class == "client_lag":
            self.never_sent += 1
        if not result.ok:
            self.errors += 1
        elif result.ttft_ms is not None:
            self.recent_ttft_ms.append(result.ttft_ms)
        self._maybe_draw()

    def line(self) -> str:
        """The current line, without control characters."""
        share = self.done_count / self.total if self.total else 1.0
        filled = round(share * BAR_WIDTH)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        ttft = percentile(self.recent_ttft_ms, 50)
        ttft_text = f"{ttft:.1f} ms" if ttft == ttft else "-"
        return (
            f"[{bar}] {self.done_count}/{self.total} done  sent {self.sent_count}  "
            f"errors {self.errors}  in flight {self.in_flight}  TTFT p50 {ttft_text}"
        )

    def _maybe_draw(self) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if self._last_draw is not None and now - self._last_draw < self.interval_s:
            return
        self._last_draw = now
        self._draw()

    def _draw(self) -> None:
        self.stream.write("\r" + self.line() + "\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        """Draw the final state and end the line."""
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
