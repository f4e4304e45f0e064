"""Where the command line writes for people: rich consoles on stdout and stderr, and the one table
style. On a terminal rich styles and redraws; elsewhere (a pipe, a file, CI) it writes plain text
with no escape codes, and lines are not wrapped (a table keeps its rows on one line each).

Machine-readable output (`--json`) is printed with `print`, never through these.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

#: Columns a console that is not a terminal lays out in: wide enough that no table row wraps.
PLAIN_WIDTH = 10_000


def _console(*, stderr: bool) -> Console:
    console = Console(stderr=stderr, markup=False, emoji=False, highlight=False)
    if not console.is_terminal:
        console.width = PLAIN_WIDTH
    return console


def out_console() -> Console:
    """The console on stdout (what a command answers)."""
    return _console(stderr=False)


def err_console() -> Console:
    """The console on stderr (progress and notes beside the answer)."""
    return _console(stderr=True)


def table(*headers: str, right: tuple[int, ...] = ()) -> Table:
    """A borderless table: a header row, then one line a row, columns two spaces apart (plain text
    stays greppable). `right`: indexes of the columns aligned right (figures)."""
    grid = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for index, header in enumerate(headers):
        grid.add_column(header, justify="right" if index in right else "left")
    return grid
