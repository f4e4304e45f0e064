"""Tokens never cross the network in plaintext (hole 2 of the security issue, in part): a deployer
with tokens on a non-loopback address and no TLS refuses to start, with one line naming the
setting, unless TLS is declared terminated in front of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from evertune.deployer import DeployerService

from evertune.errors import SettingsError
from tests.deployer.conftest import deployer_settings


def test_tokens_over_plaintext_off_loopback_are_refused(tmp_path: Path) -> None:
    with pytest.raises(
        SettingsError, match="EVERTUNE_DEPLOYER_TLS_CERT_FILE: tokens would cross the network"
    ):
        DeployerService(deployer_settings(tmp_path, grpc_host="0.0.0.0"))
    DeployerService(deployer_settings(tmp_path, grpc_host="127.0.0.1"))  # loopback: fine
    DeployerService(deployer_settings(tmp_path, grpc_host="0.0.0.0", allow_plaintext_tokens=True))
