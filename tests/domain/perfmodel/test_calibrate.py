"""Calibration recovers known factors from synthetic measurements, and stores what it fitted."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from evertune.apps.cli import main
from evertune.domain.engines import EngineSpec
from evertune.domain.engines.fingerprint import detect_cpu
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.perfmodel.arch import ModelArch
from evertune.domain.perfmodel.calibrate import (
    CalibrationPoint,
    MeasuredRun,
    fit,
    fit_runs,
    nelder_mead,
    predict,
    predict_run,
)
from evertune.domain.perfmodel.calibration import calibration_path, load_efficiency, save_calibration
from evertune.domain.perfmodel.steptime import Efficiency
from evertune.domain.perfmodel.workload import synthetic
from evertune.errors import InvalidArgument

TRUE = Efficiency(
    compute=0.2,
    bandwidth=0.4,
    attention=0.05,
    step_overhead_s=0.004,
    seq_overhead_s=0.0003,
    request_overhead_s=0.006,
)
SHAPES = [(1, 64, 16), (1, 2000, 4), (8, 512, 16), (16, 128, 16), (4, 1500, 8), (32, 64, 16), (2, 4000, 4)]


def _points(arch: ModelArch, hardware: HardwareProfile, efficiency: Efficiency) -> list[CalibrationPoint]:
    base = EngineSpec(model="m", kv_cache_space_gib=2)
    out = []
    for n, p, m in SHAPES:
        point = CalibrationPoint(
            name=f"n{n}-p{p}-m{m}", concurrency=n, prompt_tokens=p, max_tokens=m, ttft_ms=1.0, itl_ms=1.0
        )
        predicted = predict(point, model=arch, hardware=hardware, efficiency=efficiency, base=base)
        out.append(replace(point, ttft_ms=predicted["ttft_ms"], itl_ms=predicted["itl_ms"]))
    return out


def test_nelder_mead_finds_a_quadratic_minimum() -> None:
    best, value, _ = nelder_mead(
        lambda x: (x[0] - 1.5) ** 2 + 3 * (x[1] + 2.0) ** 2, [0.0, 0.0], iterations=500
    )
    assert best == pytest.approx([1.5, -2.0], abs=1e-3)
    assert value < 1e-6


def test_fit_recovers_known_factors_from_synthetic_points(tiny_arch: ModelArch, cpu: HardwareProfile) -> None:
    points = _points(tiny_arch, cpu, TRUE)
    result = fit(points, model=tiny_arch, hardware=cpu, base=EngineSpec(model="m", kv_cache_space_gib=2))
    for name in (
        "compute",
        "bandwidth",
        "attention",
        "step_overhead_s",
        "seq_overhead_s",
        "request_overhead_s",
    ):
        assert getattr(result.efficiency, name) == pytest.approx(getattr(TRUE, name), rel=0.02), name
    assert result.max_abs_err < 0.01
    assert len(result.residuals) == 2 * len(SHAPES)
    assert result.at_bound == ()


def test_fit_needs_two_points(tiny_arch: ModelArch, cpu: HardwareProfile) -> None:
    point = CalibrationPoint(name="x", concurrency=1, prompt_tokens=10, max_tokens=2, ttft_ms=5.0, itl_ms=1.0)
    with pytest.raises(InvalidArgument, match="at least 2"):
        fit([point], model=tiny_arch, hardware=cpu, base=EngineSpec(model="m"))


def test_a_bad_point_is_refused_in_one_line() -> None:
    with pytest.raises(InvalidArgument, match="concurrency"):
        CalibrationPoint.parse({"prompt_tokens": 10, "max_tokens": 2, "ttft_ms": 5.0})


def test_calibrate_command_stores_factors_and_residuals(
    tmp_path: Path, tiny_model_dir: Path, tiny_arch: ModelArch, capsys: pytest.CaptureFixture[str]
) -> None:
    from evertune.domain.engines.hardware import detect_local

    points = _points(tiny_arch, detect_local(), TRUE)[:3]
    points_file = tmp_path / "points.json"
    points_file.write_text(json.dumps([p.as_dict() for p in points]))
    code = main(
        [
            "model",
            "calibrate",
            "--data-dir",
            str(tmp_path),
            "--model",
            str(tiny_model_dir),
            "--points",
            str(points_file),
            "--json",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    stored = json.loads(calibration_path(tmp_path, "cpu").read_text())
    assert stored["hardware"] == "cpu"
    assert stored["fit"]["points"] == 3
    assert len(stored["residuals"]) == 6
    assert report["fit"]["median_rel_err"] == stored["fit"]["median_rel_err"]
    assert load_efficiency(tmp_path, "cpu") is not None
    assert load_efficiency(tmp_path, "h200") is None


def test_calibrate_command_without_points_says_what_to_give(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["model", "calibrate", "--data-dir", str(tmp_path), "--model", str(tiny_model_dir)])
    assert code != 0
    assert "--points" in capsys.readouterr().err


def test_a_warm_prefix_point_is_predicted_with_its_prefix_cached(
    tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    base = EngineSpec(model="m", kv_cache_space_gib=2)
    cold = CalibrationPoint(
        name="n1-p1200-s1100-m8",
        concurrency=1,
        prompt_tokens=1200,
        max_tokens=8,
        ttft_ms=1.0,
        itl_ms=1.0,
        prefix_tokens=1100,
    )
    warm = replace(cold, name="n1-p1200-s1100w-m8", prefix_warm=True)
    eff = replace(TRUE, request_overhead_per_token_s=2e-6)
    cold_ms = predict(cold, model=tiny_arch, hardware=cpu, efficiency=eff, base=base)["ttft_ms"]
    warm_ms = predict(warm, model=tiny_arch, hardware=cpu, efficiency=eff, base=base)["ttft_ms"]
    # Both pay the API server's per-token work on the whole prompt; only the cold one prefills it all.
    assert warm_ms < cold_ms
    assert warm_ms > (eff.request_overhead_s + 1200 * 2e-6) * 1000
    assert CalibrationPoint.parse(warm.as_dict()) == warm


def test_fit_runs_recovers_the_per_token_overhead_from_prefix_hit_runs(
    tiny_arch: ModelArch, cpu: HardwareProfile
) -> None:
    spec = EngineSpec(model="m", kv_cache_space_gib=2)
    truth = Efficiency(request_overhead_s=0.004, request_overhead_per_token_s=3e-6)
    runs = []
    for prompt, prefix in ((600, 512), (2000, 1920), (4000, 3840)):
        inputs = tuple(
            synthetic(
                count=6, prompt_tokens=prompt, max_tokens=8, block_size=128, gap_s=1.0, prefix_tokens=prefix
            )
        )
        run = MeasuredRun(
            name=f"p{prompt}",
            inputs=inputs,
            spec=spec,
            rate=1.0,
            ttft_p50_ms=1,
            ttft_p99_ms=1,
            itl_p50_ms=1,
            warm=inputs[:1],
        )
        figures = predict_run(run, model=tiny_arch, hardware=cpu, efficiency=truth)
        runs.append(
            replace(
                run,
                ttft_p50_ms=figures["ttft_p50_ms"],
                ttft_p99_ms=figures["ttft_p99_ms"],
                itl_p50_ms=figures["itl_p50_ms"],
            )
        )
    fitted = fit_runs(
        runs,
        model=tiny_arch,
        hardware=cpu,
        factors=("request_overhead_s", "request_overhead_per_token_s"),
        starts=(Efficiency(request_overhead_s=0.01, request_overhead_per_token_s=1e-5),),
    )
    assert fitted.efficiency.request_overhead_s == pytest.approx(0.004, rel=0.02)
    assert fitted.efficiency.request_overhead_per_token_s == pytest.approx(3e-6, rel=0.02)
    assert fitted.max_abs_err < 0.01


def test_a_cpu_calibration_from_another_machine_is_not_used(tmp_path: Path) -> None:
    """A data dir carried to another CPU keeps its `cpu.json`: its factors belong to the machine
    whose fingerprint it records, so this one falls back to the model's defaults."""
    path = save_calibration(tmp_path, "cpu", {"efficiency": asdict(Efficiency())})
    record = json.loads(path.read_text())
    assert record["fingerprint"] == detect_cpu().id and load_efficiency(tmp_path, "cpu") is not None
    path.write_text(json.dumps({**record, "fingerprint": "0123456789ab"}))
    assert load_efficiency(tmp_path, "cpu") is None
    # An older record without a fingerprint is taken as this machine's.
    path.write_text(json.dumps({k: v for k, v in record.items() if k != "fingerprint"}))
    assert load_efficiency(tmp_path, "cpu") is not None
