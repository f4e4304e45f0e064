"""Fitted efficiency factors, stored with the hardware profile they belong to.

File: `<data_dir>/calibration/<hardware>.json`, one per hardware class, written by
`evertune model calibrate`:

    {"hardware": "cpu", "model": "LlamaForCausalLM 4x256", "fitted_at": 1764466000.0,
     "peak_flops": 2.72e12, "memory_bandwidth": 1.41e10,
     "efficiency": {"compute": ..., "bandwidth": ..., "step_overhead_s": ..., "seq_overhead_s": ...},
     "fit": {"points": 9, "median_rel_err": ..., "max_rel_err": ...},
     "residuals": [{"name": ..., "measure": "ttft_ms", "measured": ..., "predicted": ..., "rel_err": ...}]}

`peak_flops` and `memory_bandwidth` are the profile's figures the factors were fitted against: the
factors only mean something relative to them.

A calibration of the `cpu` class also records the machine's hardware fingerprint (`fingerprint`,
`evertune.domain.engines.fingerprint`): the same class name covers CPUs whose kernels differ (AMX, AVX512,
AVX2), so `load_efficiency` ignores a `cpu` calibration fitted on another fingerprint (a data dir
carried to another machine) and the model falls back to its defaults until this one is calibrated.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evertune.domain.engines.fingerprint import detect_cpu
from evertune.domain.perfmodel.steptime import Efficiency
from evertune.errors import InvalidArgument
from evertune.infra.settings import DEFAULT_DATA_DIR


def default_data_dir() -> Path:
    """`$EVERTUNE_DATA_DIR`, else `~/.evertune`."""
    env = os.environ.get("EVERTUNE_DATA_DIR")
    return Path(env).expanduser() if env else DEFAULT_DATA_DIR


def calibration_path(data_dir: Path, hardware: str) -> Path:
    """Where the calibration of `hardware` is kept."""
    return data_dir / "calibration" / f"{hardware}.json"


def save_calibration(data_dir: Path, hardware: str, record: dict[str, Any]) -> Path:
    """Write `record` (which must hold `efficiency`) as the calibration of `hardware`; returns the path."""
    path = calibration_path(data_dir, hardware)
    path.parent.mkdir(parents=True, exist_ok=True)
    if hardware == "cpu":
        record = {"fingerprint": detect_cpu().id, **record}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"hardware": hardware, **record}, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def efficiency_of(record: dict[str, Any]) -> Efficiency:
    """The `Efficiency` of a calibration record; `InvalidArgument` if it holds none."""
    try:
        return Efficiency(**{k: float(v) for k, v in record["efficiency"].items()})
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise InvalidArgument(f"calibration record has no valid efficiency factors: {err}") from None


def load_calibration(path: Path) -> dict[str, Any]:
    """A calibration file's record; one-line error when unreadable."""
    try:
        record = json.loads(path.read_text())
    except OSError as err:
        raise InvalidArgument(f"cannot read calibration {path}: {err.strerror or err}") from None
    except ValueError:
        raise InvalidArgument(f"calibration {path} is not JSON") from None
    if not isinstance(record, dict):
        raise InvalidArgument(f"calibration {path} is not a JSON object")
    return record


#: Factors `evertune model calibrate --measure` fitted on the development machine (docs/perfmodel.md):
#: the prior where this CPU has no stored calibration.
FITTED_CPU = Efficiency(
    compute=0.0556,
    bandwidth=0.283,
    attention=20.08,
    step_overhead_s=0.00098,
    seq_overhead_s=4.6e-5,
    request_overhead_s=0.0083,
)


def load_efficiency(data_dir: Path, hardware: str) -> Efficiency | None:
    """The stored factors of `hardware`, or None when it was never calibrated."""
    path = calibration_path(data_dir, hardware)
    if not path.is_file():
        return None
    record = load_calibration(path)
    if hardware == "cpu" and "fingerprint" in record and record["fingerprint"] != detect_cpu().id:
        return None  # fitted on another CPU: not this machine's factors
    return efficiency_of(record)


def efficiency_dict(efficiency: Efficiency) -> dict[str, float]:
    """The factors as plain JSON numbers."""
    return {k: float(v) for k, v in asdict(efficiency).items()}
