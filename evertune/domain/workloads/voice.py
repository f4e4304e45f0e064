"""The voice-agent workload: calls from a daily curve, each a conversation of short turns.

Calls arrive as a non-homogeneous Poisson process whose rate follows `DailyCurve` (peak rate
`peak_calls_per_s`). Each call talks to one of `agents` voice agents; every agent has its own long
system prompt, shared by all its calls. A call is `turns` user turns; every turn resends the agent's
system prompt, its greeting, the history so far (earlier user utterances and the agent's replies)
and the new utterance, and asks for a short answer.

What is said comes from a `ConversationSource` (`conversation.py`): by default real voice
conversations of agent personas (`personas/`: a clinic receptionist, a pharmacy refill line, ...);
with `content="words"` or an explicit `text=`, words of a `TextSource` at exact lengths.

The plan is fixed ahead of time and replayed open loop, so two things are assumed, not observed:
- the agent's replies in the history are written ahead (the real answer is not known when the plan
  is made): templates for personas, `reply_words` words of text otherwise;
- the next turn leaves `nominal_answer_s + think` seconds after the previous turn was sent, whatever
  the endpoint's real answer time: `nominal_answer_s` stands for the answer being produced and
  spoken, `think` (drawn from `think_s`) for the caller's pause and utterance and end-of-speech
  detection.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evertune.domain.workloads.arrivals import poisson_arrivals
from evertune.domain.workloads.conversation import (
    CallScript,
    ConversationSource,
    TextLengths,
    VoiceAgent,
    WordConversations,
)
from evertune.domain.workloads.curve import DailyCurve
from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.personas import PERSONAS, PersonaConversations
from evertune.domain.workloads.plan import ChatMessage, PlannedRequest
from evertune.domain.workloads.seeding import derive
from evertune.domain.workloads.tags import AGENT, WORKLOAD
from evertune.domain.workloads.text import TextSource, WordListText

#: What a voice plan's calls say (`VoiceWorkload.content`).
Content = Literal["personas", "words"]


#: The longest answer a voice turn asks for, tokens: a spoken turn of about 45 words, the cap a voice
#: agent sets; an answer ends at the model's end of turn or here, whichever comes first.
VOICE_TURN_CAP = 60


class VoiceWorkload(BaseModel):
    """Every setting of a synthetic voice-agent workload; the defaults are a mid-size contact centre."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Length of the plan in seconds: requests are planned in [0, duration_s).
    duration_s: float = Field(default=600.0, gt=0.0, allow_inf_nan=False)
    #: Seed of everything random: the same settings and seed give the same plan.
    seed: int = 0
    #: Voice agents on the endpoint; each call talks to one, chosen uniformly.
    agents: int = Field(default=4, ge=1)
    #: What the calls say: "personas", real voice conversations of agent personas (clinic, pharmacy,
    #: airline, ...; `personas/`); "words", generated words at exact lengths (`WordListText`).
    content: Content = "personas"
    #: Length of a typical agent's system prompt in words (1.3-1.7 tokens a word); 0 = none. "words":
    #: every agent's; "personas": each persona's prompt is this times its `relative_length`.
    system_prompt_words: int = Field(default=800, ge=0)
    #: The agent's fixed opening line (first assistant message of every call), in words ("personas":
    #: the longest greeting within it); 0 = none.
    greeting_words: int = Field(default=12, ge=0)
    #: Call arrival rate at the daily peak, calls per second (the mean is lower: see `curve`).
    peak_calls_per_s: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    #: How the call rate moves over the day, and how a day maps onto the run.
    curve: DailyCurve = DailyCurve()
    #: User turns per call, uniform, both ends included.
    turns: tuple[int, int] = (3, 8)
    #: Seconds the plan assumes from a turn's send until the agent has answered and spoken (open loop).
    nominal_answer_s: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    #: Seconds from that nominal answer to the caller's next turn being sent, uniform.
    think_s: tuple[float, float] = (2.0, 5.0)
    #: Words of each user utterance, uniform, both ends included ("personas": a template within it).
    user_words: tuple[int, int] = (5, 25)
    #: Words of each agent reply kept in the history, uniform, both ends included ("personas": as above).
    reply_words: tuple[int, int] = (10, 30)
    #: `max_tokens` of each turn (voice answers are short), uniform, both ends included.
    max_tokens: tuple[int, int] = (15, 40)
    #: The factor `scaled(text=)` put on every text's length (the word settings above include it).
    #: "personas" pick each utterance, answer and greeting as at full length and keep this share of
    #: its words (at least one); "words" need nothing more than the scaled settings.
    text_scale: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    #: Start with calls already in progress at t=0 (as in a system that has been running), so the
    #: request rate does not ramp up from empty; otherwise the first call starts after t=0.
    warm_start: bool = True

    @model_validator(mode="after")
    def _ranges_in_order(self) -> Self:
        ranges: dict[str, tuple[float, float]] = {
            "turns": self.turns,
            "think_s": self.think_s,
            "user_words": self.user_words,
            "reply_words": self.reply_words,
            "max_tokens": self.max_tokens,
        }
        for name, (low, high) in ranges.items():
            if low > high:
                raise ValueError(f"{name}: low end {low} is above high end {high}")
        if self.turns[0] < 1 or self.max_tokens[0] < 1 or self.user_words[0] < 1:
            raise ValueError("turns, max_tokens and user_words must be at least 1")
        if self.think_s[0] < 0 or self.reply_words[0] < 0:
            raise ValueError("think_s and reply_words must not be negative")
        return self

    @classmethod
    def parse(cls, data: Mapping[str, object]) -> VoiceWorkload:
        """Settings from a mapping (config file, request); a bad value raises a one-line `WorkloadError`."""
        try:
            return cls.model_validate(dict(data))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            reason = str(first["msg"]).removeprefix("Value error, ")
            raise WorkloadError(f"invalid voice workload: {where + ': ' if where else ''}{reason}") from None

    def scaled(self, *, calls: float = 1.0, system_prompt: float = 1.0, text: float = 1.0) -> VoiceWorkload:
        """The same workload with `calls` times the call rate, `system_prompt` times the shared
        prompt's length and `text` times the length of every text in it (the shared prompt, the
        greeting, the callers' turns and the replies kept in the history; a turn keeps a word).

        `scaled(calls=1.25)` is "25% more calls"; `scaled(system_prompt=1.5)` a longer shared prompt
        (personas: the same prompt with more knowledge-base entries); `scaled(text=0.5)` the same
        calls (their starts and turns) in about half the words (personas: fewer knowledge-base
        entries, and each utterance and answer that a full-length plan has, cut to half its words).
        Everything else, the seed included, stays: the agents' prompts and the call contents come
        from their own random streams, so only what was scaled differs in kind.
        """
        if not calls >= 0 or not system_prompt >= 0 or not text > 0:
            raise WorkloadError(
                f"scale factors must be >= 0 (text > 0), not calls={calls}, "
                f"system_prompt={system_prompt}, text={text}"
            )

        def words(span: tuple[int, int], least: int) -> tuple[int, int]:
            return (max(round(span[0] * text), least), max(round(span[1] * text), least))

        update = {
            "peak_calls_per_s": self.peak_calls_per_s * calls,
            "system_prompt_words": round(self.system_prompt_words * system_prompt * text),
            "greeting_words": round(self.greeting_words * text),
            "user_words": words(self.user_words, 1),
            "reply_words": words(self.reply_words, 0),
            "text_scale": self.text_scale * text,
        }
        return VoiceWorkload.parse({**self.model_dump(), **update})

    def call_rate(self, t_s: float) -> float:
        """Call arrival rate (calls per second) at run time `t_s`."""
        return self.peak_calls_per_s * self.curve.factor(t_s)

    def expected_calls(self, start_s: float, end_s: float) -> float:
        """Expected number of calls starting in [start_s, end_s)."""
        return self.peak_calls_per_s * self.curve.integral(start_s, end_s)

    def longest_call_s(self) -> float:
        """Longest time from a call's first turn to its last."""
        return (self.turns[1] - 1) * (self.nominal_answer_s + self.think_s[1])


