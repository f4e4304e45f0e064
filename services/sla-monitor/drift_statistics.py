"""The statistical tests of drift detection (pure: numpy, and the Kolmogorov distribution from scipy).

Two-sample Kolmogorov-Smirnov with its asymptotic p-value and critical distance, the sign test of
live values against a reference median, the z of a Poisson rate ratio and the pooled
two-proportion z, each with the |z| a two-sided normal test must exceed (`drift.py` says which
feature each one judges).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import numpy.typing as npt
from scipy import stats
from scipy.special import kolmogi, kolmogorov

FloatArray = npt.NDArray[np.float64]


def normal_two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard normal statistic."""
    return math.erfc(abs(z) / math.sqrt(2.0))


def ks_2samp(a: FloatArray, b: FloatArray) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov: (D, asymptotic two-sided p-value).

    p uses the Stephens correction (Numerical Recipes 14.3): Q((sqrt(ne) + 0.12 + 0.11/sqrt(ne)) D),
    ne = n m / (n + m). With ties (integer token counts) the test is conservative.
    """
    if len(a) == 0 or len(b) == 0:
        return 0.0, 1.0
    d = float(stats.ks_2samp(a, b, method="asymp").statistic)
    ne = len(a) * len(b) / (len(a) + len(b))
    root = math.sqrt(ne)
    return d, float(kolmogorov((root + 0.12 + 0.11 / root) * d))


def z_critical(p_value: float) -> float:
    """|z| a two-sided normal test must exceed to reach `p_value` (3.29 for 0.001)."""
    return NormalDist().inv_cdf(1.0 - p_value / 2.0)


def ks_critical(p_value: float, *, n: int, m: int) -> float:
    """KS distance D whose asymptotic p (as `ks_2samp` computes it) is `p_value` for samples of n and m."""
    ne = n * m / (n + m)
    root = math.sqrt(ne)
    return float(kolmogi(p_value)) / (root + 0.12 + 0.11 / root)


def sign_test_z(live: FloatArray, median: float) -> float:
    """z of the share of `live` above a reference `median` against 1/2 (ties count half).

    Under no change half the live values lie above the reference median: k ~ Binomial(n, 1/2),
    z = (k - n/2) / sqrt(n/4). Positive when the live values are larger."""
    n = len(live)
    if n == 0:
        return 0.0
    above = float(np.sum(live > median)) + 0.5 * float(np.sum(live == median))
    return (above - n / 2.0) / math.sqrt(n / 4.0)


def rate_ratio_z(*, live_count: int, live_s: float, ref_count: int, ref_s: float) -> float:
    """z of log(live rate / reference rate) for Poisson counts (var of a log count ~ 1/count)."""
    if live_count <= 0 or ref_count <= 0:
        return math.inf if live_count != ref_count else 0.0
    log_ratio = math.log((live_count / live_s) / (ref_count / ref_s))
    return log_ratio / math.sqrt(1.0 / live_count + 1.0 / ref_count)


def two_proportion_z(*, p1: float, n1: int, p0: float, n0: int) -> float:
    """Pooled two-proportion z statistic of p1 (n1 trials) against p0 (n0 trials)."""
    pooled = (p1 * n1 + p0 * n0) / (n1 + n0)
    var = pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n0)
    if var <= 0:
        return 0.0 if p1 == p0 else math.inf
    return (p1 - p0) / math.sqrt(var)


def relative_change(live: float, ref: float) -> float:
    """live / ref - 1 (0.4 = 40% higher); 0 when both are 0, inf when only the reference is."""
    return live / ref - 1.0 if ref else (0.0 if live == ref else math.inf)
