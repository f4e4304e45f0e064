"""llama.cpp's own server and quantizer (`llama-server`, `llama-quantize`), built for this machine.

The sources are the llama.cpp vendored in the pinned `llama-cpp-python` sdist
(`evertune/domain/engines/llama_cpp_sources.txt`: version and SHA-256, the one place the pin lives).
`make engines` (`python -m evertune.infra.llama_cpp_build`) downloads it with pip, hash-checked,
into `<venv>/share/evertune/packages/`, unpacks `vendor/llama.cpp`, configures it with cmake
(Release, Ninja, static, `GGML_NATIVE=ON`, no tests, examples, web UI or HTTPS client) and builds
only the two programs, with every core this process may use. They land in
`<venv>/share/evertune/llama-cpp/<key>/bin/`, beside a `build.json` that says what went in.

The key is a short SHA-256 over the sdist's pinned hash, the cmake flags and the CPU's ISA flags
from /proc/cpuinfo: `GGML_NATIVE` compiles for the CPU it builds on (`-march=native`), so a binary
built on an AVX-512 machine may not run on an AVX2 one, and a checkout shared between machines
keeps one build per CPU. The build runs in a temporary sibling folder that is renamed into place
only when both programs run (`--version`), under an exclusive `flock` on `llama-cpp/.lock`, so a
second build started meanwhile waits and then finds the first one's result. Nothing here is
asynchronous: it is a build tool that `make` runs, and the engine code only asks
`llama_cpp_bin_dir()` where the programs are.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from evertune.errors import FailedPrecondition
from evertune.infra.file_hash import sha256_of

#: The pinned sdist (one `name==version --hash=sha256:...` line, comments allowed; package data).
PINS = Path(__file__).resolve().parents[1] / "domain" / "engines" / "llama_cpp_sources.txt"
#: The programs built and installed; also the only cmake targets built.
BINARIES: tuple[str, ...] = ("llama-server", "llama-quantize")
#: Where llama.cpp sits inside the sdist's top folder.
VENDORED = "vendor/llama.cpp"
#: The vendored llama.cpp's git HEAD inside the sdist (a submodule's git dir): its commit.
VENDORED_HEAD = ".git/modules/vendor/llama.cpp/HEAD"

#: The cmake configure options. The llama.cpp of llama-cpp-python 0.3.36 (ggml-org/llama.cpp@0c1e570)
#: ignores LLAMA_CURL (deprecated: it fetches models through cpp-httplib, HTTPS only with OpenSSL,
#: hence LLAMA_OPENSSL=OFF); LLAMA_USE_PREBUILT_UI=OFF keeps the build from downloading the web UI
#: from a Hugging Face bucket, so the server is built without one. OpenMP (GGML_OPENMP) stays on, as
#: llama.cpp defaults it: the binaries then need only the system's libgomp, libstdc++ and libc.
CMAKE_FLAGS: tuple[str, ...] = (
    "-GNinja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)

#: The /proc/cpuinfo flags (x86 `flags`, Arm `Features`) that `-march=native` / `-mcpu=native`
#: can turn into instructions: SIMD, FMA, bit manipulation, matrix units and crypto extensions.
_ISA_FLAG = re.compile(
    r"^(sse|ssse|avx|fma|f16c|bmi|amx|gfni|vaes|vpclmul|pclmul|popcnt|abm|movbe|adx|sha|xop|aes"
    r"|asimd|sve|sme(?!p)|i8mm|bf16|fphp|dotprod|fp16|vsx|altivec|vxe)"
)
_PIN_LINE = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*$")


@dataclass(frozen=True)
class SourcePin:
    """The pinned sdist: a project at an exact version and the SHA-256 of its `.tar.gz`."""

    package: str  #: PyPI project name (`llama-cpp-python`)
    version: str  #: exact version (`0.3.36`)
    sha256: str  #: hex digest of the sdist file

    @property
    def sdist_name(self) -> str:
        """The sdist's file name as PyPI serves it (`llama_cpp_python-0.3.36.tar.gz`)."""
        return f"{self.top_folder}.tar.gz"

    @property
    def top_folder(self) -> str:
        """The one folder the sdist unpacks into (`llama_cpp_python-0.3.36`)."""
        return f"{re.sub(r'[-_.]+', '_', self.package).lower()}-{self.version}"


