"""What `evertune model calibrate` prints for people: the factors, each point's fit, the holdout."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from evertune.apps.cli.calibrate import report, residual_rows
from evertune.domain.perfmodel.calibrate import Fit, Residual
from evertune.domain.perfmodel.steptime import Efficiency


def _fit() -> Fit:
    return Fit(
        efficiency=Efficiency(compute=0.25, bandwidth=0.5, attention=0.125, step_overhead_s=0.002),
        residuals=(
            Residual(name="n1-p100", measure="ttft_ms", measured=20.0, predicted=22.0, rel_err=0.1),
            Residual(name="n1-p100", measure="itl_ms", measured=5.0, predicted=4.5, rel_err=-0.1),
            Residual(name="n4-p800", measure="ttft_ms", measured=80.0, predicted=84.0, rel_err=0.05),
        ),
        loss=0.01,
        evaluations=100,
        at_bound=("attention",),
    )


def test_the_report_shows_the_factors_every_residual_and_the_holdout() -> None:
    assert residual_rows(_fit())[1] == ("n1-p100", "itl_ms", "5.00", "4.50", "-10.0%")
    record = {"model": "tiny 2x64", "holdout": {"median_rel_err": 0.07, "max_rel_err": 0.2}}
    console = Console(file=io.StringIO(), width=200)  # not a terminal: plain text
    console.print(report(_fit(), record, hardware="cpu", points=2, path=Path("/d/calibration/cpu.json")))
    lines = str(console.file.getvalue()).splitlines()  # type: ignore[attr-defined]
    assert lines[0] == "calibration of cpu (tiny 2x64) from 2 points -> /d/calibration/cpu.json"
    assert "compute 0.2500, bandwidth 0.5000, attention 0.1250" in lines[1]
    assert "step 2.000 ms" in lines[2]
    assert lines[3].split() == ["point", "measure", "measured", "predicted", "rel", "err"]
    assert lines[4].startswith("  n1-p100") and lines[4].split() == [
        "n1-p100",
        "ttft_ms",
        "20.00",
        "22.00",
        "+10.0%",
    ]
    assert lines[6].split() == ["n4-p800", "ttft_ms", "80.00", "84.00", "+5.0%"]
    assert "fit: median |rel err| 10.0%, max 10.0%" in lines[7]
    assert "at the search bound (not pinned by these points): attention" in lines[8]
    assert "holdout (fit on half, scored on the other half): median 7.0%, max 20.0%" in lines[9]
    assert "\x1b" not in console.file.getvalue()  # type: ignore[attr-defined]
