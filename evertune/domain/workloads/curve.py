"""The daily curve: how the call rate moves over a 24 h day, compressed into a run.

A real voice agent is quiet at night and busy in business hours. `DailyCurve.factor(t)` is the rate
at run time `t` as a share of the peak rate, between `1 / peak_to_trough` and 1; `day_length_s`
seconds of run stand for 24 hours, so a run of minutes shows the whole curve.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Shape = Literal["business", "sine", "flat"]

#: Call volume of a business-hours contact centre by hour of day (00:00 ... 23:00), peak = 1: quiet
#: night, morning ramp, a peak late morning, a lunch dip, a second peak mid-afternoon, evening tail.
#: Values are at the full hour and interpolated linearly in between.
BUSINESS_HOURS: tuple[float, ...] = (
    0.05, 0.03, 0.02, 0.02, 0.03, 0.06, 0.15, 0.35, 0.65, 0.90, 1.00, 0.97,
    0.80, 0.85, 0.95, 0.98, 0.90, 0.70, 0.50, 0.38, 0.28, 0.20, 0.13, 0.08,
)  # fmt: skip


class DailyCurve(BaseModel):
    """The shape of the call rate over a day, and how a day maps onto run time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: "business": the hourly profile `BUSINESS_HOURS` (two peaks in office hours); "sine": one smooth
    #: peak at `peak_hour`; "flat": a constant rate (the peak rate all day; for steady benchmarks).
    shape: Shape = "business"
    #: Peak rate over the lowest rate of the day (>= 1); the curve is rescaled to span exactly this.
    peak_to_trough: float = Field(default=5.0, ge=1.0, allow_inf_nan=False)
    #: Seconds of run that stand for 24 hours of day (600: one whole day per 10 minutes of run).
    day_length_s: float = Field(default=600.0, gt=0.0, allow_inf_nan=False)
    #: Hour of day (0-24) at run time 0.
    start_hour: float = Field(default=0.0, ge=0.0, lt=24.0)
    #: Hour of the peak, for the "sine" shape only.
    peak_hour: float = Field(default=14.0, ge=0.0, lt=24.0)

    def hour_at(self, t_s: float) -> float:
        """Hour of day (0 <= h < 24) at run time `t_s` (negative times are the day before)."""
        return (self.start_hour + 24.0 * t_s / self.day_length_s) % 24.0

    def factor(self, t_s: float) -> float:
        """Rate at run time `t_s` as a share of the peak rate, in [1 / peak_to_trough, 1]."""
        if self.shape == "flat":
            return 1.0
        level = _level(self.shape, self.hour_at(t_s), self.peak_hour)
        low = 1.0 / self.peak_to_trough
        return low + (1.0 - low) * level

    def integral(self, start_s: float, end_s: float) -> float:
        """Integral of `factor` over [start_s, end_s] in seconds (expected arrivals at a peak rate of 1/s).

        Numerical (trapezoids a minute of day wide, the hourly profile is piecewise linear), well
        within a part in a thousand.
        """
        if end_s <= start_s:
            return 0.0
        if self.shape == "flat":
            return end_s - start_s
        steps = max(1, math.ceil((end_s - start_s) / (self.day_length_s / 1440.0)))
        width = (end_s - start_s) / steps
        total = 0.5 * (self.factor(start_s) + self.factor(end_s))
        total += sum(self.factor(start_s + i * width) for i in range(1, steps))
        return total * width

    def mean_factor(self) -> float:
        """Mean of `factor` over a whole day: the mean rate as a share of the peak rate."""
        return self.integral(0.0, self.day_length_s) / self.day_length_s


def _level(shape: Shape, hour: float, peak_hour: float) -> float:
    """The shape's level at `hour`, rescaled to [0, 1] (0 at the day's lowest, 1 at its peak)."""
    if shape == "sine":
        return 0.5 * (1.0 + math.cos(2.0 * math.pi * (hour - peak_hour) / 24.0))
    index = int(hour) % 24
    frac = hour - math.floor(hour)
    value = BUSINESS_HOURS[index] * (1.0 - frac) + BUSINESS_HOURS[(index + 1) % 24] * frac
    low, high = min(BUSINESS_HOURS), max(BUSINESS_HOURS)
    return (value - low) / (high - low)
