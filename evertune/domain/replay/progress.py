"""Progress of a replay while it runs: sent, done, errors, in flight, recent TTFT.

`ReplayCounts` counts (pure); `ReplayProgress` shows the counts as a rich progress bar on a console
(stderr), only when that console is a terminal. Wire it as
`replay(..., on_sent=progress.sent, on_result=progress.done)` inside `with ReplayProgress(...)`.
The callbacks run on the loop that measures, so they stay cheap: the status text is rebuilt at most
`max_rate_hz` times a second, and rich redraws on its own thread.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evertune.domain.percentiles import percentile
from evertune.domain.replay.results import RequestResult

RECENT = 200  #: TTFTs the "current p50" is taken over


class ReplayCounts:
    """Counts sent/done/errors and keeps the recent TTFTs."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.sent_count = 0
        self.done_count = 0
        self.errors = 0
        self.never_sent = 0
        self.recent_ttft_ms: deque[float] = deque(maxlen=RECENT)

    @property
    def in_flight(self) -> int:
        """Sent and not yet done (a request never sent is done without having been sent)."""
        return self.sent_count - (self.done_count - self.never_sent)

    def sent(self, request_id: str) -> None:
        """`on_sent` callback of `replay`."""
        self.sent_count += 1

    def done(self, result: RequestResult) -> None:
        """`on_result` callback of `replay`."""
        self.done_count += 1
        if result.error_class == "client_lag":
            self.never_sent += 1
        if not result.ok:
            self.errors += 1
        elif result.ttft_ms is not None:
            self.recent_ttft_ms.append(result.ttft_ms)

    def status(self) -> str:
        """What the bar shows beside `done/total`: sent, errors, in flight, p50 of the recent TTFTs."""
        ttft = percentile(self.recent_ttft_ms, 50)
        ttft_text = f"{ttft:.1f} ms" if ttft == ttft else "-"
        return (
            f"sent {self.sent_count}  errors {self.errors}  in flight {self.in_flight}  TTFT p50 {ttft_text}"
        )


class ReplayProgress:
    """`ReplayCounts` drawn as a progress bar on `console` while the replay runs (nothing when the
    console is not a terminal); a context manager."""

    def __init__(
        self,
        total: int,
        *,
        console: Console | None = None,
        max_rate_hz: float = 4.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counts = ReplayCounts(total)
        console = console or Console(stderr=True)
        self.bar = Progress(
            TextColumn("replay"),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
            redirect_stdout=False,  # stdout holds the answer alone
        )
        self.task = self.bar.add_task("replay", total=total, status=self.counts.status())
        self.interval_s = 1.0 / max_rate_hz
        self.clock = clock
        self._last: float | None = None

    def __enter__(self) -> ReplayProgress:
        self.bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._update()
        self.bar.stop()

    def sent(self, request_id: str) -> None:
        """`on_sent` callback of `replay`."""
        self.counts.sent(request_id)
        self._maybe_update()

    def done(self, result: RequestResult) -> None:
        """`on_result` callback of `replay`."""
        self.counts.done(result)
        self._maybe_update()

    def _maybe_update(self) -> None:
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            return
        self._last = now
        self._update()

    def _update(self) -> None:
        self.bar.update(self.task, completed=self.counts.done_count, status=self.counts.status())
