"""`evertune bench gate`: its planted changes and its figures (pure; the run itself is the benchmark)."""

from __future__ import annotations

import json

from evertune.apps.benchmarks import BENCHMARKS, get_benchmark
from evertune.apps.benchmarks.gate import PLANTED, PlantedChange, change_result, counts, gate_figures
from evertune.domain.model.variants import BrokenScale, WeightNoise
from evertune.runner.gates import agreement
from evertune.runner.gates.correctness import logprob_closeness
from evertune.runner.golden import hash_answer


def test_bench_gate_is_registered_and_plants_harmful_and_harmless_changes() -> None:
    assert BENCHMARKS["gate"][0] == "evertune.apps.benchmarks.gate" and callable(get_benchmark("gate"))
    harmful = [c for c in PLANTED if c.harmful]
    harmless = [c for c in PLANTED if not c.harmful]
    assert len(harmful) >= 2 and len({type(c.variant) for c in harmful}) == 2
    assert {type(c.variant) for c in harmful} == {WeightNoise, BrokenScale}
    assert all(c.folder == "variant" and not c.knobs for c in harmful)
    # Two knob changes on the same folder (batching, block size) and the float32 folder (lossy).
    knobs = [c.knobs for c in harmless if c.folder == "bf16"]
    assert {"max_num_seqs": 4} in knobs and {"block_size": 32} in knobs
    assert any(c.folder == "fp32" and c.knobs == {"dtype": "float32"} for c in harmless)
    assert len({c.name for c in PLANTED}) == len(PLANTED)


def _compare(ref: list[list[int]], cand: list[list[int]]) -> tuple[object, object]:
    """Agreement and closeness of answers whose top-2 at each position is (token, 9), or (9, 2)
    where the token is 9: a 9 in place of a 2 is a broken near-tie."""

    def hashed(answers: list[list[int]]) -> tuple[list[list[int]], list[list[list[int]]]]:
        pairs = [hash_answer(ids, [[t, 2 if t == 9 else 9] for t in ids], key="k") for ids in answers]
        return [c for c, _ in pairs], [a for _, a in pairs]

    (rc, ra), (cc, ca) = hashed(ref), hashed(cand)
    return agreement(rc, cc), logprob_closeness(
        reference=rc, reference_alternatives=ra, candidate=cc, candidate_alternatives=ca
    )


def test_the_figures_count_verdicts_answers_and_wrong_verdicts() -> None:
    # 3 answers: one equal, one broken near-tie (9 is in each top-2), one far off.
    result, closeness = _compare([[1, 2, 3], [1, 2, 3], [1, 2, 3]], [[1, 2, 3], [1, 9, 3], [1, 7, 3]])
    assert counts(result, closeness) == (1, 1, 1)  # type: ignore[arg-type]
    assert counts(result, None) == (1, 0, 2)  # type: ignore[arg-type]
    same, same_close = _compare([[1, 2], [3, 4]], [[1, 2], [3, 4]])
    tie, tie_close = _compare([[1, 2], [3, 2]], [[1, 2], [3, 9]])

    def made(
        name: str,
        harmful: bool,
        passed: bool,
        lossless: bool,
        compared: tuple[object, object],
        status: str = "ok",
    ) -> object:
        return change_result(
            PlantedChange(name, harmful, name), status=status, passed=passed, value=0.5, detail="d",
            lossless=lossless, agreement=compared[0], closeness=compared[1],  # type: ignore[arg-type]
            startup_s=30.04, golden_s=12.0,
        )  # fmt: skip

    results = [
        made("batching", False, True, True, (same, same_close)),  # exact
        made("blocks", False, True, True, (tie, tie_close)),  # top-k close only
        made("fp32", False, False, False, (result, closeness)),  # harmless failed: a false fail
        made("noise", True, True, False, (result, closeness)),  # harmful passed: a false pass
        made("scale", True, False, False, (result, closeness)),  # right
        made("crashed", True, False, False, (None, None), status="error"),
    ]
    figures = gate_figures(results, reference_lengths=[60, 12, 30], max_tokens=60)  # type: ignore[arg-type]
    assert (figures["false_pass"], figures["false_fail"], figures["errors"]) == (1, 1, 1)
    assert (figures["harmful"], figures["harmless"]) == (3, 3)
    assert (figures["lossless_changes_exact"], figures["lossless_changes_close_only"]) == (1, 1)
    assert (figures["lossless_answers_exact"], figures["lossless_answers_close_only"]) == (3, 1)
    assert figures["lossless_answers_differing"] == 0
    assert (
        figures["reference_answers_ended_by_model"] == 2 and figures["reference_answer_tokens_mean"] == 34.0
    )
    changes = figures["changes"]
    assert list(changes) == ["batching", "blocks", "fp32", "noise", "scale", "crashed"]
    assert changes["noise"]["verdict"] == "pass" and not changes["noise"]["correct"]
    assert changes["scale"]["verdict"] == "fail" and changes["scale"]["correct"]
    assert changes["crashed"]["verdict"] == "error" and changes["crashed"]["prompts"] == 0
    assert changes["fp32"] | {"detail": ""} == {
        "harmful": False, "lossless": False, "verdict": "fail", "correct": False, "value": 0.5,
        "agreement": round(result.share, 3), "prompts": 3, "exact": 1, "close_only": 1, "differing": 1,  # type: ignore[attr-defined]
        "startup_s": 30.0, "golden_s": 12.0, "detail": "",
    }  # fmt: skip
    json.dumps(figures)  # one JSON object, as `bench --json` prints it
