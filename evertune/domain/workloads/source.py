"""Turning a workload name on the command line into a plan: `voice`, a CSV trace or a JSONL trace.

Text comes from the local model's corpus, and exact token counts from the target model's tokenizer
(a model folder), so a trace's ContextTokens are the prompt's real length on that model.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from evertune.domain.model import load_tokenizer, sentences, text_of_tokens
from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.jsonl import load_jsonl_trace
from evertune.domain.workloads.plan import PlannedRequest
from evertune.domain.workloads.scaling import scale
from evertune.domain.workloads.text import MakeText
from evertune.domain.workloads.trace import read_azure_trace
from evertune.domain.workloads.voice import VoiceWorkload, plan_voice


class CorpusText:
    """A `TextSource` from the model's corpus: whole generated sentences, cut to `n` words."""

    def words(self, rng: random.Random, n: int) -> str:
        out: list[str] = []
        while len(out) < n:
            out.extend(" ".join(sentences(rng, 4)).split())
        return " ".join(out[:n])


@dataclass(frozen=True)
class LoadedWorkload:
    """A plan ready to replay, and where it came from."""

    plan: list[PlannedRequest]  #: requests by send time
    description: str  #: one line: the workload, and for files what reading found (bad lines)


def tokens_text(tokenizer_dir: Path) -> MakeText:
    """`make_text(n, rng)`: text of exactly `n` tokens for the tokenizer in `tokenizer_dir`."""
    tokenizer = load_tokenizer(tokenizer_dir)
    return lambda n_tokens, rng: text_of_tokens(tokenizer, n_tokens, rng)


def load_workload(
    spec: str,
    *,
    duration_s: float | None,
    seed: int,
    rate_scale: float,
    tokenizer_dir: Path | None,
    strict: bool = False,
) -> LoadedWorkload:
    """`voice` (the synthetic voice agent) or a path to a `.csv` (Azure format) or `.jsonl` trace.

    `rate_scale` multiplies the request rate: more calls for `voice` (same call shapes), whole
    conversations added or thinned for a trace (see `scale`). `duration_s` cuts a trace, and sets
    the length of a voice run.
    """
    if rate_scale <= 0:
        raise WorkloadError(f"--rate-scale must be positive, not {rate_scale}")
    if spec == "voice":
        settings: dict[str, float] = {"seed": seed}
        if duration_s is not None:
            settings["duration_s"] = duration_s
        voice = VoiceWorkload.parse(settings).scaled(calls=rate_scale)
        plan = plan_voice(voice, text=CorpusText())
        return LoadedWorkload(plan=plan, description=f"voice agent, seed {seed}, {voice.duration_s:g} s")
    path = Path(spec)
    if path.suffix not in (".csv", ".jsonl"):
        raise WorkloadError(f"workload {spec!r} is neither 'voice' nor a .csv or .jsonl trace")
    if not path.is_file():
        raise WorkloadError(f"trace {spec} not found")
    if tokenizer_dir is None:
        raise WorkloadError("a trace needs the target's tokenizer to size prompts (--tokenizer MODEL_DIR)")
    make_text = tokens_text(tokenizer_dir)
    if path.suffix == ".csv":
        loaded = read_azure_trace(path, make_text=make_text, seed=seed, end_s=duration_s, strict=strict)
    else:
        loaded = load_jsonl_trace(path, make_text=make_text, seed=seed, strict=strict)
    plan = loaded.plan
    if duration_s is not None:
        plan = [r for r in plan if r.at_s < duration_s]
    if rate_scale != 1.0:
        plan = scale(plan, rate=rate_scale, seed=seed)
    return LoadedWorkload(plan=plan, description=loaded.report.summary())
