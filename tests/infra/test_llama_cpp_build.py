"""The llama.cpp build without building: the pin, the ISA flags, the key, the cmake command lines
and the lock around a build (the build itself replaced). `make engines` builds for real."""

from __future__ import annotations

import concurrent.futures
import sys
import time
from pathlib import Path

import pytest

from evertune.errors import FailedPrecondition
from evertune.infra import llama_cpp_build as build

SHA = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
X86 = (
    "processor\t: 0\nvendor_id\t: AuthenticAMD\n"
    "flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c hypervisor smep avx2 bmi2 avx512f"
    " avx512bw avx512_vnni avx512_bf16 constant_tsc\n\n"
    "processor\t: 1\nflags\t\t: fpu sse avx\n"
)
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32 asimddp sve i8mm bf16 cpuid\n"


def test_the_repository_pins_one_sdist_with_its_hash() -> None:
    pin = build.current_pin()
    assert (pin.package, pin.version) == ("llama-cpp-python", "0.3.36")
    assert pin.sha256 == SHA
    assert pin.sdist_name == "llama_cpp_python-0.3.36.tar.gz"
    assert pin.top_folder == "llama_cpp_python-0.3.36"


def test_a_pins_file_needs_exactly_one_readable_pin() -> None:
    line = f"llama-cpp-python==0.3.36 --hash=sha256:{SHA}"
    assert build.read_pin(f"# a comment\n\n{line}\n").version == "0.3.36"
    with pytest.raises(FailedPrecondition):
        build.read_pin("# nothing pinned\n")
    with pytest.raises(FailedPrecondition):
        build.read_pin(f"{line}\n{line}\n")
    with pytest.raises(FailedPrecondition):
        build.read_pin("llama-cpp-python>=0.3\n")


def test_isa_flags_keep_the_instruction_sets_of_the_first_cpu_only() -> None:
    flags = build.isa_flags(X86, "x86_64")
    assert flags[0] == "machine=x86_64"
    assert set(flags[1:]) == {
        "sse", "sse2", "ssse3", "fma", "sse4_1", "sse4_2", "avx", "f16c", "avx2", "bmi2",
        "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
    }  # fmt: skip
    assert list(flags[1:]) == sorted(flags[1:])
    assert build.isa_flags(ARM, "aarch64") == (
        "machine=aarch64", "aes", "asimd", "asimddp", "bf16", "i8mm", "sve",
    )  # fmt: skip
    assert build.isa_flags("", "riscv64") == ("machine=riscv64",)


def test_isa_flags_read_this_machine() -> None:
    flags = build.isa_flags(Path("/proc/cpuinfo").read_text(), "x86_64")
    assert flags[0] == "machine=x86_64" and len(flags) > 1


def test_the_key_is_stable_and_short() -> None:
    isa = build.isa_flags(X86, "x86_64")
    key = build.build_key(SHA, build.CMAKE_FLAGS, isa)
    assert key == build.build_key(SHA, list(build.CMAKE_FLAGS), list(isa))
    assert len(key) == 16 and int(key, 16) >= 0
    assert build.current_key() == build.current_key()


def test_the_key_changes_with_each_input() -> None:
    isa = build.isa_flags(X86, "x86_64")
    key = build.build_key(SHA, build.CMAKE_FLAGS, isa)
    other_sdist = build.build_key("0" * 64, build.CMAKE_FLAGS, isa)
    other_flags = build.build_key(SHA, (*build.CMAKE_FLAGS, "-DGGML_OPENMP=OFF"), isa)
    reordered = build.build_key(SHA, tuple(reversed(build.CMAKE_FLAGS)), isa)
    no_avx512f = build.isa_flags(X86.replace(" avx512f", ""), "x86_64")
    other_isa = build.build_key(SHA, build.CMAKE_FLAGS, no_avx512f)
    other_machine = build.build_key(SHA, build.CMAKE_FLAGS, build.isa_flags(X86, "i686"))
    keys = [key, other_sdist, other_flags, reordered, other_isa, other_machine]
    assert len(set(keys)) == len(keys)


def test_a_flag_the_cpu_has_but_no_isa_does_not_change_the_key() -> None:
    isa = build.isa_flags(X86, "x86_64")
    assert build.isa_flags(X86.replace(" constant_tsc", " nonstop_tsc"), "x86_64") == isa


def test_the_configure_line_is_a_native_static_release_build_of_the_server_only() -> None:
    line = build.configure_command(Path("/s"), Path("/b"), commit="0c1e57098")
    assert line[:5] == ["cmake", "-S", "/s", "-B", "/b"]
    for flag in (
        "-GNinja",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DGGML_NATIVE=ON",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_BUILD_COMMIT=0c1e57098",
        "-DLLAMA_BUILD_NUMBER=0",
    ):
        assert flag in line
    assert line[5 : 5 + len(build.CMAKE_FLAGS)] == list(build.CMAKE_FLAGS)


def test_the_build_line_builds_the_two_programs_with_the_jobs_given() -> None:
    line = build.build_command(Path("/b"), 2)
    assert line == [
        "cmake", "--build", "/b", "--target", "llama-server", "llama-quantize", "--parallel", "2",
    ]  # fmt: skip
    assert build.allowed_cores() >= 1


def test_the_bin_dir_is_under_the_venv_by_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    planned = build.planned_bin_dir()
    assert planned == tmp_path / "share" / "evertune" / "llama-cpp" / build.current_key() / "bin"
    assert build.llama_cpp_bin_dir() is None  # nothing built there
    planned.mkdir(parents=True)
    for name in build.BINARIES:
        (planned / name).write_text("#!/bin/sh\n")
        (planned / name).chmod(0o755)
    assert build.llama_cpp_bin_dir() == planned


def test_print_dir_builds_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert build.main(["--print-dir"]) == 0
    assert capsys.readouterr().out.strip() == str(build.planned_bin_dir())
    assert not (tmp_path / "share").exists()


def test_two_builds_at_once_build_once_and_leave_no_temporary_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The build itself is replaced by one that writes two scripts: what is tested is the lock, the
    re-check under it and the rename into place."""
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    calls: list[str] = []

    def fake_build(tmp: Path, key: str, jobs: int) -> None:
        calls.append(key)
        time.sleep(0.2)  # long enough for the other thread to reach the lock
        out_bin = tmp / "out" / "bin"
        out_bin.mkdir(parents=True)
        for name in build.BINARIES:
            (out_bin / name).write_text("#!/bin/sh\n")
            (out_bin / name).chmod(0o755)

    monkeypatch.setattr(build, "_build_into", fake_build)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        dirs = list(pool.map(lambda _: build.ensure_built(1), range(2)))
    assert dirs == [build.planned_bin_dir()] * 2
    assert calls == [build.current_key()]
    assert build.llama_cpp_bin_dir() == build.planned_bin_dir()
    assert not list(build.builds_dir().glob(".tmp-*"))
