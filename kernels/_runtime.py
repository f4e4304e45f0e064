"""Where the kernels can run: a CUDA (or ROCm) device, or Triton's interpreter on the CPU.

Triton reads `TRITON_INTERPRET` when it is imported, so the choice is made before the first kernel
module is imported: `backend()` only reports it. Nothing here imports triton.
"""

from __future__ import annotations

import os
from typing import Literal

import torch

from evertune.errors import FailedPrecondition

Backend = Literal["gpu", "interpreter", "none"]

INTERPRET_ENV = "TRITON_INTERPRET"


def interpreting() -> bool:
    """True when Triton runs kernels in its interpreter (`TRITON_INTERPRET=1`)."""
    return os.environ.get(INTERPRET_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def gpu_available() -> bool:
    """True when torch sees a CUDA or ROCm device."""
    return bool(torch.cuda.is_available())


def backend() -> Backend:
    """`interpreter` when TRITON_INTERPRET is on (it wins, even beside a GPU), `gpu` when a device is
    present, else `none`: the kernels cannot run."""
    if interpreting():
        return "interpreter"
    if gpu_available():
        return "gpu"
    return "none"


def check_tensors(op: str, *tensors: torch.Tensor | None) -> None:
    """Raise `FailedPrecondition` when the tensors cannot be handed to a Triton kernel here: all on one
    device, a GPU one unless the interpreter runs (which takes CPU tensors)."""
    present = [t for t in tensors if t is not None]
    devices = {t.device for t in present}
    if len(devices) > 1:
        raise FailedPrecondition(f"{op}: tensors are on different devices ({sorted(map(str, devices))})")
    device = present[0].device if present else torch.device("cpu")
    if device.type == "cpu" and not interpreting():
        raise FailedPrecondition(
            f"{op}: Triton kernels need a GPU tensor, or TRITON_INTERPRET=1 set before triton is imported "
            "to run on the CPU"
        )


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
