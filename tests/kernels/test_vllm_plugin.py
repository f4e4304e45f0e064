"""The vLLM plugin: when it replaces vLLM's ops, and that the replacements compute what vLLM's own
layers compute. Imports vLLM in process (its CustomOp registry; no engine starts): about 6 s."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from structlog.testing import capture_logs

from evertune.domain.engines.vllm_args import EVERTUNE_KERNELS_PLUGIN
from evertune.kernels import vllm_plugin
from evertune.kernels.vllm_plugin import PLUGIN_NAME, decide
from tests import checkout

ROOT = checkout.ROOT


@pytest.mark.parametrize(
    ("plugins", "platform", "triton", "interpreting", "enabled", "says"),
    [
        ("evertune_kernels", "cuda", True, False, True, "replace vLLM's ops on cuda"),
        ("other, evertune_kernels", "rocm", True, False, True, "on rocm"),
        (None, "cuda", True, False, False, "not asked for"),
        ("", "cuda", True, False, False, "not asked for"),
        ("other_plugin", "cuda", True, False, False, "not asked for"),
        ("evertune_kernels", "cpu", True, False, False, "need a CUDA or ROCm GPU"),
        ("evertune_kernels", "tpu", True, False, False, "vLLM runs on tpu"),
        ("evertune_kernels", "cuda", True, True, False, "TRITON_INTERPRET"),
        ("evertune_kernels", "cuda", False, False, False, "triton is not installed"),
    ],
)
def test_decision(
    plugins: str | None, platform: str, triton: bool, interpreting: bool, enabled: bool, says: str
) -> None:
    d = decide(vllm_plugins=plugins, platform=platform, triton_installed=triton, interpreting=interpreting)
    assert d.enabled is enabled and says in d.reason and "\n" not in d.reason


def test_the_entry_point_is_declared_under_the_name_the_engine_knob_uses() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["vllm.general_plugins"][EVERTUNE_KERNELS_PLUGIN]
    module, function = target.split(":")
    assert PLUGIN_NAME == EVERTUNE_KERNELS_PLUGIN
    assert getattr(importlib.import_module(module), function) is vllm_plugin.register


@pytest.fixture
def vllm_registry() -> Iterator[dict[str, type]]:
    from vllm.model_executor.custom_op import op_registry_oot

    before = dict(op_registry_oot)
    try:
        yield op_registry_oot
    finally:
        vllm_plugin.uninstall()
        op_registry_oot.clear()
        op_registry_oot.update(before)


def test_on_this_cpu_the_plugin_refuses_and_leaves_vllms_ops(
    vllm_registry: dict[str, type], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_PLUGINS", PLUGIN_NAME)
    before = dict(vllm_registry)
    with capture_logs() as logs:
        vllm_plugin.register()
    assert vllm_registry == before
    refused = [e for e in logs if e["event"] == "evertune kernels refused"]
    assert len(refused) == 1 and "vLLM runs on cpu" in refused[0]["reason"]


def test_installed_replacements_are_what_vllm_builds_and_compute_the_same(
    vllm_registry: dict[str, type],
) -> None:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.activation import SiluAndMul
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
    from vllm.model_executor.layers.rotary_embedding.llama3_rope import Llama3RotaryEmbedding

    from evertune.kernels import vllm_ops

    assert vllm_plugin.install() == ["RMSNorm", "SiluAndMul", "RotaryEmbedding", "Llama3RotaryEmbedding"]
    assert vllm_plugin.install() == [
        "RMSNorm",
        "SiluAndMul",
        "RotaryEmbedding",
        "Llama3RotaryEmbedding",
    ]  # again: no-op
    torch.manual_seed(0)
    with set_current_vllm_config(VllmConfig()):
        norm = RMSNorm(96, eps=1e-6)
        norm.weight.data.normal_()
        assert isinstance(norm, vllm_ops.EvertuneRMSNorm) and norm.enabled()
        x, res = torch.randn(5, 96), torch.randn(5, 96)
        want_out, want_res = norm.forward_native(x.clone(), res.clone())
        got_out, got_res = norm.forward_cuda(x.clone(), res.clone())
        torch.testing.assert_close(got_out, want_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_res, want_res)
        torch.testing.assert_close(norm.forward_cuda(x), norm.forward_native(x), rtol=1e-5, atol=1e-5)
        heads = torch.randn(5, 2, 200)[..., :96]  # not rows: handed back to vLLM's own path
        torch.testing.assert_close(norm.forward_cuda(heads), norm.forward_native(heads))

        act = SiluAndMul()
        assert isinstance(act, vllm_ops.EvertuneSiluAndMul)
        y = torch.randn(2, 3, 64)
        torch.testing.assert_close(act.forward_cuda(y), act.forward_native(y))

        ropes = [
            RotaryEmbedding(64, 32, 256, 10000.0, False, torch.float32),
            Llama3RotaryEmbedding(128, 128, 256, 500000.0, True, torch.float32, 8.0, 1.0, 4.0, 128),
        ]
        assert isinstance(ropes[0], vllm_ops.EvertuneRotaryEmbedding)
        assert isinstance(ropes[1], vllm_ops.EvertuneLlama3RotaryEmbedding)
        for rope in ropes:
            hs = rope.head_size
            positions = torch.randint(0, 256, (7,))
            q, k = torch.randn(7, 4 * hs), torch.randn(7, 2 * hs)
            want_q, want_k = rope.forward_native(positions, q.clone(), k.clone())
            got_q, got_k = rope.forward_cuda(positions, q, k)
            assert got_q is q and got_k is k  # in place, as vLLM's op
            torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)


def test_install_leaves_an_op_another_plugin_replaced(vllm_registry: dict[str, type]) -> None:
    from vllm.model_executor.layers.activation import SiluAndMul

    class OtherSiluAndMul(SiluAndMul):
        pass

    vllm_registry["SiluAndMul"] = OtherSiluAndMul
    assert "SiluAndMul" not in vllm_plugin.install()
    assert vllm_registry["SiluAndMul"] is OtherSiluAndMul
    vllm_plugin.uninstall()
    assert vllm_registry["SiluAndMul"] is OtherSiluAndMul and "RMSNorm" not in vllm_registry


def test_vllms_own_loader_finds_the_plugin_and_it_refuses_on_cpu(tmp_path: Path) -> None:
    # The entry point as an installed distribution would declare it (pyproject.toml's, checked above),
    # on a path of its own so the test does not depend on how evertune itself was installed.
    dist = tmp_path / "evertune_kernels_probe-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evertune-kernels-probe\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text(
        f"[vllm.general_plugins]\n{PLUGIN_NAME} = evertune.kernels.vllm_plugin:register\n"
    )
    script = (
        "from vllm.plugins import load_general_plugins\n"
        "load_general_plugins()\n"
        "from vllm.model_executor.custom_op import op_registry_oot\n"
        "print('OOT', sorted(op_registry_oot))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in {"TRITON_INTERPRET", "VLLM_PLUGINS"}}
    env["PYTHONPATH"] = str(tmp_path)
    env["VLLM_PLUGINS"] = PLUGIN_NAME
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-2000:]
    assert "evertune kernels refused" in out and "vLLM runs on cpu" in out, out[-2000:]
    assert "OOT []" in out, out[-2000:]
