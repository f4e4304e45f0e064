"""What the calls of a voice plan say: a small protocol, and the word-list content behind it.

`plan_voice` decides when calls happen, to which agent, how many turns they have and how long the
answers may be; a `ConversationSource` decides the words. A source makes each agent
(`VoiceAgent`: its system prompt and greeting, the same for every call of that agent) and each
agent makes the script of a call (`CallScript`: the caller's utterance at each turn and the agent's
answer kept in the history). Two sources exist:

- `PersonaConversations` (`personas/`): real voice conversations in plain English, the default;
- `WordConversations` (here): any `TextSource`'s words at exactly the lengths the settings give (the
  built-in word list, or the model's corpus), as plans were before the personas.

Sources draw only from the `random.Random` streams they are handed, so plans stay reproducible.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from evertune.domain.workloads.text import TextSource


@dataclass(frozen=True)
class TextLengths:
    """The word budgets a voice plan's settings give its texts (see `VoiceWorkload`)."""

    system_prompt: int  #: words of a typical agent's system prompt (0 = none)
    greeting: int  #: words of the agent's greeting (0 = none); personas: at most this
    user: tuple[int, int]  #: words of a caller's utterance, both ends included
    reply: tuple[int, int]  #: words of an agent answer kept in the history, both ends included
    #: The factor these lengths were scaled by (`VoiceWorkload.text_scale`; they include it).
    scale: float = 1.0

    def unscaled(self, span: tuple[int, int]) -> tuple[int, int]:
        """`span` as it was before `scale` (widened to whole words)."""
        if self.scale == 1.0:
            return span
        return (math.floor(span[0] / self.scale), math.ceil(span[1] / self.scale))

    def shorten(self, text: str) -> str:
        """`text` cut to `scale` of its words (at least one); whole when `scale` >= 1."""
        if self.scale >= 1.0 or not text:
            return text
        return cut_words(text, max(1, round(word_count(text) * self.scale)))


class CallScript(Protocol):
    """What is said in one call, turn by turn (turns are 0-based)."""

    def caller(self, turn: int) -> str:
        """The caller's utterance at `turn` (the user message of that turn's request)."""
        ...

    def reply(self, turn: int) -> str:
        """The agent's answer to `turn`, kept in the history of the turns after it."""
        ...


class VoiceAgent(Protocol):
    """One agent of the endpoint: what every one of its calls starts with, and its calls."""

    @property
    def system_prompt(self) -> str:
        """The agent's system prompt, the same for every call ("" = none)."""
        ...

    @property
    def greeting(self) -> str:
        """The agent's opening line, the first assistant message of every call ("" = none)."""
        ...

    def call(self, turns: int, rng: random.Random) -> CallScript:
        """The script of a call of `turns` turns, drawn from `rng` (the call's own stream).

        The script may draw from `rng` as its turns are asked for, in the order `plan_voice` asks
        (caller of turn k, then the answer to it), so `rng` is the script's until the call is planned.
        """
        ...


class ConversationSource(Protocol):
    """Makes the agents of a voice plan."""

    def agent(self, index: int, rng: random.Random) -> VoiceAgent:
        """Agent `index` (0-based), drawn from `rng` (the agent's own stream)."""
        ...


def word_count(text: str) -> int:
    """Whitespace-separated words in `text`."""
    return len(text.split())


def cut_words(text: str, n: int) -> str:
    """The first `n` words of `text`, its own spacing kept (so the result is a prefix of `text`)."""
    if n <= 0:
        return ""
    ends = [match.end() for match in re.finditer(r"\S+", text)]
    return text if len(ends) <= n else text[: ends[n - 1]]


def fit(rng: random.Random, texts: Sequence[str], span: tuple[int, int]) -> str:
    """One of `texts` whose length in words lies in `span` (both ends included), chosen by `rng`;
    when none does, the one nearest to the span (the shorter on a tie), cut to its high end."""
    low, high = span
    fitting = [text for text in texts if low <= word_count(text) <= high]
    if fitting:
        return rng.choice(fitting)

    def distance(text: str) -> tuple[int, int]:
        n = word_count(text)
        return (low - n if n < low else n - high, n)

    return cut_words(min(texts, key=distance), high)


class WordConversations:
    """A `TextSource`'s words at exactly the lengths the settings give: a system prompt of
    `system_prompt` words and a greeting of `greeting` words per agent, callers' turns and answers
    of lengths drawn uniformly from their spans. Nothing is shared between calls but the agent's
    opening; the words mean nothing, which is what fast tests and the random-weight models want."""

    def __init__(self, text: TextSource, lengths: TextLengths) -> None:
        self._text = text
        self._lengths = lengths

    def agent(self, index: int, rng: random.Random) -> VoiceAgent:
        lengths = self._lengths
        prompt = self._text.words(rng, lengths.system_prompt) if lengths.system_prompt > 0 else ""
        greeting = self._text.words(rng, lengths.greeting) if lengths.greeting > 0 else ""
        return _WordAgent(system_prompt=prompt, greeting=greeting, text=self._text, lengths=lengths)


@dataclass(frozen=True)
class _WordAgent:
    """An agent of `WordConversations`."""

    system_prompt: str  #: its system prompt ("" = none)
    greeting: str  #: its greeting ("" = none)
    text: TextSource  #: where the words come from
    lengths: TextLengths  #: how many

    def call(self, turns: int, rng: random.Random) -> CallScript:
        return _WordScript(self.text, self.lengths, rng)


class _WordScript:
    """A call of `WordConversations`: each turn's words drawn from the call's stream when asked for."""

    def __init__(self, text: TextSource, lengths: TextLengths, rng: random.Random) -> None:
        self._text = text
        self._lengths = lengths
        self._rng = rng

    def caller(self, turn: int) -> str:
        return self._text.words(self._rng, self._rng.randint(*self._lengths.user))

    def reply(self, turn: int) -> str:
        return self._text.words(self._rng, self._rng.randint(*self._lengths.reply))
