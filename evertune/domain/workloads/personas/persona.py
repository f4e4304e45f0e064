"""What a persona is: the material one kind of voice agent is made of, as plain data.

A persona module (`clinic.py`, `airline.py`, ...) holds one `Persona`: the fixed core of its system
prompt, its knowledge-base entries, an endless supply of reference entries for longer prompts, its
greetings, and the flow of its calls as `Exchange`s (what a caller says, what the agent answers).
Texts are `str.format` templates over slots: an agent's business facts (drawn once per agent by
`facts`) and a call's own details (drawn once per call by `caller`: names, dates, numbers). How
these are put together into prompts and calls is `personas/source.py`'s business.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: Slot values by name, filled into templates with `str.format_map`.
Slots = Mapping[str, str]

#: How a voice agent speaks: shared by every persona's core (production prompts reuse such a block).
VOICE_STYLE = """# How you speak
Everything you say is turned into speech and played to the caller over the phone.
- Answer in one or two short sentences. Callers cannot skim, so say the most important thing first.
- Never use markdown, bullet points, emojis, headings or symbols. Do not read out web addresses \
unless asked.
- Say numbers the way a person says them: "nine thirty in the morning", "forty-five dollars", \
"Tuesday, March fourth". Read codes and phone numbers one character at a time.
- Ask one question at a time and wait for the answer. If the caller interrupts, stop and listen.
- If you did not understand, say so and ask them to repeat. Never guess at names, numbers or dates.
- Confirm every date, time, name and number back to the caller before you act on it.
- Be warm and plain. No filler like "great question". Do not repeat the caller's words back to them \
at length."""


@dataclass(frozen=True)
class Exchange:
    """One step of a call: the caller's turn and the agent's answer, each one of a few templates."""

    callers: tuple[str, ...]  #: what the caller may say (one is picked per call)
    replies: tuple[str, ...]  #: what the agent may answer (spoken style, numbers in words)


@dataclass(frozen=True)
class Intent:
    """One reason to call, as the steps such a call goes through."""

    opening: Exchange  #: the caller says why they call
    details: tuple[Exchange, ...]  #: the caller gives what the agent needs, in order (a call takes 1-2)
    confirm: Exchange  #: the agent reads the outcome back and the caller agrees
    #: Questions a caller with this reason may add (empty: the persona's `follow_ups`).
    follow_ups: tuple[Exchange, ...] = ()


@dataclass(frozen=True)
class Persona:
    """One kind of voice agent: its system prompt's parts, its greetings and its calls."""

    key: str  #: short name ("clinic"), for docs and tests
    #: Its system prompt's natural length relative to a typical agent's (`system_prompt_words`).
    relative_length: float
    #: An agent's business facts (name, address, hours, fees, staff), drawn once per agent.
    facts: Callable[[random.Random], dict[str, str]]
    #: The fixed part of the system prompt: role, speaking style, policies, facts, tools (a template).
    core: str
    #: Knowledge-base / FAQ entries (templates over the facts); an agent takes them in its own order.
    knowledge: tuple[str, ...]
    #: Heading of the reference entries that longer prompts add after the knowledge base.
    directory_title: str
    #: One more reference entry (a provider, a flight, a dish), drawn from the agent's stream: endless.
    directory: Callable[[random.Random, Slots], str]
    #: The agent's opening lines (templates over the facts), of different lengths.
    greetings: tuple[str, ...]
    #: A call's own slots (the caller's name, dates, numbers), drawn once per call, given the facts.
    caller: Callable[[random.Random, Slots], dict[str, str]]
    #: Reasons to call; each call has one.
    intents: tuple[Intent, ...]
    #: Questions a caller may add between the details and the confirmation (each once a call), for
    #: intents that name none of their own.
    follow_ups: tuple[Exchange, ...]
    #: Thanks and goodbye, the last turn of a call.
    closing: Exchange
