"""The demo's traffic: the voice workload, then (partway) the same agents shifted to a longer shared
prompt and 25% more calls. Pure: plans are built from settings and a seed, nothing is sent here.

The two phases are one open-loop plan (one replay, so the shift happens on the schedule whatever
the endpoint does): requests of the shifted phase leave `shift_at_s` seconds after the start, carry
the tag `phase=shifted` and ids prefixed `s-` (the scaled workload keeps its seed, so its ids would
otherwise repeat the baseline's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from evertune.domain.workloads.curve import DailyCurve
from evertune.domain.workloads.plan import PlannedRequest
from evertune.domain.workloads.voice import VOICE_TURN_CAP, VoiceWorkload, plan_voice
from evertune.errors import InvalidArgument

#: Tag naming the phase a request belongs to.
PHASE_TAG = "phase"
#: Phase names.
BASELINE = "baseline"
SHIFTED = "shifted"


@dataclass(frozen=True)
class Shift:
    """How the traffic changes partway."""

    calls: float = 1.25  #: factor on the call rate ("25% more calls")
    system_prompt: float = 1.5  #: factor on the shared system prompt's length ("a longer shared prompt")


@dataclass(frozen=True)
class TrafficPlan:
    """The demo's traffic, planned."""

    requests: tuple[PlannedRequest, ...]  #: every request, in send order
    baseline: VoiceWorkload  #: the workload before the shift
    shifted: VoiceWorkload | None  #: the workload after it (None: no shift)
    shift_at_s: float | None  #: when the shift happens, seconds after the start (None: never)
    duration_s: float  #: length of the plan, seconds


def voice_workload(
    *, duration_s: float, peak_calls_per_s: float, seed: int, prompt_words: int
) -> VoiceWorkload:
    """The demo's voice workload: a flat daily curve (the peak all the time), short calls so a short
    run sees whole conversations, answers up to a voice turn's cap (the real model ends most of them
    sooner), otherwise the workload's defaults (the persona conversations)."""
    return VoiceWorkload(
        duration_s=duration_s,
        seed=seed,
        peak_calls_per_s=peak_calls_per_s,
        system_prompt_words=prompt_words,
        curve=DailyCurve(shape="flat"),
        turns=(3, 6),
        max_tokens=(VOICE_TURN_CAP, VOICE_TURN_CAP),
    )


def plan_traffic(
    *,
    duration_s: float,
    peak_calls_per_s: float,
    shift_at_s: float | None,
    shift: Shift = Shift(),
    seed: int = 0,
    prompt_words: int = 800,
    text_scale: float = 1.0,
) -> TrafficPlan:
    """Baseline traffic for `duration_s`, or baseline until `shift_at_s` and shifted traffic after;
    `prompt_words` is the shared prompt's length before the shift and `text_scale` a factor on the
    length of every text (`VoiceWorkload.scaled(text=)`), the shared prompt included."""
    if duration_s <= 0:
        raise InvalidArgument(f"the demo's traffic needs a positive duration, not {duration_s:g} s")
    if shift_at_s is not None and not 0 < shift_at_s < duration_s:
        raise InvalidArgument(f"the shift must fall inside the run (0, {duration_s:g}) s, not {shift_at_s:g}")
    base_len = shift_at_s if shift_at_s is not None else duration_s
    baseline = voice_workload(
        duration_s=base_len, peak_calls_per_s=peak_calls_per_s, seed=seed, prompt_words=prompt_words
    ).scaled(text=text_scale)
    requests = [_tagged(r, phase=BASELINE) for r in plan_voice(baseline)]
    shifted: VoiceWorkload | None = None
    if shift_at_s is not None:
        shifted = baseline.scaled(calls=shift.calls, system_prompt=shift.system_prompt).model_copy(
            update={"duration_s": duration_s - shift_at_s}
        )
        requests += [
            _tagged(r, phase=SHIFTED, offset_s=shift_at_s, id_prefix="s-") for r in plan_voice(shifted)
        ]
    requests.sort(key=lambda r: r.at_s)
    return TrafficPlan(
        requests=tuple(requests),
        baseline=baseline,
        shifted=shifted,
        shift_at_s=shift_at_s,
        duration_s=duration_s,
    )


def _tagged(
    request: PlannedRequest, *, phase: str, offset_s: float = 0.0, id_prefix: str = ""
) -> PlannedRequest:
    return dataclasses.replace(
        request,
        at_s=max(request.at_s, 0.0) + offset_s,
        request_id=id_prefix + request.request_id,
        conversation_id=(id_prefix + request.conversation_id) if request.conversation_id else "",
        tags={**request.tags, PHASE_TAG: phase},
    )


def phase_of(request: PlannedRequest) -> str:
    """The phase a planned request belongs to."""
    return request.tags.get(PHASE_TAG, BASELINE)