def plan_voice(workload: VoiceWorkload, *, text: TextSource | None = None) -> list[PlannedRequest]:
    """The requests of `workload`, by `at_s`; deterministic for its settings and seed.

    `text`, when given, makes the content words of that source (as `content="words"` does with the
    built-in word list). Request ids are `v{seed}-c{call}-t{turn}` (calls numbered by start time,
    from 0, counting calls of the warm start that began before t=0); `conversation_id` is
    `v{seed}-c{call}`; tags hold `workload=voice` and the agent (`agent=a{n}`).
    """
    w = workload
    agents = voice_agents(w, text=text)
    first_s = -w.longest_call_s() if w.warm_start else 0.0
    starts = poisson_arrivals(
        derive(w.seed, "voice", "arrivals"),
        rate=w.call_rate,
        max_rate=w.peak_calls_per_s,
        start_s=first_s,
        end_s=w.duration_s,
    )
    plan: list[PlannedRequest] = []
    for call, start_s in enumerate(starts):
        plan.extend(
            _plan_call(
                w, call=call, start_s=start_s, agents=agents, rng=derive(w.seed, "voice", "call", call)
            )
        )
    plan.sort(key=lambda request: request.at_s)
    return plan


def voice_agents(workload: VoiceWorkload, *, text: TextSource | None = None) -> list[VoiceAgent]:
    """The agents of `workload` (as `plan_voice` makes them): agent N's system prompt and greeting,
    and its calls; each agent from its own stream."""
    source = _conversations(workload, text=text)
    return [source.agent(n, derive(workload.seed, "voice", "agent", n)) for n in range(workload.agents)]


