"""The kernel tests run the Triton kernels in Triton's interpreter on CPU tensors when there is no GPU.

Triton reads TRITON_INTERPRET when it is imported. So nothing in this folder imports triton (or vLLM,
which imports it) at collection time, and a package-scoped fixture sets TRITON_INTERPRET=1 before the
first test here and removes it after the last: tests elsewhere in the same pytest run, and the
processes they start, do not see it. It is set only when no CUDA device is present and the variable
is not set already.

If something imported triton before these tests ran (without the interpreter), the interpreter
cannot be switched on any more: every kernel test then fails with that reason instead of failing
obscurely.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator

import pytest
import torch

#: Seed of the random cases: EVERTUNE_KERNELS_SEED to repeat a run, else a fresh one per run (each
#: failure message names its case's seed and shape).
SEED = int(os.environ.get("EVERTUNE_KERNELS_SEED", str(random.SystemRandom().randrange(2**31))))


@pytest.fixture(scope="package", autouse=True)
def triton_interpreter() -> Iterator[None]:
    if torch.cuda.is_available() or "TRITON_INTERPRET" in os.environ:
        yield
        return
    if "triton" in sys.modules:
        pytest.fail(
            "triton was imported before tests/kernels could set TRITON_INTERPRET=1; run tests/kernels in "
            "a pytest process of its own, or set TRITON_INTERPRET=1 in the environment"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        os.environ.pop("TRITON_INTERPRET", None)
