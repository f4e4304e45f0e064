from evertune.apps.benchmarks.interleave import rotated


def test_each_repeat_starts_one_further_and_wraps() -> None:
    arms = ["a", "b", "c"]
    assert [rotated(arms, r) for r in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]


def test_every_position_is_held_by_each_item_once_over_a_cycle() -> None:
    arms = list(range(5))
    firsts = [rotated(arms, r)[0] for r in range(len(arms))]
    assert sorted(firsts) == arms


def test_nothing_to_rotate() -> None:
    assert rotated([], 3) == []
