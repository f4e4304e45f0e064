"""Token files and bearer authentication (pure parts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.deployer.service import deployer_tokens
from evertune.errors import InvalidArgument, SettingsError, Unauthenticated
from evertune.infra.runtime.auth import (
    ALL_TENANTS,
    ANONYMOUS_OPERATOR,
    TokenSource,
    TokenTable,
    authenticate,
    bearer_token,
    parse_tokens,
)
from tests.deployer.conftest import deployer_settings

GOOD = "0123456789abcdef-token"


def test_token_file_format() -> None:
    text = f"# comment\n\n{GOOD} team-a\n  other-token-0123456789   *  \n"
    assert parse_tokens(text, source="f") == {GOOD: "team-a", "other-token-0123456789": ALL_TENANTS}
    assert parse_tokens(f"{GOOD} team-a, second-token-0123456 team-b", source="s") == {
        GOOD: "team-a",
        "second-token-0123456": "team-b",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lonely-token-0123456789", "f: entry 1 must be `<token> <tenant>`"),
        ("short team", "f: entry 1: a token needs at least 16"),
        (f"{GOOD} bad.tenant", "f: entry 1: tenant 'bad.tenant'"),
        (f"{GOOD} a\n{GOOD} b", "f: entry 2: the same token"),
    ],
)
def test_bad_token_entries(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        parse_tokens(text, source="f")
    assert str(err.value).startswith(message)


def test_authenticate() -> None:
    table = TokenTable({GOOD: "team-a"})
    principal = authenticate(table, [("authorization", f"Bearer {GOOD}")])
    assert principal.tenant == "team-a" and principal.sees("team-a") and not principal.sees("team-b")
    assert GOOD not in principal.label
    with pytest.raises(Unauthenticated, match="missing credentials"):
        authenticate(table, [])
    with pytest.raises(Unauthenticated, match="invalid token"):
        authenticate(table, [("authorization", "Bearer nope-nope-nope-nope")])
    with pytest.raises(Unauthenticated, match="missing credentials"):
        authenticate(table, [("authorization", f"Basic {GOOD}")])
    assert authenticate(None, []) is ANONYMOUS_OPERATOR and ANONYMOUS_OPERATOR.sees("anyone")
    assert bearer_token([("Authorization", b"bearer  xyz ")]) == "xyz"


def test_deployer_tokens_from_file_and_setting(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{GOOD} team-a\n")
    table = deployer_tokens(deployer_settings(tmp_path, token_file=path))
    assert table is not None and len(table) == 4  # the file's one plus the three of the test settings
    with pytest.raises(SettingsError, match="cannot read"):
        deployer_tokens(deployer_settings(tmp_path, token_file=tmp_path / "missing"))
    path.write_text("short x\n")
    with pytest.raises(SettingsError, match="entry 1"):
        deployer_tokens(deployer_settings(tmp_path, token_file=path))
    assert deployer_tokens(deployer_settings(tmp_path, tokens="")) is None


def test_a_token_file_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    """Tokens rotate without a restart; a broken file keeps the tokens in force; an emptied one
    refuses everyone (authentication never turns itself off)."""
    path = tmp_path / "tokens"
    path.write_text(f"{GOOD} team-a\n")
    now = [0.0]
    source = TokenSource(
        TokenTable({GOOD: "team-a"}),
        token_file=path,
        tokens="",
        file_setting="EVERTUNE_X_TOKEN_FILE",
        tokens_setting="EVERTUNE_X_TOKENS",
        clock=lambda: now[0],
    )
    rotated = "fedcba9876543210-rotated"
    path.write_text(f"{rotated} team-b\n# rotated\n")
    now[0] = 1.0  # within the check interval: not looked at yet
    assert source.lookup(GOOD) is not None and source.lookup(rotated) is None
    now[0] = 3.0
    found = source.lookup(rotated)
    assert found is not None and found.tenant == "team-b" and source.lookup(GOOD) is None
    path.write_text("short x\n")  # does not parse
    now[0] = 6.0
    assert source.lookup(rotated) is not None
    path.write_text("")
    now[0] = 9.0
    assert source.lookup(rotated) is None and len(source) == 0
