"""evertune's generated English: varied, English-like sentences from a seed, and texts of exact length.

Everything here is made locally and deterministically from a `random.Random`: the same seed gives
the same text, on every machine and Python version (only `random()` and `randrange` of
`random.Random` are used, which Python keeps stable).

The words come from `evertune.domain.model.words` (a hand-written list of common English words grouped by
part of speech); a small grammar combines them into statements, questions, instructions, sentences
with numbers (order numbers, prices, times, dates) and compound sentences. evertune's tokenizer is
trained on this corpus, so ordinary generated text tokenizes at a steady rate (see docs/model.md
for the measured tokens per word).

Public:
- `sentence(rng)`, `sentences(rng, n)`: general sentences (system prompts, history, documents);
- `instruction(rng)`: a rule for an agent ("Always confirm the order number before ...");
- `utterance(rng)`: a short spoken turn by a caller ("Yes, can you move my appointment to Friday?");
- `text_of_tokens(tokenizer, n_tokens, rng)`: text that encodes to exactly `n_tokens` tokens.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence

from tokenizers import Tokenizer

from evertune.domain.model import words as w
from evertune.errors import InvalidArgument

# ---------------------------------------------------------------------------------------------
# Inflection


def plural(noun: str) -> str:
    """The plural of a countable noun ("box" -> "boxes", "city" -> "cities", "child" -> "children")."""
    if noun in w.IRREGULAR_PLURALS:
        return w.IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def third_person(verb: str) -> str:
    """The present third person singular ("fix" -> "fixes", "try" -> "tries")."""
    if verb.endswith(("s", "x", "z", "ch", "sh", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _regular_ed(verb: str) -> str:
    if verb in w.DOUBLING_VERBS:
        return verb + verb[-1] + "ed"
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ied"
    return verb + "ed"


def past(verb: str) -> str:
    """The simple past ("book" -> "booked", "send" -> "sent")."""
    if verb in w.IRREGULAR_VERBS:
        return w.IRREGULAR_VERBS[verb][0]
    return _regular_ed(verb)


def participle(verb: str) -> str:
    """The past participle ("book" -> "booked", "take" -> "taken")."""
    if verb in w.IRREGULAR_VERBS:
        return w.IRREGULAR_VERBS[verb][1]
    return _regular_ed(verb)


def gerund(verb: str) -> str:
    """The -ing form ("make" -> "making", "stop" -> "stopping", "see" -> "seeing")."""
    if verb in w.DOUBLING_VERBS:
        return verb + verb[-1] + "ing"
    if verb.endswith("e") and not verb.endswith(("ee", "ye", "oe")):
        return verb[:-1] + "ing"
    return verb + "ing"


def adverb_of(adjective: str) -> str:
    """The -ly adverb of an adjective ("quick" -> "quickly", "easy" -> "easily", "simple" -> "simply")."""
    if adjective.endswith("y") and adjective not in ("shy", "sly"):
        return adjective[:-1] + "ily"
    if adjective.endswith("le"):
        return adjective[:-1] + "y"
    if adjective == "public":
        return "publicly"
    if adjective.endswith("ic"):
        return adjective + "ally"
    if adjective.endswith("ll"):
        return adjective + "y"
    return adjective + "ly"


def _graded(adjective: str, suffix: str) -> str:
    if adjective in ("big", "hot", "wet", "sad"):
        return adjective + adjective[-1] + suffix
    if adjective.endswith("e"):
        return adjective + suffix[1:]
    if adjective.endswith("y") and adjective[-2:-1] not in "aeiou":
        return adjective[:-1] + "i" + suffix
    return adjective + suffix


def comparative(adjective: str) -> str:
    """The -er form of a short adjective ("cheap" -> "cheaper", "big" -> "bigger", "easy" -> "easier")."""
    return _graded(adjective, "er")


def superlative(adjective: str) -> str:
    """The -est form of a short adjective ("cheap" -> "cheapest", "safe" -> "safest")."""
    return _graded(adjective, "est")


# ---------------------------------------------------------------------------------------------
# Phrases

_MASS_DETERMINERS = ("the", "my", "your", "our", "some", "more")
_TAG_WORDS = ("right", "correct", "yes")
_AMOUNTS = ("total", "fee", "price", "balance", "refund", "deposit")
_WHEN_PREPOSITIONS = ("at", "by", "before", "after", "on")
_RULE_MODALS = ("must", "should", "can", "may")
_WANTS = ("want to", "need to", "would like to", "have to")


def _pick(rng: random.Random, options: Sequence[str]) -> str:
    return options[rng.randrange(len(options))]


def _number(rng: random.Random) -> str:
    """A number as a caller or agent would say it: a count, an order number, a price, a time, a date."""
    kind = rng.randrange(8)
    if kind == 0:
        return str(rng.randrange(2, 60))
    if kind == 1:
        return str(rng.randrange(1000, 99999))
    if kind == 2:
        return f"${rng.randrange(5, 500)}.{rng.randrange(100):02d}"
    if kind == 3:
        return f"{rng.randrange(1, 13)}:{_pick(rng, ('00', '15', '30', '45'))} {_pick(rng, ('am', 'pm'))}"
    if kind == 4:
        return f"{_pick(rng, w.MONTHS)} {rng.randrange(1, 29)}"
    if kind == 5:
        return f"{rng.randrange(10, 100)} percent"
    if kind == 6:
        return str(rng.randrange(100, 1000))
    return f"{rng.randrange(1, 10)} {_pick(rng, ('days', 'hours', 'minutes', 'weeks'))}"


def _noun_phrase(rng: random.Random) -> tuple[str, bool]:
    """A noun phrase and whether it is singular (for verb agreement)."""
    kind = rng.randrange(10)
    adjective = _pick(rng, w.ADJECTIVES) + " " if rng.random() < 0.35 else ""
    if kind <= 5:
        return f"{_pick(rng, w.SINGULAR_DETERMINERS)} {adjective}{_pick(rng, w.NOUNS)}", True
    if kind <= 7:
        return f"{_pick(rng, w.PLURAL_DETERMINERS)} {adjective}{plural(_pick(rng, w.NOUNS))}", False
    if kind == 8:
        return f"{_pick(rng, _MASS_DETERMINERS)} {adjective}{_pick(rng, w.MASS_NOUNS)}", True
    if rng.random() < 0.5:
        owner = _pick(rng, w.NAMES) if rng.random() < 0.5 else "the " + _pick(rng, w.NOUNS)
        return f"{owner}'s {adjective}{_pick(rng, w.NOUNS)}", True
    return _pick(rng, w.NAMES), True


def _adjective_phrase(rng: random.Random) -> str:
    """An adjective as a predicate: plain, graded ("a bit slower than ..."), or negated ("unavailable")."""
    kind = rng.randrange(6)
    if kind <= 1:
        return _pick(rng, w.ADJECTIVES)
    if kind == 2:
        return f"{_pick(rng, w.DEGREE_WORDS)} {_pick(rng, w.ADJECTIVES)}"
    if kind == 3:
        return f"{comparative(_pick(rng, w.COMPARABLE_ADJECTIVES))} than {_noun_phrase(rng)[0]}"
    if kind == 4:
        return "un" + _pick(rng, w.UN_ADJECTIVES)
    best = superlative(_pick(rng, w.COMPARABLE_ADJECTIVES))
    return f"the {best} {_pick(rng, w.NOUNS)} {_place_or_time(rng)}"


def _object(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return _pick(rng, w.OBJECT_PRONOUNS)
    return _noun_phrase(rng)[0]


def _subject(rng: random.Random) -> tuple[str, bool]:
    """A subject and whether its present verb takes -s."""
    if rng.random() < 0.45:
        return w.SUBJECT_PRONOUNS[rng.randrange(len(w.SUBJECT_PRONOUNS))]
    return _noun_phrase(rng)


def _place_or_time(rng: random.Random) -> str:
    """A trailing phrase: a prepositional phrase, a day, a place, a time or an adverb."""
    kind = rng.randrange(7)
    if kind <= 2:
        return f"{_pick(rng, w.PREPOSITIONS)} {_noun_phrase(rng)[0]}"
    if kind == 3:
        return f"on {_pick(rng, w.DAYS)}"
    if kind == 4:
        return f"{_pick(rng, ('in', 'to', 'from', 'near'))} {_pick(rng, w.PLACES)}"
    if kind == 5:
        return f"{_pick(rng, ('at', 'by', 'before', 'after'))} {_number(rng)}"
    return _pick(rng, w.ADVERBS)


def _predicate(rng: random.Random, singular: bool) -> str:
    """A verb phrase in a random tense, agreeing with the subject."""
    transitive = rng.random() < 0.8
    verb = _pick(rng, w.VERBS if transitive else w.INTRANSITIVE_VERBS)
    tense = rng.randrange(8)
    if tense <= 1:
        form = third_person(verb) if singular else verb
        if rng.random() < 0.2:
            form = f"{_pick(rng, w.FREQUENCY_ADVERBS)} {form}"
    elif tense <= 3:
        form = past(verb)
    elif tense == 4:
        form = f"{_pick(rng, w.MODALS)} {verb}"
    elif tense == 5:
        form = f"{'is' if singular else 'are'} {gerund(verb)}"
    elif tense == 6:
        form = f"{'has' if singular else 'have'} {participle(verb)}"
    else:
        form = f"{_pick(rng, ('did not', 'will not', 'cannot', 'does not' if singular else 'do not'))} {verb}"
    phrase = f"{form} {_object(rng)}" if transitive else form
    if rng.random() < 0.2:
        phrase += " " + adverb_of(_pick(rng, w.LY_ADJECTIVES))
    if rng.random() < 0.6:
        phrase += " " + _place_or_time(rng)
    return phrase


def _clause(rng: random.Random) -> str:
    subject, singular = _subject(rng)
    if subject == "I":
        singular = False
    return f"{subject} {_predicate(rng, singular)}"


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


# ---------------------------------------------------------------------------------------------
# Sentences


def _statement(rng: random.Random) -> str:
    return _capitalize(_clause(rng)) + "."


def _description(rng: random.Random) -> str:
    """ "The delivery was a bit slower than the last one." """
    subject, singular = _subject(rng)
    if subject in ("I", "you", "we", "they"):
        singular = subject == "I" and rng.random() < 0.5
    present_s, present_p, past_s, past_p = w.LINKING_VERBS[rng.randrange(len(w.LINKING_VERBS))]
    if subject == "I" and present_s == "is":
        verb = _pick(rng, ("am", "was"))
    elif rng.random() < 0.5:
        verb = present_s if singular else present_p
    else:
        verb = past_s if singular or subject == "I" else past_p
    tail = f" {_place_or_time(rng)}" if rng.random() < 0.3 else ""
    return f"{_capitalize(subject)} {verb} {_adjective_phrase(rng)}{tail}."


def _compound(rng: random.Random) -> str:
    return f"{_capitalize(_clause(rng))}{_pick(rng, (',', ''))} {_pick(rng, w.CONJUNCTIONS)} {_clause(rng)}."


def _question(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        who = _pick(rng, ("you", "we", "I", "they"))
        tail = f" {_place_or_time(rng)}" if rng.random() < 0.5 else ""
        return f"{_capitalize(_pick(rng, w.MODALS))} {who} {_pick(rng, w.VERBS)} {_object(rng)}{tail}?"
    if kind == 1:
        subject, singular = _subject(rng)
        aux = "Does" if singular and subject != "I" else "Do"
        return f"{aux} {subject} {_pick(rng, w.VERBS)} {_object(rng)}?"
    if kind == 2:
        noun, singular = _noun_phrase(rng)
        return f"{_capitalize(_pick(rng, w.QUESTION_WORDS))} {'is' if singular else 'are'} {noun}?"
    if kind == 3:
        subject, singular = _subject(rng)
        aux = "did" if rng.random() < 0.5 else ("does" if singular and subject != "I" else "do")
        asking = _capitalize(_pick(rng, w.QUESTION_WORDS))
        return f"{asking} {aux} {subject} {_pick(rng, w.VERBS)} {_object(rng)}?"
    noun, singular = _noun_phrase(rng)
    verb = "is" if singular else "are"
    return f"{_capitalize(noun)} {verb} {_pick(rng, w.ADJECTIVES)}, {_pick(rng, _TAG_WORDS)}?"


def _with_number(rng: random.Random) -> str:
    noun = _pick(rng, w.NOUNS)
    kind = rng.randrange(4)
    if kind == 0:
        owner = _capitalize(_pick(rng, ("your", "my", "the", "our")))
        return f"{owner} {noun} number is {rng.randrange(1000, 999999)}."
    if kind == 1:
        return f"The {_pick(rng, _AMOUNTS)} is {_number(rng)}."
    if kind == 2:
        return f"{_capitalize(_clause(rng))} {_pick(rng, _WHEN_PREPOSITIONS)} {_number(rng)}."
    return f"We have {rng.randrange(2, 40)} {plural(noun)} {_place_or_time(rng)}."


def instruction(rng: random.Random) -> str:
    """One rule for an agent, as a system prompt states it ("Always confirm the order ... .")."""
    verb = _pick(rng, w.VERBS)
    kind = rng.randrange(5)
    if kind == 0:
        start = _pick(rng, ("Always", "Never", "Please", "Do not", "Politely", "First,"))
        return f"{start} {verb} {_object(rng)} {_place_or_time(rng)}."
    if kind == 1:
        return (
            f"{_capitalize(_pick(rng, ('before', 'after', 'when', 'if', 'unless')))} {_clause(rng)}, "
            f"{verb} {_object(rng)}."
        )
    if kind == 2:
        return f"If the caller asks about {_noun_phrase(rng)[0]}, {verb} {_object(rng)} and {_clause(rng)}."
    if kind == 3:
        return f"You {_pick(rng, _RULE_MODALS)} {verb} {_object(rng)} {_place_or_time(rng)}."
    first, second = _pick(rng, w.ADJECTIVES), _pick(rng, w.ADJECTIVES)
    return f"Keep every answer {first} and {second}, and {verb} {_object(rng)}."


def utterance(rng: random.Random) -> str:
    """A short spoken turn by a caller: one or two short sentences, often opened by "Yes," or "Okay,"."""
    opener = f"{_pick(rng, w.INTERJECTIONS)}, " if rng.random() < 0.5 else ""
    kind = rng.randrange(5)
    if kind == 0:
        body = _question(rng)
    elif kind == 1:
        body = f"I {_pick(rng, _WANTS)} {_pick(rng, w.VERBS)} {_object(rng)}."
    elif kind == 2:
        body = _statement(rng)
    elif kind == 3:
        body = _with_number(rng)
    else:
        body = _description(rng)
    first_word = body.split(" ", 1)[0].removesuffix("'s")
    if opener and first_word != "I" and first_word not in w.NAMES:
        body = body[:1].lower() + body[1:]
    return opener + body


_KINDS: tuple[tuple[float, Callable[[random.Random], str]], ...] = (
    (0.24, _statement),
    (0.10, _description),
    (0.18, _compound),
    (0.16, _question),
    (0.12, instruction),
    (0.12, _with_number),
    (0.08, utterance),
)


def sentence(rng: random.Random) -> str:
    """One English-like sentence: a statement, compound sentence, question, instruction or number."""
    draw = rng.random()
    for share, make in _KINDS:
        if draw < share:
            return make(rng)
        draw -= share
    return _statement(rng)


def sentences(rng: random.Random, n: int) -> list[str]:
    """`n` sentences, each from `sentence(rng)`. Join them with a space to make a paragraph."""
    return [sentence(rng) for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# Text of an exact token count


def _piece_tokens(tokenizer: Tokenizer, text: str) -> list[tuple[str, int]]:
    """`text` cut where the tokenizer's pre-tokenizer cuts it, each piece with its token count.

    Byte-level BPE never merges across those cuts, so the tokens of a concatenation of whole pieces
    are the sum of the pieces' tokens. Each token is given to the piece its first character is in.
    """
    pre = tokenizer.pre_tokenizer
    if pre is None:
        raise InvalidArgument("the tokenizer has no pre-tokenizer; text_of_tokens needs a byte-level BPE")
    spans = [span for _, span in pre.pre_tokenize_str(text)]
    starts = [start for start, _ in spans]
    counts = [0] * len(spans)
    for start, _ in tokenizer.encode(text, add_special_tokens=False).offsets:
        counts[max(0, bisect.bisect_right(starts, start) - 1)] += 1
    return [(text[a:b], count) for (a, b), count in zip(spans, counts, strict=True)]


def _one_token_words(tokenizer: Tokenizer, *, leading_space: bool) -> list[str]:
    """Words that are one token each (with a leading space, or without), to fill the last few tokens."""
    words = [(" " if leading_space else "") + x for x in (*w.NOUNS, *w.VERBS, *w.ADJECTIVES)]
    encodings = tokenizer.encode_batch(words, add_special_tokens=False)
    found = [word for word, enc in zip(words, encodings, strict=True) if len(enc.ids) == 1]
    if not found:
        raise InvalidArgument("the tokenizer has no one-token words; text_of_tokens needs evertune's")
    return found


def text_of_tokens(tokenizer: Tokenizer, n_tokens: int, rng: random.Random) -> str:
    """Generated text (whole sentences, the last one cut short) that encodes to exactly `n_tokens`.

    Counted as `count_tokens(tokenizer, text)` does: no special tokens added. Works for any byte-level
    BPE tokenizer whose pre-tokenizer splits words from the spaces before them (evertune's does). The
    text never starts or ends with a space, so it can go anywhere a message's content goes.
    """
    if n_tokens < 0:
        raise InvalidArgument(f"n_tokens must be >= 0, got {n_tokens}")
    pieces: list[str] = []
    counts: list[int] = []
    full = False
    while sum(counts) < n_tokens and not full:
        paragraph = (" " if pieces else "") + " ".join(sentences(rng, 8))
        for piece, count in _piece_tokens(tokenizer, paragraph):
            if sum(counts) + count > n_tokens:
                full = True
                break
            pieces.append(piece)
            counts.append(count)
    # A pre-tokenizer that splits digits one by one (SmolLM2's) leaves the space before a number as
    # a piece of its own: the text must not end with it.
    while pieces and not pieces[-1].strip():
        pieces.pop()
        counts.pop()
    have = sum(counts)
    if have < n_tokens:
        fillers = _one_token_words(tokenizer, leading_space=bool(pieces))
        pieces.append(_pick(rng, fillers))
        have += 1
    if have < n_tokens:
        fillers = _one_token_words(tokenizer, leading_space=True)
        pieces.extend(_pick(rng, fillers) for _ in range(n_tokens - have))
    text = "".join(pieces)
    got = len(tokenizer.encode(text, add_special_tokens=False).ids)
    if got != n_tokens or text != text.strip():
        raise InvalidArgument(
            f"text_of_tokens made {got} tokens, not {n_tokens}: the tokenizer is not additive"
        )
    return text
