"""Traces shared with the project rather than kept in it, found in a `shared/traces/` folder:
beside the working folder (`../shared/traces/`, where the project's shared material sits next to a
checkout) or inside it, or in `EVERTUNE_SHARED_TRACES`. They are not package data: the Azure trace
is CC-BY material the project does not ship. Nothing downloads them: a test or a benchmark that
needs one skips or refuses, with the path it looked at, when it is not there.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The Azure LLM inference trace (coding, 2023): CSV of arrival time, context and generated tokens.
AZURE_CODE_2023 = "azure_llm_code_2023.csv"


def shared_trace(name: str) -> Path:
    """Where the shared trace `name` is: in `EVERTUNE_SHARED_TRACES` when set, else in
    `../shared/traces/` or `shared/traces/` of the working folder; the first of those places when
    none holds it."""
    if folder := os.environ.get("EVERTUNE_SHARED_TRACES"):
        return Path(folder) / name
    places = [base / "shared" / "traces" / name for base in (Path.cwd().parent, Path.cwd())]
    return next((path for path in places if path.exists()), places[0])
