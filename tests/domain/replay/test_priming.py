"""Priming: which requests prime a plan (pure), and the client sending them before its clock starts."""

from __future__ import annotations

from evertune.domain.replay import replay
from evertune.domain.replay.priming import PRIMER_SUFFIX, primers
from evertune.domain.workloads.plan import ChatMessage, PlannedRequest, history

from .helpers import server_truth

SYSTEM = ChatMessage("system", "You are a voice agent.")


def _turn(conversation: str, turn: int, *, at_s: float, api: str = "chat") -> PlannedRequest:
    """Turn `turn` of a conversation: the system prompt, `turn` earlier exchanges, the new utterance."""
    earlier = [
        m
        for t in range(turn)
        for m in (ChatMessage("user", f"{conversation} says {t}"), ChatMessage("assistant", f"reply {t}"))
    ]
    said = ChatMessage("user", f"{conversation} says {turn}")
    return PlannedRequest(
        at_s=at_s,
        request_id=f"{conversation}-t{turn}",
        api="chat" if api == "chat" else "completions",
        max_tokens=8,
        messages=(SYSTEM, *earlier, said) if api == "chat" else (),
        prompt="" if api == "chat" else "Hello",
        conversation_id=conversation,
        turn=turn,
    )


def test_history_is_every_message_but_the_new_utterance_of_a_later_chat_turn() -> None:
    later = _turn("a", 2, at_s=0.0)
    assert history(later) == later.messages[:-1]
    assert history(later)[-1].role == "assistant"
    assert history(_turn("b", 0, at_s=0.0)) == ()
    assert history(_turn("c", 1, at_s=0.0, api="completions")) == ()


def test_primers_cover_each_conversation_under_way_once_in_due_order() -> None:
    plan = [
        _turn("late", 3, at_s=2.0),  # under way, first due second
        _turn("fresh", 0, at_s=0.5),  # starts in the plan: nothing to prime
        _turn("early", 1, at_s=1.0),  # under way, first due first
        _turn("early", 2, at_s=4.0),  # its later turn: primed already
        _turn("late", 4, at_s=5.0),
        _turn("text", 2, at_s=0.1, api="completions"),  # no messages to prime
        PlannedRequest(at_s=0.2, request_id="alone", api="chat", max_tokens=4, messages=(SYSTEM,), turn=1),
    ]
    pairs = primers(plan)
    assert [index for index, _ in pairs] == [2, 0]
    for index, primer in pairs:
        primed = plan[index]
        assert primer.request_id == primed.request_id + PRIMER_SUFFIX
        assert primer.messages == primed.messages[:-1]
        assert primer.max_tokens == 1
        assert primer.conversation_id == primed.conversation_id


async def test_primed_replay_sends_histories_first_to_each_conversations_target(
    fake_url: str, second_fake_url: str
) -> None:
    plan = [_turn(f"prm{i}", 1 + i % 2, at_s=0.05 * i) for i in range(4)] + [_turn("prm-new", 0, at_s=0.1)]
    plan += [_turn(f"prm{i}", 3, at_s=0.3 + 0.05 * i) for i in range(4)]
    sent: list[str] = []
    run = await replay(plan, target=[fake_url, second_fake_url], prime=True, on_sent=sent.append)
    assert (run.primed, run.prime_failed) == (4, 0)
    assert [r.request_id for r in run.results] == [r.request_id for r in plan]  # primers are not results
    assert all(r.ok for r in run.results)
    assert not any(s.endswith(PRIMER_SUFFIX) for s in sent)
    truths = {url: await server_truth(url) for url in (fake_url, second_fake_url)}
    arrivals = {k: t["arrived_at"] for truth in truths.values() for k, t in truth.items()}
    first_measured = min(arrivals[r.request_id] for r in plan)
    for primed in plan[:4]:
        primer_id = primed.request_id + PRIMER_SUFFIX
        target = next(r.target for r in run.results if r.request_id == primed.request_id)
        assert primer_id in truths[target], f"{primer_id} went to another target than its conversation"
        assert primer_id not in truths[second_fake_url if target == fake_url else fake_url]
        assert truths[target][primer_id]["max_tokens"] == 1
        assert truths[target][primer_id]["messages"] == len(primed.messages) - 1
        assert arrivals[primer_id] <= first_measured
    assert "prm-new-t0" + PRIMER_SUFFIX not in arrivals


async def test_unprimed_replay_sends_no_primer(fake_url: str) -> None:
    plan = [_turn("u0", 2, at_s=0.0), _turn("u1", 1, at_s=0.05)]
    run = await replay(plan, target=fake_url)
    assert (run.primed, run.prime_failed) == (0, 0)
    truth = await server_truth(fake_url)
    assert "u0-t2" in truth
    assert not any(k.startswith("u") and k.endswith(PRIMER_SUFFIX) for k in truth)
