"""The first configuration's dtype: the faster of those timed on this CPU, on the model's shape."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from evertune.apps.demo.launch_dtype import (
    DtypeChoice,
    faster_dtype,
    layer_shape,
    measure_launch_dtype,
    time_linear_ms,
)
from evertune.errors import InvalidArgument


def test_the_faster_dtype_wins_and_a_tie_goes_to_the_one_listed_first() -> None:
    assert faster_dtype({"bfloat16": 50.1, "float32": 6.6}) == "float32"
    assert faster_dtype({"bfloat16": 3.0, "float32": 9.0}) == "bfloat16"
    assert faster_dtype({"bfloat16": 5.0, "float32": 5.0}) == "bfloat16"
    with pytest.raises(InvalidArgument):
        faster_dtype({})


def test_the_line_names_the_choice_and_every_figure() -> None:
    line = DtypeChoice(dtype="float32", linear_ms={"bfloat16": 50.1, "float32": 6.6}).line
    assert line.startswith("dtype float32,") and "bfloat16 50.1 ms vs float32 6.6 ms" in line


def test_an_unknown_dtype_is_refused_in_one_line() -> None:
    with pytest.raises(InvalidArgument, match="unknown dtype 'float33'"):
        time_linear_ms("float33", tokens=4, in_features=8, out_features=8)


def test_both_dtypes_are_timed_on_the_models_mlp_shape(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "intermediate_size": 192}))
    assert layer_shape(tmp_path) == (64, 192)
    choice = asyncio.run(measure_launch_dtype(("bfloat16", "float32"), model_dir=tmp_path))
    assert list(choice.linear_ms) == ["bfloat16", "float32"]
    assert all(ms > 0 for ms in choice.linear_ms.values())
    assert choice.dtype == min(choice.linear_ms, key=choice.linear_ms.__getitem__)