def _conversations(workload: VoiceWorkload, *, text: TextSource | None = None) -> ConversationSource:
    """The source of `workload`'s texts: `text`'s words when given, else its `content`."""
    w = workload
    lengths = TextLengths(
        system_prompt=w.system_prompt_words,
        greeting=w.greeting_words,
        user=w.user_words,
        reply=w.reply_words,
        scale=w.text_scale,
    )
    if text is not None:
        return WordConversations(text, lengths)
    if w.content == "words":
        return WordConversations(WordListText(), lengths)
    return PersonaConversations(lengths, PERSONAS)


def _opening(agent: VoiceAgent) -> list[ChatMessage]:
    """What every call of `agent` starts with: its system prompt and its greeting."""
    opening: list[ChatMessage] = []
    if agent.system_prompt:
        opening.append(ChatMessage(role="system", content=agent.system_prompt))
    if agent.greeting:
        opening.append(ChatMessage(role="assistant", content=agent.greeting))
    return opening


def _plan_call(
    workload: VoiceWorkload,
    *,
    call: int,
    start_s: float,
    agents: list[VoiceAgent],
    rng: random.Random,
) -> list[PlannedRequest]:
    """The turns of one call that fall in [0, duration_s)."""
    w = workload
    agent = rng.randrange(w.agents)
    turns = rng.randint(*w.turns)
    script: CallScript = agents[agent].call(turns, rng)
    conversation = f"v{w.seed}-c{call}"
    tags = {WORKLOAD: "voice", AGENT: f"a{agent}"}
    history = _opening(agents[agent])
    at_s = start_s
    requests: list[PlannedRequest] = []
    for turn in range(turns):
        user = ChatMessage(role="user", content=script.caller(turn))
        max_tokens = rng.randint(*w.max_tokens)
        if 0.0 <= at_s < w.duration_s:
            requests.append(
                PlannedRequest(
                    at_s=at_s,
                    request_id=f"{conversation}-t{turn}",
                    api="chat",
                    max_tokens=max_tokens,
                    messages=(*history, user),
                    conversation_id=conversation,
                    turn=turn,
                    tags=dict(tags),
                )
            )
        if turn + 1 < turns:
            reply = ChatMessage(role="assistant", content=script.reply(turn))
            history += [user, reply]
            at_s += w.nominal_answer_s + rng.uniform(*w.think_s)
    return requests
