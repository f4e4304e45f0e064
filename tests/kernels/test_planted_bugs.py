"""The harness must catch broken kernels: each test plants a bug in a copy of a kernel's source
(an off-by-one in a mask, or wrong math), imports the copy, and runs the harness's random cases on
it. A control copy without the bug must pass, so the failures come from the bug, not the copying.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

from evertune.kernels import harness
from evertune.kernels.harness import CaseResult, random_cases, run_case
from tests.kernels.conftest import SEED

#: Random cases per dtype run on each planted copy.
CASES = 4


def plant(op: str, old: str, new: str, folder: Path) -> ModuleType:
    """A copy of `op`'s kernel module with every `old` replaced by `new` (which must occur)."""
    module = harness.op_module(op)
    source = Path(inspect.getsourcefile(module) or "").read_text()
    assert old in source, f"{old!r} is not in {module.__name__}: the planted bug would be a no-op"
    name = f"planted_{op}_{abs(hash((old, new))) % 10**8}"
    path = folder / f"{name}.py"
    path.write_text(source.replace(old, new))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    sys.modules[name] = copy  # triton resolves the kernel's globals through the module
    spec.loader.exec_module(copy)
    return copy


def run_on(op: str, module: ModuleType) -> list[CaseResult]:
    return [run_case(c, module=module) for c in random_cases(op, seed=SEED, count=CASES)]


OFF_BY_ONE = [
    ("rms_norm", "mask = cols < n_cols", "mask = cols < n_cols - 1"),
    ("silu_and_mul", "mask = cols < d", "mask = cols < d - 1"),
    ("rotary_embedding", "rmask = r < half", "rmask = r < half - 1"),
    ("rotary_embedding", "hmask = heads < n_heads", "hmask = heads < n_heads - 1"),
]


@pytest.mark.parametrize(("op", "old", "new"), OFF_BY_ONE, ids=[f"{o}: {n}" for o, _, n in OFF_BY_ONE])
def test_planted_off_by_one_in_a_mask_fails_every_poisoned_case(
    op: str, old: str, new: str, tmp_path: Path
) -> None:
    results = run_on(op, plant(op, old, new, tmp_path))
    poisoned = [r for r in results if not r.case.shape.get("inplace")]
    assert poisoned
    passed = [r.describe() for r in poisoned if r.passed]
    assert not passed, f"seed {SEED}: the planted bug went unnoticed in:\n" + "\n".join(passed)
    # the unwritten elements stayed NaN: the error is infinite, not merely large
    assert all(max(r.errors.values()) == float("inf") for r in poisoned)


WRONG_MATH = [
    # mean of squares over one column too many: a 1/(2n) relative error, only fp32's bound sees it
    ("rms_norm", "/ n_cols + eps", "/ (n_cols + 1) + eps", "float32"),
    # the rotation's sign flipped
    (
        "rotary_embedding",
        "o1 = x1 * cos[None, :] - x2 * sin[None, :]",
        "o1 = x1 * cos[None, :] + x2 * sin[None, :]",
        "all",
    ),
    # silu without the gate's sigmoid
    ("silu_and_mul", "y = gate / (1.0 + tl.exp(-gate)) * up", "y = gate * up", "all"),
]


@pytest.mark.parametrize(
    ("op", "old", "new", "caught_in"), WRONG_MATH, ids=[f"{o}: {n}" for o, _, n, _ in WRONG_MATH]
)
def test_planted_wrong_math_exceeds_the_tolerance(
    op: str, old: str, new: str, caught_in: str, tmp_path: Path
) -> None:
    results = run_on(op, plant(op, old, new, tmp_path))
    expected = [r for r in results if caught_in == "all" or str(r.case.dtype) == f"torch.{caught_in}"]
    assert expected
    passed = [r.describe() for r in expected if r.passed]
    assert not passed, f"seed {SEED}: the planted bug went unnoticed in:\n" + "\n".join(passed)


@pytest.mark.parametrize("op", sorted(harness.OP_MODULES))
def test_an_unchanged_copy_passes(op: str, tmp_path: Path) -> None:
    results = run_on(op, plant(op, "import torch\n", "import torch\n", tmp_path))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, f"seed {SEED}:\n" + "\n".join(failed)
