"""Fixtures the security cases share with the suites of the parts they attack: the fake OpenAI
upstream (its own process) and the searcher's model folder."""

from __future__ import annotations

from tests.domain.replay.conftest import fake_url
from tests.reliability.conftest import tokenizer_dir
from tests.searcher.conftest import searcher_model_dir

__all__ = ["fake_url", "searcher_model_dir", "tokenizer_dir"]