def read_pin(text: str) -> SourcePin:
    """The one pin of a pins file's text; comments and blank lines are skipped."""
    found: list[SourcePin] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _PIN_LINE.match(line.strip())
        if match is None:
            raise FailedPrecondition(f"{PINS.name}: cannot read the line {line!r}")
        found.append(SourcePin(package=match.group(1), version=match.group(2), sha256=match.group(3)))
    if len(found) != 1:
        raise FailedPrecondition(f"{PINS.name}: expected one pinned sdist, found {len(found)}")
    return found[0]


def isa_flags(cpuinfo: str, machine: str) -> tuple[str, ...]:
    """What a native build depends on: the machine (`x86_64`) and the sorted ISA flags of the first
    CPU listed in /proc/cpuinfo (all CPUs of a machine report the same)."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() in ("flags", "Features"):
            flags = {flag for flag in value.split() if _ISA_FLAG.match(flag)}
            break
    return (f"machine={machine}", *sorted(flags))


def build_key(sdist_sha256: str, cmake_flags: Sequence[str], isa: Sequence[str]) -> str:
    """16 hex digits of SHA-256 over the sources, the flags (in order) and the ISA."""
    payload = json.dumps(
        {"sdist_sha256": sdist_sha256, "cmake_flags": list(cmake_flags), "isa": list(isa)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def configure_command(
    source: Path, build: Path, *, commit: str, cmake_flags: Sequence[str] = CMAKE_FLAGS
) -> list[str]:
    """`cmake` configuring `source` into `build`. The commit (read from the sdist, so covered by its
    hash) is given explicitly: the sdist's shallow submodule would report build number 1, and
    without its git dir git would find the checkout's own repository above the source folder."""
    return [
        "cmake",
        "-S",
        str(source),
        "-B",
        str(build),
        *cmake_flags,
        f"-DLLAMA_BUILD_COMMIT={commit}",
        "-DLLAMA_BUILD_NUMBER=0",
    ]


def build_command(build: Path, jobs: int, targets: Sequence[str] = BINARIES) -> list[str]:
    """`cmake --build` of only `targets`, `jobs` at a time."""
    return ["cmake", "--build", str(build), "--target", *targets, "--parallel", str(jobs)]


def share_dir() -> Path:
    """`<venv>/share/evertune`: where `make install` puts packages, and this module its builds."""
    return Path(sys.prefix) / "share" / "evertune"


def packages_dir() -> Path:
    """Where the sdist is downloaded (beside the model wheels)."""
    return share_dir() / "packages"


def builds_dir() -> Path:
    """Where each key's build lives (`<key>/bin/`), with the lock and the temporary folders."""
    return share_dir() / "llama-cpp"


def current_pin() -> SourcePin:
    """The pin in `PINS`."""
    return read_pin(PINS.read_text())


def machine_isa() -> tuple[str, ...]:
    """This machine's `isa_flags` (only the machine where /proc/cpuinfo cannot be read)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return isa_flags(cpuinfo, platform.machine())


def current_key() -> str:
    """This checkout's and this machine's build key."""
    return build_key(current_pin().sha256, CMAKE_FLAGS, machine_isa())


def planned_bin_dir() -> Path:
    """Where this machine's build is, or will be once built."""
    return builds_dir() / current_key() / "bin"


def _complete(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in BINARIES)


def llama_cpp_bin_dir() -> Path | None:
    """The folder holding `llama-server` and `llama-quantize` built for this machine, or None where
    they have not been built (`make engines`)."""
    bin_dir = planned_bin_dir()
    return bin_dir if _complete(bin_dir) else None


def ensure_sdist(pin: SourcePin, folder: Path) -> Path:
    """The pinned sdist in `folder`: kept if its hash matches, else downloaded by pip against the
    pins file (`--require-hashes`: pip refuses any other file)."""
    sdist = folder / pin.sdist_name
    if sdist.is_file() and sha256_of(sdist) == pin.sha256:
        return sdist
    sdist.unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
    subprocess.run(
        [*pip, "--require-hashes", "-r", str(PINS), "-d", str(folder)], check=True, stdout=sys.stderr
    )
    if not sdist.is_file() or sha256_of(sdist) != pin.sha256:
        raise FailedPrecondition(f"pip did not leave {pin.sdist_name} with the pinned hash in {folder}")
    return sdist


