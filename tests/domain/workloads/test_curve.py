from __future__ import annotations

import pytest

from evertune.domain.workloads import DailyCurve
from evertune.domain.workloads.curve import BUSINESS_HOURS, Shape

SHAPES: list[Shape] = ["sine", "business"]


@pytest.mark.parametrize("shape", SHAPES)
def test_factor_spans_trough_to_peak(shape: Shape) -> None:
    curve = DailyCurve(shape=shape, peak_to_trough=4.0, day_length_s=240.0)
    values = [curve.factor(t / 10) for t in range(2400)]
    assert min(values) == pytest.approx(0.25, abs=1e-3) and max(values) == pytest.approx(1.0, abs=1e-3)
    assert curve.factor(-10.0) == pytest.approx(curve.factor(230.0))  # periodic: a day later, the same


def test_sine_peaks_at_its_hour_and_business_late_morning() -> None:
    sine = DailyCurve(shape="sine", peak_hour=14.0, day_length_s=2400.0)
    assert sine.factor(1400.0) == pytest.approx(1.0)
    assert sine.factor(200.0) == pytest.approx(0.2)  # 02:00, twelve hours off the peak: the trough
    business = DailyCurve(shape="business", day_length_s=24.0)
    assert max(range(24), key=lambda h: business.factor(float(h))) == BUSINESS_HOURS.index(1.0) == 10
    shifted = DailyCurve(shape="business", day_length_s=24.0, start_hour=10.0)
    assert shifted.factor(0.0) == pytest.approx(1.0)


def test_integral_and_mean() -> None:
    assert DailyCurve(shape="flat").integral(0.0, 50.0) == 50.0
    sine = DailyCurve(shape="sine", peak_to_trough=3.0, day_length_s=600.0)
    # the sine's mean is halfway between trough (1/3) and peak (1)
    assert sine.mean_factor() == pytest.approx(2 / 3, rel=1e-3)
    assert sine.integral(0.0, 1200.0) == pytest.approx(2 * sine.integral(0.0, 600.0), rel=1e-6)
    assert sine.integral(5.0, 5.0) == 0.0
