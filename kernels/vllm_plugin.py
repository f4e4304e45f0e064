"""The vLLM general plugin `evertune_kernels`: makes vLLM run evertune's Triton kernels for RMSNorm,
SiLU-and-mul and rotary embeddings.

vLLM calls `register()` in every process it starts (API server, engine core, workers) for each
plugin of the `vllm.general_plugins` entry-point group, unless `VLLM_PLUGINS` names others only.
evertune's engine knob `kernels: evertune` sets `VLLM_PLUGINS=evertune_kernels`. Because vLLM also
loads every installed plugin when `VLLM_PLUGINS` is unset, the plugin acts only when `VLLM_PLUGINS`
names it: installing evertune beside vLLM changes nothing by itself.

It refuses, logs why and leaves vLLM's ops alone when:
- it was not asked for (`VLLM_PLUGINS` does not name it);
- vLLM runs on the CPU (or any platform but CUDA and ROCm): the kernels need a GPU to run at speed;
- `TRITON_INTERPRET` is set: the interpreter is for tests, orders of magnitude too slow to serve;
- Triton is not installed (`pip install evertune[kernels]`).

Otherwise it registers the replacements of `evertune.kernels.vllm_ops` with `CustomOp.register_oot`,
once per process; a class name that another plugin already replaced is left to that plugin.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from evertune.infra.logging import get_logger

log = get_logger(__name__)

#: The plugin's entry-point name (evertune.domain.engines.vllm_args.EVERTUNE_KERNELS_PLUGIN says the same).
PLUGIN_NAME = "evertune_kernels"


@dataclass(frozen=True)
class PluginDecision:
    """Whether the plugin replaces vLLM's ops in this process, and why."""

    enabled: bool  #: True: register evertune's ops
    reason: str  #: one line for the log


def decide(
    *, vllm_plugins: str | None, platform: str, triton_installed: bool, interpreting: bool
) -> PluginDecision:
    """Pure. `vllm_plugins`: the `VLLM_PLUGINS` variable (None when unset); `platform`: "cuda",
    "rocm", "cpu", ...; `triton_installed`: whether Triton imports; `interpreting`: TRITON_INTERPRET."""
    named = vllm_plugins is not None and PLUGIN_NAME in {p.strip() for p in vllm_plugins.split(",")}
    if not named:
        return PluginDecision(
            False, f"not asked for: VLLM_PLUGINS does not name {PLUGIN_NAME}; vLLM's ops stay"
        )
    if platform not in {"cuda", "rocm"}:
        return PluginDecision(
            False,
            f"vLLM runs on {platform}: evertune's Triton kernels need a CUDA or ROCm GPU to run at speed; "
            "vLLM's ops stay",
        )
    if interpreting:
        return PluginDecision(
            False, "TRITON_INTERPRET is set: the interpreter is for tests, too slow to serve; vLLM's ops stay"
        )
    if not triton_installed:
        return PluginDecision(
            False, "triton is not installed (pip install 'evertune[kernels]'); vLLM's ops stay"
        )
    return PluginDecision(True, f"evertune's Triton kernels replace vLLM's ops on {platform}")


def register() -> None:
    """The entry point vLLM calls. Never raises: a failure leaves vLLM's own ops and is logged."""
    try:
        decision = decide(
            vllm_plugins=os.environ.get("VLLM_PLUGINS"),
            platform=_vllm_platform(),
            triton_installed=_triton_installed(),
            interpreting=_interpreting(),
        )
        if not decision.enabled:
            log.info("evertune kernels refused", plugin=PLUGIN_NAME, reason=decision.reason)
            return
        replaced = install()
        log.info("evertune kernels registered", plugin=PLUGIN_NAME, ops=replaced, reason=decision.reason)
    except Exception as err:  # a plugin must not take vLLM down
        log.error("evertune kernels failed to register; vLLM's ops stay", plugin=PLUGIN_NAME, error=repr(err))


def install() -> list[str]:
    """Register the replacements with vLLM (idempotent); returns the class names now replaced by
    evertune's ops. Does not check the platform: `register()` does."""
    from vllm.model_executor.custom_op import op_registry_oot

    from evertune.kernels.vllm_ops import REPLACEMENTS

    replaced: list[str] = []
    for name, (original, ours) in REPLACEMENTS.items():
        present = op_registry_oot.get(name)
        if present is ours:
            replaced.append(name)
            continue
        if present is not None:
            log.warning("another plugin replaced this op; it keeps it", op=name, by=repr(present))
            continue
        original.register_oot(ours)
        replaced.append(name)
    return replaced


def uninstall() -> None:
    """Remove evertune's replacements from vLLM's registry (for tests)."""
    from vllm.model_executor.custom_op import op_registry_oot

    from evertune.kernels.vllm_ops import REPLACEMENTS

    for name, (_, ours) in REPLACEMENTS.items():
        if op_registry_oot.get(name) is ours:
            del op_registry_oot[name]


def _vllm_platform() -> str:
    from vllm.platforms import current_platform

    if current_platform.is_cuda():
        return "cuda"
    if current_platform.is_rocm():
        return "rocm"
    if current_platform.is_cpu():
        return "cpu"
    return str(getattr(current_platform, "device_type", "") or "unknown")


def _triton_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def _interpreting() -> bool:
    from evertune.kernels._runtime import interpreting

    return interpreting()
