"""The metric names a PromQL expression (or a Grafana query) reads, by a small tokenizer.

Not a PromQL parser: enough to list the series names of evertune's rules and dashboards. Skipped:
string literals, label matchers (`{...}`, except `__name__="x"`, which names a metric), range and
subquery selectors (`[5m]`, `[1h:1m]`), numbers and durations, Grafana variables (`$endpoint`,
`${x}`, `[[x]]`), functions and aggregations (an identifier followed by `(`, or an aggregation
followed by `by`/`without`), keywords (`and`, `or`, `unless`, `bool`, `offset`, ...), and the label
lists after `by`, `without`, `on`, `ignoring`, `group_left`, `group_right`.

Names are returned as written: a histogram is read as `x_bucket`, `x_count` or `x_sum`, which are
the series Prometheus stores, so the names compare with `/api/v1/label/__name__/values` as they
are. `family` gives the metric family of such a name (`x`), for a check against the families an
exporter declares.
"""

from __future__ import annotations

import re

#: Aggregation operators: `sum by (x) (...)` has no `(` right after `sum`.
AGGREGATIONS = frozenset(
    {
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    }
)
#: Keywords followed by a list of label names in parentheses (optional for the group modifiers).
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
#: Other words that are no metric.
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end"})
#: Suffixes of the series of a histogram (and a summary's `_count`/`_sum`).
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    |(?P<var>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
    |(?P<number>0[xX][0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:ms|s|m|h|d|w|y)?)
    |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    |(?P<open>[({\[])
    |(?P<close>[)}\]])
    |(?P<op>=~|!~|!=|==|>=|<=|[-+*/%^=<>,@])
    |(?P<space>\s+)
    |(?P<comment>\#[^\n]*)
    """,
    re.VERBOSE,
)
_CLOSING = {"(": ")", "{": "}", "[": "]"}
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<expr>.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$", re.DOTALL)


class PromqlSyntaxError(ValueError):
    """A character the tokenizer does not know, or brackets that do not match."""


def tokens(expr: str) -> list[tuple[str, str]]:
    """(kind, text) of every token but spaces and comments."""
    found: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise PromqlSyntaxError(f"unexpected {expr[pos]!r} at {pos} in {expr!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind not in ("space", "comment"):
            found.append((kind, match.group()))
        pos = match.end()
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` reads (see the module doc)."""
    toks = tokens(expr)
    names: set[str] = set()
    stack: list[str] = []  # open brackets
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        after = toks[i + 1] if i + 1 < len(toks) else ("", "")
        if kind == "open":
            stack.append(text)
        elif kind == "close":
            if not stack or _CLOSING[stack.pop()] != text:
                raise PromqlSyntaxError(f"unbalanced {text!r} in {expr!r}")
        elif "{" in stack or "[" in stack:
            # label matchers and range selectors; only `__name__="x"` names a metric
            if kind == "ident" and text == "__name__" and after == ("op", "="):
                value = toks[i + 2] if i + 2 < len(toks) else ("", "")
                if value[0] == "string":
                    names.add(value[1][1:-1])
        elif kind == "ident":
            if text in LABEL_LISTS:
                if after == ("open", "("):  # skip the label list
                    close = _matching(toks, i + 1, expr)
                    i = close + 1
                    continue
            elif text in KEYWORDS:
                pass
            elif after == ("open", "(") or (text in AGGREGATIONS and after[1] in ("by", "without")):
                pass  # a function or an aggregation
            else:
                names.add(text)
        i += 1
    if stack:
        raise PromqlSyntaxError(f"unclosed {stack[-1]!r} in {expr!r}")
    return names


def _matching(toks: list[tuple[str, str]], start: int, expr: str) -> int:
    """Index of the `)` closing the `(` at `start`."""
    depth = 0
    for j in range(start, len(toks)):
        if toks[j] == ("open", "("):
            depth += 1
        elif toks[j] == ("close", ")"):
            depth -= 1
            if depth == 0:
                return j
    raise PromqlSyntaxError(f"unclosed label list in {expr!r}")


def variable_query_expr(query: str) -> str:
    """The PromQL of a Grafana variable query: `label_values(expr, label)` -> `expr`;
    `label_values(label)` -> "" (it reads no metric); anything else as it is."""
    match = _LABEL_VALUES.match(query)
    if match:
        return match.group("expr")
    if query.strip().startswith("label_values("):
        return ""
    return query


def family(name: str) -> str:
    """The family of a series name: a histogram's `x_bucket`, `x_count`, `x_sum` -> `x`."""
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name
