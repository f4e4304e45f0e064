"""The hardware fingerprint: ISA tiers from /proc/cpuinfo, ids that separate machines, the wire form,
and `evertune hardware show`."""

from __future__ import annotations

import json
import os
import threading

import pytest

from evertune.apps.cli import main
from evertune.domain.engines.fingerprint import (
    Device,
    cpu_fingerprint,
    cpu_isa_tier,
    detect,
    detect_cpu,
    fingerprint_proto,
    gpu_fingerprint,
)

#: The flags lines of the three machines seen here (trimmed to what matters plus some noise).
AMX_XEON = (
    "fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8"
)
AVX2_EPYC = "fpu sse2 avx avx2 fma f16c bmi2"
ZEN5_EPYC = "fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx_vnni avx512_vp2intersect"


def _cpuinfo(model: str, flags: str) -> str:
    entry = f"processor\t: 0\nvendor_id\t: X\nmodel name\t: {model}\nflags\t\t: {flags}\n"
    return entry + entry.replace("processor\t: 0", "processor\t: 1")


@pytest.mark.parametrize(
    ("flags", "tier"),
    [
        (AMX_XEON, "amx"),
        (ZEN5_EPYC, "avx512bf16"),
        (AVX2_EPYC, "avx2"),
        ("fpu avx512f", "avx512"),
        ("fpu", "baseline"),
    ],
)
def test_the_tier_is_the_best_isa_the_cpu_has(flags: str, tier: str) -> None:
    fingerprint = cpu_fingerprint(cpuinfo=_cpuinfo("CPU", flags), cores=2, memory_gib=23.5)
    assert cpu_isa_tier(flags.split()) == tier and fingerprint.tier == f"cpu-{tier}"


def test_features_are_the_tracked_flags_only_in_a_fixed_order() -> None:
    fingerprint = cpu_fingerprint(cpuinfo=_cpuinfo("Intel Xeon", AMX_XEON), cores=2, memory_gib=23.5)
    assert fingerprint.model == "Intel Xeon" and fingerprint.kind == "cpu"
    assert fingerprint.features == (
        "avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8"
    )  # fmt: skip


def test_ids_separate_machines_and_ignore_memory_rounding() -> None:
    xeon = cpu_fingerprint(cpuinfo=_cpuinfo("Intel Xeon", AMX_XEON), cores=2, memory_gib=23.5)
    epyc = cpu_fingerprint(cpuinfo=_cpuinfo("AMD EPYC", AVX2_EPYC), cores=2, memory_gib=23.5)
    same = cpu_fingerprint(cpuinfo=_cpuinfo("Intel Xeon", AMX_XEON), cores=2, memory_gib=23.6)
    more_cores = cpu_fingerprint(cpuinfo=_cpuinfo("Intel Xeon", AMX_XEON), cores=4, memory_gib=23.5)
    assert len(xeon.id) == 12 and xeon.id == same.id
    assert len({xeon.id, epyc.id, more_cores.id}) == 3


def test_a_generic_model_name_is_told_apart_by_family_and_model() -> None:
    """In a VM an EPYC Zen 4 (family 25 model 17) and a Zen 5 (family 26) both read "AMD EPYC" with
    the same tracked flags; one bench search grid measured p50 190 ms on one and 70-94 ms on the
    other at the same load."""

    def epyc(family: int, model: int) -> str:
        numbers = f"cpu family\t: {family}\nmodel\t\t: {model}\nstepping\t: 1\n"
        return _cpuinfo("AMD EPYC", ZEN5_EPYC).replace("model name", numbers + "model name")

    zen4 = cpu_fingerprint(cpuinfo=epyc(25, 17), cores=2, memory_gib=23.5)
    zen5 = cpu_fingerprint(cpuinfo=epyc(26, 2), cores=2, memory_gib=23.5)
    assert zen4.signature == "family 25 model 17 stepping 1" and zen4.model == "AMD EPYC"
    assert zen4.tier == zen5.tier and zen4.id != zen5.id
    assert fingerprint_proto(zen4).cpu_signature == zen4.signature
    unsaid = cpu_fingerprint(cpuinfo=_cpuinfo("AMD EPYC", ZEN5_EPYC), cores=2, memory_gib=23.5)
    assert unsaid.signature == ""  # an ARM or a kernel that does not say


def test_a_gpu_runner_is_its_devices_and_its_host() -> None:
    host = cpu_fingerprint(cpuinfo=_cpuinfo("Intel Xeon", AMX_XEON), cores=16, memory_gib=128)
    gpu = gpu_fingerprint(host, [Device(name="NVIDIA H200", compute_capability="9.0", memory_gib=139.8)])
    assert gpu.kind == "gpu" and gpu.tier == "nvidia-h200" and gpu.id != host.id
    wire = fingerprint_proto(gpu)
    assert wire.id == gpu.id and wire.tier == "nvidia-h200" and wire.cores == 16
    assert [(d.name, d.compute_capability) for d in wire.devices] == [("NVIDIA H200", "9.0")]
    assert list(wire.isa_features) == list(host.features)
    with pytest.raises(ValueError, match="at least one device"):
        gpu_fingerprint(host, [])


def test_hardware_show_prints_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hardware", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    here = detect()
    assert shown["id"] == here.id and shown["tier"] == here.tier and shown["tier"].startswith("cpu-")
    assert shown["cores"] >= 1 and shown["memory_gib"] > 0 and shown["model"]
    assert main(["hardware", "show"]) == 0
    table = capsys.readouterr().out
    assert here.id in table and here.tier in table


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to narrow a thread to 1")
def test_a_thread_narrowed_to_one_core_reads_the_same_fingerprint() -> None:
    """The runner narrows its event loop's thread to the client's core while a trial measures; a
    worker thread started then keeps one core. Its fingerprint must still be the process's (a
    demo's search once saw two ids for one machine and could not compare its own trials)."""
    whole = detect_cpu()
    seen: list[str] = []

    def narrowed() -> None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        seen.append(detect_cpu().id)

    thread = threading.Thread(target=narrowed)
    thread.start()
    thread.join()
    assert seen == [whole.id]
    assert detect_cpu(cores=1).id != whole.id  # what the count changes, when given
