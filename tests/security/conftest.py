"""The fake OpenAI upstream (its own process) for the gateway's cases here."""

from __future__ import annotations

from tests.replay.conftest import fake_url

__all__ = ["fake_url"]
