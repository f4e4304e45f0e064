"""Traces shared with the project rather than kept in it (`shared/traces/`, beside the checkout or
inside it), resolved here, once, relative to the repository. Nothing downloads them: a test or a
benchmark that needs one skips or refuses, with the path it looked at, when it is not there.
"""

from __future__ import annotations

from pathlib import Path

from evertune.infra.repository import ROOT

#: The Azure LLM inference trace (coding, 2023): CSV of arrival time, context and generated tokens.
AZURE_CODE_2023 = "azure_llm_code_2023.csv"


def shared_trace(name: str) -> Path:
    """Where the shared trace `name` is: `../shared/traces/` beside the checkout, else
    `shared/traces/` inside it; the first of those when neither holds it."""
    places = [base / "shared" / "traces" / name for base in (ROOT.parent, ROOT)]
    return next((path for path in places if path.exists()), places[0])
