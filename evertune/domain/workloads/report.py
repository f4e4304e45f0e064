"""What reading a trace found wrong: bad lines, counted, the first few named with their line numbers.

Readers check each line and either raise at the end (`strict`: one `WorkloadError` naming the first
bad line and how many there were) or leave bad lines out and say so in a `ReadReport`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evertune.domain.workloads.errors import WorkloadError

#: How many bad lines a report names; the rest are only counted.
NAMED_BAD_LINES = 5


@dataclass(frozen=True)
class BadLine:
    """One line a reader left out, and why."""

    line: int  #: 1-based line number in the file (the header is line 1 of a CSV)
    reason: str  #: what is wrong with it, one line


@dataclass(frozen=True)
class ReadReport:
    """The outcome of reading one trace."""

    source: str  #: the file (or label) that was read
    rows: int  #: good rows read
    skipped: int  #: bad lines left out
    first_bad: tuple[BadLine, ...] = ()  #: the first few bad lines (at most `NAMED_BAD_LINES`)

    def summary(self) -> str:
        """One line for a person: rows read, and which lines were left out."""
        text = f"{self.source}: {self.rows} rows"
        if self.skipped:
            named = ", ".join(f"line {bad.line} ({bad.reason})" for bad in self.first_bad)
            more = (
                ""
                if self.skipped <= len(self.first_bad)
                else f" and {self.skipped - len(self.first_bad)} more"
            )
            text += f", {self.skipped} bad lines skipped: {named}{more}"
        return text


@dataclass
class BadLines:
    """Collects bad lines while a reader goes through a file."""

    source: str  #: the file (or label) being read
    count: int = 0  #: bad lines so far
    first: list[BadLine] = field(default_factory=list)  #: the first few of them

    def add(self, line: int, reason: str) -> None:
        """Note that `line` is bad because of `reason`."""
        self.count += 1
        if len(self.first) < NAMED_BAD_LINES:
            self.first.append(BadLine(line=line, reason=reason))

    def report(self, *, rows: int, strict: bool) -> ReadReport:
        """The report of the read; with `strict`, a `WorkloadError` naming the first bad line instead."""
        if strict and self.count:
            first = self.first[0]
            raise WorkloadError(
                f"{self.source} line {first.line}: {first.reason} ({self.count} bad lines in all)"
            )
        return ReadReport(source=self.source, rows=rows, skipped=self.count, first_bad=tuple(self.first))
