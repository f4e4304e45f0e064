"""Real voice conversations: personas made into agents, and their calls into scripts.

Agent N is persona N mod len(personas) (the clinic, the pharmacy, ...), with business facts of its
own drawn from the agent's stream, so two agents of one persona are two businesses of that kind
(another clinic, with other staff, hours and fees).

**System prompt.** A stream of pieces: the persona's core (role, speaking style, policies, facts,
tools), then its knowledge-base entries in the agent's own order, then reference entries (providers,
flights, dishes) drawn without end. The prompt of a target of `w` words is as many whole pieces
after the core as fit in `w`; a target below the core's length cuts the core to its first `w` words.
Since the stream does not depend on the target, a longer prompt of an agent starts with the shorter
one. The target is `system_prompt` words times the persona's `relative_length`.

**Calls.** A call has one of the persona's intents (book, move, cancel, ...) and goes: the opening,
the intent's details (who is calling, what they want), follow-up questions, the confirmation, thanks
and goodbye, as far as its turns go (2 turns: opening and the first detail; 3: then goodbye;
4: both details; 5: the confirmation; more: follow-ups before it). Slots (the caller's name, dates,
times, codes, amounts) are drawn once per call, so no two calls say quite the same.

**Lengths.** Each utterance and answer is one of its step's templates whose length in words falls
in the settings' span (`user`, `reply`); when none does, the nearest, cut to the span's high end.
The greeting is the longest of the persona's greetings within `greeting` words (or the shortest,
cut). Texts scaled by `VoiceWorkload.scaled(text=k)` are chosen as at full length (the spans taken
back to their unscaled size) and then cut to k of their words; the prompt has k of its words in
fewer knowledge-base entries. So a scaled plan has the same calls saying the same things, shorter.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from evertune.domain.workloads.conversation import (
    CallScript,
    TextLengths,
    VoiceAgent,
    cut_words,
    fit,
    word_count,
)
from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.personas.persona import Exchange, Persona, Slots

#: Heading of the knowledge-base entries in a system prompt.
KNOWLEDGE_TITLE = "# Knowledge base"


class PersonaConversations:
    """A `ConversationSource` of real voice conversations, agents cycling over `personas`."""

    def __init__(self, lengths: TextLengths, personas: Sequence[Persona]) -> None:
        if not personas:
            raise WorkloadError("persona conversations need at least one persona")
        self._lengths = lengths
        self._personas = tuple(personas)

    def agent(self, index: int, rng: random.Random) -> VoiceAgent:
        persona = self._personas[index % len(self._personas)]
        facts = persona.facts(rng)
        greetings = [template.format_map(facts) for template in persona.greetings]
        target = round(self._lengths.system_prompt * persona.relative_length)
        return PersonaAgent(
            persona=persona,
            facts=facts,
            system_prompt=system_prompt(persona, facts, rng, target),
            greeting=greeting(greetings, self._lengths),
            lengths=self._lengths,
        )


@dataclass(frozen=True)
class PersonaAgent:
    """One agent: a persona with its facts, its prompt and greeting, making calls."""

    persona: Persona  #: what kind of agent
    facts: Slots  #: its business facts (name, address, hours, fees, staff)
    system_prompt: str  #: its system prompt ("" = none)
    greeting: str  #: its greeting ("" = none)
    lengths: TextLengths  #: the word spans of utterances and answers

    def call(self, turns: int, rng: random.Random) -> CallScript:
        # One draw from the call's stream seeds the script, so what the call's stream gives after
        # (its max_tokens and think times) does not depend on the lengths of its texts.
        own = random.Random(rng.getrandbits(64))
        persona = self.persona
        slots = {**self.facts, **persona.caller(own, self.facts)}
        steps = call_steps(persona, turns, own)
        lengths = self.lengths

        def say(templates: tuple[str, ...], span: tuple[int, int]) -> str:
            chosen = fit(own, [template.format_map(slots) for template in templates], lengths.unscaled(span))
            return lengths.shorten(chosen)

        callers = [say(step.callers, lengths.user) for step in steps]
        replies = [say(step.replies, lengths.reply) for step in steps]
        return Script(callers=tuple(callers), replies=tuple(replies))


@dataclass(frozen=True)
class Script:
    """A call's texts, decided when the call was drawn."""

    callers: tuple[str, ...]  #: the caller's utterance at each turn
    replies: tuple[str, ...]  #: the agent's answer to each turn

    def caller(self, turn: int) -> str:
        return self.callers[turn]

    def reply(self, turn: int) -> str:
        return self.replies[turn]


def call_steps(persona: Persona, turns: int, rng: random.Random) -> list[Exchange]:
    """The exchanges of a call of `turns` turns: an intent's opening and details, follow-ups, the
    intent's confirmation and the closing, as far as the turns go (see the module's doc)."""
    intent = rng.choice(persona.intents)
    if turns <= 2:
        return [intent.opening, *intent.details[: turns - 1]]
    room = turns - 2  # between the opening and the closing
    details = list(intent.details[:room])
    confirm = [intent.confirm] if room > len(details) else []
    extra = room - len(details) - len(confirm)
    questions = intent.follow_ups or persona.follow_ups
    follow_ups: list[Exchange] = []
    while len(follow_ups) < extra:  # each question once while they last, then again in a new order
        follow_ups += rng.sample(questions, min(len(questions), extra - len(follow_ups)))
    return [intent.opening, *details, *follow_ups, *confirm, persona.closing]


def prompt_pieces(persona: Persona, facts: Slots, rng: random.Random) -> Iterator[str]:
    """The endless stream a system prompt is cut from: the core, then the knowledge base in an
    order drawn from `rng`, then reference entries; each piece starts with its separator."""
    yield persona.core.format_map(facts)
    order = rng.sample(range(len(persona.knowledge)), len(persona.knowledge))
    for n, index in enumerate(order):
        yield ("\n\n" + KNOWLEDGE_TITLE + "\n" if n == 0 else "\n\n") + persona.knowledge[index].format_map(
            facts
        )
    first = True
    while True:
        yield ("\n\n" + persona.directory_title + "\n" if first else "\n") + persona.directory(rng, facts)
        first = False


def system_prompt(persona: Persona, facts: Slots, rng: random.Random, words: int) -> str:
    """The system prompt of about `words` words (at most that many; "" for 0): see the module's doc."""
    if words <= 0:
        return ""
    pieces = prompt_pieces(persona, facts, rng)
    core = next(pieces)
    if word_count(core) >= words:
        return cut_words(core, words)
    out, total = [core], word_count(core)
    for piece in pieces:
        total += word_count(piece)
        if total > words:
            break
        out.append(piece)
    return "".join(out)


def greeting(greetings: Sequence[str], lengths: TextLengths) -> str:
    """The longest of `greetings` within `lengths.greeting` words before scaling (if none is, the
    shortest, cut to it), then shortened by the scale; "" for no greeting."""
    if lengths.greeting <= 0 or not greetings:
        return ""
    words = lengths.unscaled((lengths.greeting, lengths.greeting))[1]
    within = [g for g in greetings if word_count(g) <= words]
    chosen = max(within, key=word_count) if within else cut_words(min(greetings, key=word_count), words)
    return lengths.shorten(chosen)
