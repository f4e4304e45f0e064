"""What a runner runs on, precisely enough that measurements from two machines are never mixed.

"cpu" is not one kind of hardware for vLLM: on an Intel Xeon with AMX, bf16 matrix products run on
tile units and fp32 is several times slower; on an AMD EPYC with AVX2 only, bf16 is widened to fp32
in software and fp32 is far faster. A `Fingerprint` names the features vLLM's kernels choose by:

- CPU: the model name, its family/model/stepping (`signature`: in a VM the model name is often
  just "AMD EPYC", which a Zen 4 and a Zen 5 host both show with the same flags), the cores this
  process may use, memory, and the ISA features among `CPU_FEATURES` that the machine has (from
  `/proc/cpuinfo` flags);
- GPU: each device's name, compute capability and memory.

Its `tier` is the coarse class a fleet routes by (`cpu-amx`, `cpu-avx512bf16`, `cpu-avx512`,
`cpu-avx2`, `cpu-baseline`; on GPU the device name, `nvidia-h200`), its `id` a short hash of
everything in it: trial results, grid caches and calibrations are keyed by the id, and nothing
measured under one id is ranked or reused under another.

`cpu_fingerprint` and `gpu_fingerprint` are pure (they take the text and figures); `detect()` reads
this machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from evertune.v1 import jobs_pb2

#: ISA features of x86 CPUs that decide which of vLLM's CPU kernels run and how fast each dtype is
#: (`/proc/cpuinfo` flag names). amx_*: Intel AMX tiles (bf16 matmul in hardware); avx512_bf16:
#: native bf16 dot products and rounding conversions; avx512_fp16: native fp16 arithmetic.
CPU_FEATURES: tuple[str, ...] = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_bf16",
    "amx_tile",
    "amx_int8",
)


@dataclass(frozen=True)
class Device:
    """One accelerator of a GPU runner."""

    name: str  #: device name as the driver reports it ("NVIDIA H200")
    compute_capability: str  #: "9.0" (CUDA) or the gfx target (ROCm)
    memory_gib: float  #: device memory, GiB


@dataclass(frozen=True)
class Fingerprint:
    """The hardware a measurement was taken on (see the module doc)."""

    kind: str  #: "cpu" or "gpu"
    model: str  #: CPU model name (the host CPU's, on a GPU runner too)
    cores: int  #: CPU cores this process may run on
    memory_gib: float  #: host memory, GiB (rounded to whole GiB in the id)
    features: tuple[str, ...]  #: the `CPU_FEATURES` the CPU has, in that order
    devices: tuple[Device, ...] = ()  #: accelerators, in index order (empty on a CPU runner)
    machine: str = ""  #: architecture ("x86_64", "aarch64")
    #: "family F model M stepping S" of an x86 CPU ("" where /proc/cpuinfo does not say)
    signature: str = ""

    @property
    def tier(self) -> str:
        """The hardware class this fingerprint falls in (see the module doc)."""
        if self.devices:
            return _slug(self.devices[0].name)
        return f"cpu-{cpu_isa_tier(self.features)}"

    @property
    def id(self) -> str:
        """12 hex of a hash of everything that can change a measurement (memory in whole GiB)."""
        identity = {
            "kind": self.kind,
            "model": self.model,
            "cores": self.cores,
            "memory_gib": round(self.memory_gib),
            "features": list(self.features),
            "devices": [[d.name, d.compute_capability, round(d.memory_gib)] for d in self.devices],
            "machine": self.machine,
            "signature": self.signature,
        }
        blob = json.dumps(identity, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def as_dict(self) -> dict[str, object]:
        """Every field plus `id` and `tier`, as plain JSON values."""
        out: dict[str, object] = {"id": self.id, "tier": self.tier, **asdict(self)}
        out["features"] = list(self.features)
        out["devices"] = [asdict(d) for d in self.devices]
        return out


def cpu_isa_tier(features: Iterable[str]) -> str:
    """The best ISA tier among `features`: amx > avx512bf16 > avx512 > avx2 > baseline."""
    have = set(features)
    if {"amx_bf16", "amx_tile"} <= have:
        return "amx"
    if "avx512_bf16" in have:
        return "avx512bf16"
    if "avx512f" in have:
        return "avx512"
    if "avx2" in have:
        return "avx2"
    return "baseline"


def cpu_fingerprint(*, cpuinfo: str, cores: int, memory_gib: float, machine: str = "x86_64") -> Fingerprint:
    """The fingerprint of a CPU machine from its `/proc/cpuinfo` text (the first processor's entry)."""
    model = ""
    flags: set[str] = set()
    numbers: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name in ("model name", "Model name") and not model:
            model = value.strip()
        elif name in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif name in ("cpu family", "model", "stepping") and name not in numbers:
            numbers[name] = value.strip()
    signature = (
        f"family {numbers['cpu family']} model {numbers['model']} stepping {numbers.get('stepping', '?')}"
        if "cpu family" in numbers and "model" in numbers
        else ""
    )
    return Fingerprint(
        kind="cpu",
        model=model or "unknown",
        cores=cores,
        memory_gib=memory_gib,
        features=tuple(f for f in CPU_FEATURES if f in flags),
        machine=machine,
        signature=signature,
    )


def gpu_fingerprint(host: Fingerprint, devices: Sequence[Device]) -> Fingerprint:
    """A GPU runner's fingerprint: its host CPU's plus the devices."""
    if not devices:
        raise ValueError("a GPU fingerprint needs at least one device")
    return Fingerprint(
        kind="gpu",
        model=host.model,
        cores=host.cores,
        memory_gib=host.memory_gib,
        features=host.features,
        devices=tuple(devices),
        machine=host.machine,
        signature=host.signature,
    )


#: Cores this process could run on when this module was imported (see `detect_cpu`).
_IMPORT_CORES = len(os.sched_getaffinity(0))


def detect(*, cores: int | None = None) -> Fingerprint:
    """This machine: the CPU always; CUDA/ROCm devices when torch sees any. `cores`: see
    `detect_cpu`."""
    host = detect_cpu(cores=cores)
    devices = _gpu_devices()
    return gpu_fingerprint(host, devices) if devices else host


def detect_cpu(*, cores: int | None = None) -> Fingerprint:
    """This machine's CPU alone (no torch import): what the CPU backend runs on. `cores`: the cores
    the caller may run on; None: those this process could use when this module was imported. Not
    the calling thread's affinity now: the runner narrows its event loop's thread to the client's
    core while a trial measures, a worker thread started in that window keeps the narrow set for
    good, and the fingerprint would change under the runner (it did: two ids in one search)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return cpu_fingerprint(
        cpuinfo=cpuinfo,
        cores=_IMPORT_CORES if cores is None else cores,
        memory_gib=_memory_gib(),
        machine=platform.machine(),
    )


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 2)
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _gpu_devices() -> list[Device]:
    """Accelerators torch can see (none without torch or a driver)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        arch = getattr(props, "gcnArchName", "") or f"{props.major}.{props.minor}"
        devices.append(
            Device(name=props.name, compute_capability=arch, memory_gib=round(props.total_memory / 2**30, 1))
        )
    return devices


def _slug(name: str) -> str:
    """ "NVIDIA H200" -> "nvidia-h200"."""
    return "-".join(name.lower().replace("_", " ").split())


def fingerprint_proto(fingerprint: Fingerprint) -> jobs_pb2.HardwareFingerprint:
    """The wire form of a fingerprint (`HardwareFingerprint`)."""
    return jobs_pb2.HardwareFingerprint(
        id=fingerprint.id,
        tier=fingerprint.tier,
        kind=fingerprint.kind,
        cpu_model=fingerprint.model,
        cores=fingerprint.cores,
        memory_gib=fingerprint.memory_gib,
        isa_features=list(fingerprint.features),
        devices=[
            jobs_pb2.HardwareDevice(
                name=d.name, compute_capability=d.compute_capability, memory_gib=d.memory_gib
            )
            for d in fingerprint.devices
        ],
        machine=fingerprint.machine,
        cpu_signature=fingerprint.signature,
    )