def unpack(sdist: Path, pin: SourcePin, into: Path) -> tuple[Path, str]:
    """Unpack the sdist's vendored llama.cpp under `into` (without its `.git` pointer); return the
    source folder and the vendored commit (9 hex digits, `unknown` where the sdist has no HEAD)."""
    top = pin.top_folder
    prefix = f"{top}/{VENDORED}/"
    with tarfile.open(sdist, "r:gz") as tar:
        wanted: list[tarfile.TarInfo] = []
        commit = "unknown"
        for member in tar:
            if member.name == f"{top}/{VENDORED_HEAD}" and member.isfile():
                head = tar.extractfile(member)
                if head is not None:
                    commit = head.read().decode().strip()[:9] or commit
            elif member.name.startswith(prefix) and member.name != f"{prefix}.git":
                wanted.append(member)
        tar.extractall(into, members=wanted, filter="data")
    return into / top / VENDORED, commit


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def allowed_cores() -> int:
    """The cores this process may run on (its affinity), at least 1."""
    return max(1, len(os.sched_getaffinity(0)))


#: What each program is run with once installed, and what its output must hold: proof that it
#: loads from the install folder (llama-quantize has no --version; its usage exits 1).
SMOKE: dict[str, tuple[str, str]] = {
    "llama-server": ("--version", "version:"),
    "llama-quantize": ("--help", "usage:"),
}


def _smoke(binary: Path) -> str:
    """Run `binary` with its smoke argument; its output, or FailedPrecondition if it did not start."""
    argument, expected = SMOKE[binary.name]
    done = subprocess.run([str(binary), argument], capture_output=True, text=True, timeout=60)
    output = (done.stdout + done.stderr).strip().replace(str(binary), binary.name)
    if expected not in output:
        raise FailedPrecondition(f"{binary} {argument} (exit {done.returncode}) did not run: {output[-400:]}")
    return output


def ensure_built(jobs: int | None = None) -> Path:
    """This machine's bin folder, built first if need be (idempotent, safe to race)."""
    bin_dir = planned_bin_dir()
    if _complete(bin_dir):
        return bin_dir
    root = builds_dir()
    with _locked(root / ".lock"):
        if _complete(bin_dir):  # built by whoever held the lock before us
            return bin_dir
        for stale in root.glob(".tmp-*"):  # left by a build that died holding the lock
            shutil.rmtree(stale, ignore_errors=True)
        key_dir = bin_dir.parent
        shutil.rmtree(key_dir, ignore_errors=True)  # an incomplete one, renamed by hand
        tmp = root / f".tmp-{key_dir.name}-{os.getpid()}"
        try:
            _build_into(tmp, key_dir.name, jobs or allowed_cores())
            (tmp / "out").rename(key_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return bin_dir


def _build_into(tmp: Path, key: str, jobs: int) -> None:
    """Download, unpack, configure, build and install into `tmp/out/` (the future `<key>/`)."""
    pin = current_pin()
    started = time.monotonic()
    sdist = ensure_sdist(pin, packages_dir())
    source, commit = unpack(sdist, pin, tmp / "src")
    build = tmp / "build"
    # git must not walk up from the source folder into the checkout's own repository
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp)}
    print(f"llama.cpp {commit}: building {', '.join(BINARIES)} with {jobs} jobs", file=sys.stderr)
    subprocess.run(configure_command(source, build, commit=commit), check=True, env=env, stdout=sys.stderr)
    subprocess.run(build_command(build, jobs), check=True, env=env, stdout=sys.stderr)
    out_bin = tmp / "out" / "bin"
    out_bin.mkdir(parents=True)
    for name in BINARIES:
        shutil.copy2(build / "bin" / name, out_bin / name)
    versions = {name: "\n".join(_smoke(out_bin / name).splitlines()[:2]) for name in BINARIES}
    seconds = round(time.monotonic() - started, 1)
    record = {
        "key": key,
        "sdist": pin.sdist_name,
        "sdist_sha256": pin.sha256,
        "llama_cpp_commit": commit,
        "cmake_flags": list(CMAKE_FLAGS),
        "isa": list(machine_isa()),
        "jobs": jobs,
        "build_seconds": seconds,
        "versions": versions,
    }
    (tmp / "out" / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"llama.cpp {commit}: built in {seconds} s", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evertune.infra.llama_cpp_build",
        description="Build llama-server and llama-quantize for this machine; print their folder last.",
    )
    parser.add_argument("--print-dir", action="store_true", help="print the folder only, build nothing")
    parser.add_argument("--jobs", type=int, default=None, help="parallel jobs (default: allowed cores)")
    args = parser.parse_args(argv)
    if args.print_dir:
        print(planned_bin_dir())
        return 0
    try:
        bin_dir = ensure_built(args.jobs)
    except (subprocess.CalledProcessError, FailedPrecondition) as exc:
        print(f"llama.cpp build failed: {exc}", file=sys.stderr)
        return 1
    print(bin_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
