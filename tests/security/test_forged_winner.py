"""A search.completed forged on the bus is not rolled out (hole 5 of the security issue): the
deployer reads the search and its winning trial back from the store, and acts only when they
confirm the event. The full path (a forged event beside a stored one, on a running deployer) is
`tests/deployer/test_progressive.py::test_search_winners_roll_out_under_policy_auto_only`."""

from __future__ import annotations

import pytest

from evertune.deployer.winner_check import StoredSearch, StoredTrial, winner_refusal
from evertune.v1 import endpoint_pb2, events_pb2

MODEL = "/models/voice"
CONFIG = endpoint_pb2.EngineConfig(engine="vllm", max_num_seqs=8, kv_cache_space_gib=2.0)
DONE = events_pb2.SearchCompleted(search_id="s1", winner_trial_id="t1", winner=CONFIG, verified=True)
UID = "ep-0123456789abcdef01234567"
SEARCH = StoredSearch(endpoint="voice", endpoint_uid=UID, outcome="winner")
MEASURED = endpoint_pb2.EngineConfig(engine="vllm", model=MODEL, max_num_seqs=8, kv_cache_space_gib=2.0)
TRIAL = StoredTrial(
    endpoint="voice",
    completed=events_pb2.TrialCompleted(search_id="s1", trial_id="t1", engine_config=MEASURED, passed=True),
    simulated=False,
)


def _refusal(
    *,
    done: events_pb2.SearchCompleted = DONE,
    search: StoredSearch | None = SEARCH,
    trial: StoredTrial | None = TRIAL,
    pool: str = "cpu",
) -> str:
    return winner_refusal(
        endpoint="voice", endpoint_uid=UID, model=MODEL, pool=pool, done=done, search=search, trial=trial
    )


def test_a_winner_the_store_confirms_passes() -> None:
    assert _refusal() == ""
    sim_measured = endpoint_pb2.EngineConfig()
    sim_measured.CopyFrom(MEASURED)
    sim_measured.engine = "sim"  # a simulated runner runs the sim engine: not a knob
    simulated = StoredTrial(
        endpoint="voice",
        completed=events_pb2.TrialCompleted(
            search_id="s1", trial_id="t1", engine_config=sim_measured, passed=True
        ),
        simulated=True,
    )
    assert _refusal(trial=simulated, pool="sim-cpu") == ""
    assert (
        _refusal(done=events_pb2.SearchCompleted(search_id="s1", winner=CONFIG), trial=None, pool="sim-cpu")
        == ""
    )


def _other_trial(**changes: object) -> StoredTrial:
    completed = events_pb2.TrialCompleted()
    completed.CopyFrom(TRIAL.completed)
    fields = {"endpoint": TRIAL.endpoint, "simulated": TRIAL.simulated}
    for name, value in changes.items():
        if name in fields:
            fields[name] = value
        elif name == "max_num_seqs":
            completed.engine_config.max_num_seqs = value  # type: ignore[assignment]
        else:
            setattr(completed, name, value)
    return StoredTrial(completed=completed, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("case", "kwargs", "reason"),
    [
        ("no search row", {"search": None}, "not in the store"),
        (
            "another endpoint's search",
            {"search": StoredSearch("billing", UID, "winner")},
            "belongs to endpoint",
        ),
        (
            "a search of the name's earlier endpoint",
            {"search": StoredSearch("voice", "ep-ffffffffffffffffffffffff", "winner")},
            "earlier endpoint named 'voice'",
        ),
        (
            "a search stored before endpoints had ids",
            {"search": StoredSearch("voice", "", "winner")},
            "earlier endpoint named 'voice'",
        ),
        (
            "a search that found nothing",
            {"search": StoredSearch("voice", UID, "no_improvement")},
            "not with a winner",
        ),
        ("no trial row", {"trial": None}, "trial t1 is not in the store"),
        ("another search's trial", {"trial": _other_trial(search_id="s9")}, "another search or endpoint"),
        (
            "another endpoint's trial",
            {"trial": _other_trial(endpoint="billing")},
            "another search or endpoint",
        ),
        ("a trial that failed its gates", {"trial": _other_trial(passed=False)}, "did not pass its gates"),
        ("a simulated trial on hardware", {"trial": _other_trial(simulated=True)}, "was simulated"),
        ("another configuration", {"trial": _other_trial(max_num_seqs=256)}, "another configuration"),
        (
            "no trial on hardware",
            {"done": events_pb2.SearchCompleted(search_id="s1", winner=CONFIG)},
            "names no trial",
        ),
    ],
)
def test_what_the_store_does_not_confirm_is_refused(
    case: str, kwargs: dict[str, object], reason: str
) -> None:
    assert reason in _refusal(**kwargs), case  # type: ignore[arg-type]


def test_a_winner_naming_another_model_is_refused() -> None:
    forged = events_pb2.SearchCompleted()
    forged.CopyFrom(DONE)
    forged.winner.model = "/models/other-tenant"  # the trial row is real; the event's model is not
    assert "not the endpoint's model" in _refusal(done=forged)
