"""Completion logprobs of both forms engines write, read into one."""

from __future__ import annotations

import pytest

from evertune.domain.engines.logprobs import Position, completion_logprobs, completion_token_ids
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


def test_token_ids_of_both_forms() -> None:
    vllm = {
        "logprobs": {
            "tokens": ["token_id:57", "token_id:2"],
            "token_logprobs": [-0.1, -0.2],
            "top_logprobs": [{"token_id:9": -3.0, "token_id:57": -0.1}, {"token_id:2": -0.2}],
        }
    }
    llama_cpp = {
        "logprobs": {
            "content": [
                {
                    "id": 57,
                    "token": "I",
                    "logprob": -0.1,
                    "top_logprobs": [{"id": 9, "logprob": -3.0}, {"id": 57, "logprob": -0.1}],
                },
                {"id": 2, "token": "", "logprob": -0.2, "top_logprobs": [{"id": 2, "logprob": -0.2}]},
            ]
        }
    }
    expected = ([57, 2], [[57, 9], [2]])
    assert completion_token_ids(vllm) == expected and completion_token_ids(llama_cpp) == expected


def test_token_ids_need_ids_in_the_logprobs() -> None:
    with pytest.raises(InvalidArgument, match="text"):
        completion_token_ids({"logprobs": {"tokens": [" at"], "token_logprobs": [-0.1]}})
    with pytest.raises(InvalidArgument, match="no logprobs"):
        completion_token_ids({"logprobs": None})
