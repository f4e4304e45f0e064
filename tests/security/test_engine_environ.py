"""An engine process inherits none of evertune's secrets (hole 4 of the security issue, in part):
not the API tokens, the ClickHouse URL with its password, the prefix secret or NATS URLs, nor any
variable whose name marks a secret. A model's code runs in that process."""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.domain.engines import EngineSpec
from evertune.domain.engines.hardware import cpu_profile
from evertune.domain.engines.sim import SimEngine
from evertune.domain.engines.vllm import VllmEngine
from evertune.domain.engines.vllm_args import engine_environ

SECRETS = {
    "EVERTUNE_DEPLOYER_TOKENS": "op:tok-123",
    "EVERTUNE_CLICKHOUSE_URL": "https://evertune:hunter2@clickhouse:8443/",
    "EVERTUNE_GATEWAY_PREFIX_SECRET": "s3cret",
    "EVERTUNE_NATS_URL": "nats://svc:pw@nats:4222",
    "AWS_SECRET_ACCESS_KEY": "aws-key",
    "HF_TOKEN": "hf-token",
    "OPENAI_API_KEY": "sk-x",
}


def test_engine_environ_keeps_what_engines_need() -> None:
    environ = {
        **SECRETS,
        "PATH": "/usr/bin",
        "HOME": "/root",
        "OMP_NUM_THREADS": "2",
        "EVERTUNE_DATA_DIR": "/d",
    }
    assert engine_environ(environ) == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "OMP_NUM_THREADS": "2",
        "EVERTUNE_DATA_DIR": "/d",
    }


def test_engine_processes_get_none_of_the_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    cpu = cpu_profile(cores=2, memory_gib=10.0)
    spec = EngineSpec(model="/models/none", enforce_eager=True)
    _, vllm_env = VllmEngine(spec, log_dir=tmp_path, hardware=cpu).command()
    _, sim_env = SimEngine(spec.model_copy(update={"kind": "sim"}), log_dir=tmp_path, hardware=cpu).command()
    for env in (vllm_env, sim_env):
        assert not set(SECRETS) & set(env)
        assert not any(value in env.values() for value in SECRETS.values())
        assert env["HF_HUB_OFFLINE"] == "1" and "PATH" in env
