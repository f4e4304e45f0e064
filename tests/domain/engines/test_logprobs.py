"""Completion logprobs of both forms engines write, read into one."""

from __future__ import annotations

import pytest

from evertune.domain.engines.logprobs import Position, completion_logprobs
from evertune.errors import InvalidArgument

EXPECTED = [
    Position(token=" at", logprob=-0.1, top=((" at", -0.1), (" on", -2.5))),
    Position(token=" nine", logprob=-0.3, top=((" nine", -0.3), (" ten", -1.9))),
]


def test_the_legacy_completions_form_of_vllm() -> None:
    choice = {
        "logprobs": {
            "tokens": [" at", " nine"],
            "token_logprobs": [-0.1, -0.3],
            "top_logprobs": [{" on": -2.5, " at": -0.1}, {" nine": -0.3, " ten": -1.9}],
        }
    }
    assert completion_logprobs(choice) == EXPECTED


def test_the_chat_form_of_llama_cpp() -> None:
    def entry(token: str, logprob: float, top: list[tuple[str, float]]) -> dict[str, object]:
        alts = [{"id": 7, "token": t, "bytes": [], "logprob": lp} for t, lp in top]
        return {"id": 7, "token": token, "bytes": [], "logprob": logprob, "top_logprobs": alts}

    choice = {
        "logprobs": {
            "content": [
                entry(" at", -0.1, [(" on", -2.5), (" at", -0.1)]),
                entry(" nine", -0.3, [(" nine", -0.3), (" ten", -1.9)]),
            ]
        }
    }
    assert completion_logprobs(choice) == EXPECTED


def test_no_logprobs_is_empty_and_an_unknown_form_is_refused() -> None:
    assert completion_logprobs({"logprobs": None}) == [] and completion_logprobs({}) == []
    with pytest.raises(InvalidArgument, match="unknown form"):
        completion_logprobs({"logprobs": {"values": [1]}})
