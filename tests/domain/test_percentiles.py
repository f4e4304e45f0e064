"""`percentile_or_zero`: the percentile for a wire field, where 0 stands for nothing measured."""

from __future__ import annotations

from evertune.domain.percentiles import percentile, percentile_or_zero


def test_percentile_or_zero_is_the_percentile_or_zero_for_none() -> None:
    values = [40.0, 10.0, 30.0, 20.0]
    assert percentile_or_zero(values, 99.0) == percentile(values, 99.0)
    assert percentile_or_zero(iter(values), 50.0) == 25.0  # any iterable, read once
    assert percentile_or_zero([], 99.0) == 0.0
