"""Where workload text comes from: a small protocol, and a built-in word list that needs nothing.

A plan needs text of a given length: a system prompt of ~800 words, a user utterance of 12 words.
`TextSource` makes text of a number of words; `MakeText` makes text of a number of tokens (for trace
replay, where the trace states token counts). The model package can plug in a source that knows a
tokenizer; `WordListText` is the built-in default: English-like sentences drawn from a fixed list of
customer-service words. Only the seeded `random.Random` passed in decides what comes out.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Protocol

from evertune.domain.workloads.errors import WorkloadError

#: Text of `n_tokens` tokens for the target's tokenizer, drawn from `rng`: `make_text(n_tokens, rng)`.
MakeText = Callable[[int, random.Random], str]


class TextSource(Protocol):
    """Makes text of an exact number of whitespace-separated words."""

    def words(self, rng: random.Random, n: int) -> str:
        """`n` words (no leading or trailing whitespace; "" for n <= 0), drawn from `rng` only."""
        ...


#: The built-in vocabulary: what a voice agent's prompts and calls talk about, plus function words.
DEFAULT_WORDS: tuple[str, ...] = tuple(
    """
    the a an and or but if when then so because while after before until as of to in on at by for
    with from about into over under between through during without within again also only just very
    more most less some any each every all both either neither other another such same own this that
    these those here there now today tomorrow yesterday always never often usually sometimes please
    thank you we they it he she i me my your our their his her its us them who what which where why how
    can could will would should may might must do does did have has had is are was were be been being
    get got make made take took give gave keep kept let help helped call called ask asked tell told
    say said check checked confirm confirmed change changed cancel cancelled book booked move moved
    pay paid send sent receive received update updated transfer transferred verify verified explain
    explained understand understood need needed want wanted know knew find found look looked wait
    waited hold held schedule scheduled reschedule speak spoke hear heard repeat repeated offer offered
    account accounts balance payment payments invoice invoices bill billing charge charges refund
    refunds fee fees card cards bank transaction order orders delivery deliveries package parcel
    shipment address street city code number phone email message name date time morning afternoon
    evening week month year appointment appointments booking reservation flight ticket seat hotel room
    doctor clinic visit prescription pharmacy insurance policy claim claims coverage plan plans
    subscription service services product products device internet connection router signal outage
    technician support agent customer customers caller manager team office store branch location
    request requests issue issues problem problems question questions answer answers reason details
    information record records note notes status history reference identity password security code
    rule rules step steps option options choice choices minute minutes hour hours day days business
    weekday weekend holiday policy terms price prices discount offer quote estimate total amount
    dollars credit debit limit due overdue late early soon quickly carefully clearly politely briefly
    calmly correct incorrect available unavailable open closed new old current previous next last first
    second final short long full partial free extra standard premium basic simple clear polite friendly
    helpful patient professional warm concise natural spoken written personal private secure safe
    urgent important possible necessary ready sure sorry happy glad welcome fine good great right
    wrong yes no okay always avoid never mention describe summarize remember collect ask politely
    transfer escalate apologize greet introduce close end begin start continue stop pause listen
    respond reply answer spell read say
    """.split()
)


class WordListText:
    """English-like sentences from a word list: each sentence 5-16 words, capitalised, with a full stop."""

    def __init__(self, vocabulary: Sequence[str] = DEFAULT_WORDS) -> None:
        if not vocabulary:
            raise WorkloadError("a word list needs at least one word")
        self._vocabulary = tuple(vocabulary)

    def words(self, rng: random.Random, n: int) -> str:
        out: list[str] = []
        while len(out) < n:
            length = min(rng.randint(5, 16), n - len(out))
            sentence = rng.choices(self._vocabulary, k=length)
            sentence[0] = sentence[0].capitalize()
            sentence[-1] += "."
            out.extend(sentence)
        return " ".join(out)


def words_as_tokens(source: TextSource, *, tokens_per_word: float = 1.3) -> MakeText:
    """A `MakeText` that only approximates: `n_tokens / tokens_per_word` words (at least one).

    For plans made without the target's tokenizer (tests, dry runs). Where exact token counts matter,
    pass the model package's tokenizer-backed `make_text` instead.
    """
    if tokens_per_word <= 0:
        raise WorkloadError(f"tokens_per_word must be positive, not {tokens_per_word}")

    def make_text(n_tokens: int, rng: random.Random) -> str:
        return source.words(rng, max(1, round(n_tokens / tokens_per_word)) if n_tokens > 0 else 0)

    return make_text
