"""The checkout the tests run from: its root, and its `infra/` (what evertune itself reads as
package data, `evertune.infra.package_data`; tests also read the checkout's docs and sources)."""

from __future__ import annotations

from pathlib import Path

#: The checkout's root: the folder that holds `tests/`, `evertune/`, `infra/` and `proto/`.
ROOT = Path(__file__).resolve().parents[1]
#: Its deployment definitions.
INFRA = ROOT / "infra"
