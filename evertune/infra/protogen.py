"""Regenerate the Python stubs of the wire contracts (proto/evertune/v1/*.proto -> evertune/v1/).

    python -m evertune.infra.protogen           # rewrite evertune/v1/*_pb2.py, *_pb2.pyi, *_pb2_grpc.py
    python -m evertune.infra.protogen --check   # exit 1, naming the stale files, if they are not current

The stubs are generated with the protoc bundled in grpcio-tools, with `-I proto`, so generated
imports read `from evertune.v1 import endpoint_pb2`; the well-known types (Timestamp, Duration,
FieldMask) come from grpcio-tools' own include folder. Output depends only on the .proto files and
the grpcio-tools version.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from evertune.errors import EvertuneError
from evertune.infra.package_data import PROTO

#: Include root of the contracts: files are proto/evertune/v1/*.proto (package data).
PROTO_ROOT = PROTO
#: Where the stubs are written: the folder that holds the `evertune` package (a checkout's root
#: in an editable install).
ROOT = Path(__file__).resolve().parents[2]
#: Package folder of the contracts, relative to both the include root and the output root.
PACKAGE_DIR = Path("evertune") / "v1"
#: Endings of generated files; anything else in evertune/v1/ (such as __init__.py) is left alone.
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


class ProtogenError(EvertuneError):
    """protoc failed or the .proto files cannot be found."""


def proto_files(proto_root: Path = PROTO_ROOT) -> list[Path]:
    """The contract files, sorted, relative to `proto_root`."""
    folder = proto_root / PACKAGE_DIR
    files = sorted(p.relative_to(proto_root) for p in folder.glob("*.proto"))
    if not files:
        raise ProtogenError(f"no .proto files in {folder}")
    return files


def well_known_include() -> Path:
    """grpcio-tools' include folder holding google/protobuf/*.proto (Timestamp, Duration...)."""
    return Path(str(resources.files("grpc_tools") / "_proto"))


def _is_generated(path: Path) -> bool:
    return path.name.endswith(GENERATED_SUFFIXES)


def generate(out_root: Path, proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Generate the stubs into `<out_root>/evertune/v1/`; return the files written, sorted.

    Only writes; generated files of protos that no longer exist are not removed here (`sync` does).
    """
    from grpc_tools import protoc  # dev dependency: imported only when generating

    files = proto_files(proto_root)
    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root.resolve()}",
        f"-I{well_known_include()}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        # Absolute paths under the -I root: protoc maps them to "evertune/v1/x.proto" whatever the cwd.
        *(str(proto_root.resolve() / f) for f in files),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise ProtogenError(f"protoc failed (exit {rc}) on {', '.join(str(f) for f in files)}")
    out_dir = out_root / PACKAGE_DIR
    return sorted(p for p in out_dir.iterdir() if p.is_file() and _is_generated(p))


def stale_files(target_root: Path = ROOT, proto_root: Path = PROTO_ROOT) -> list[str]:
    """Generated files under `<target_root>/evertune/v1/` that differ from a fresh generation.

    Returns sorted paths relative to `target_root`: files that differ, are missing, or are left over
    from a .proto that no longer exists.
    """
    with tempfile.TemporaryDirectory(prefix="evertune-protogen-") as tmp:
        fresh = {p.name: p.read_bytes() for p in generate(Path(tmp), proto_root)}
    target_dir = target_root / PACKAGE_DIR
    current = (
        {p.name: p.read_bytes() for p in target_dir.iterdir() if p.is_file() and _is_generated(p)}
        if target_dir.is_dir()
        else {}
    )
    names = sorted(set(fresh) | set(current))
    return [str(PACKAGE_DIR / n) for n in names if fresh.get(n) != current.get(n)]


def sync(target_root: Path = ROOT, proto_root: Path = PROTO_ROOT) -> list[str]:
    """Bring `<target_root>/evertune/v1/` up to date; return the paths changed (relative, sorted)."""
    target_dir = target_root / PACKAGE_DIR
    target_dir.mkdir(parents=True, exist_ok=True)
    changed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="evertune-protogen-") as tmp:
        fresh = {p.name: p for p in generate(Path(tmp), proto_root)}
        for name, src in sorted(fresh.items()):
            dst = target_dir / name
            if not dst.is_file() or dst.read_bytes() != src.read_bytes():
                shutil.copyfile(src, dst)
                changed.append(str(PACKAGE_DIR / name))
    for old in sorted(target_dir.iterdir()):
        if old.is_file() and _is_generated(old) and old.name not in fresh:
            old.unlink()
            changed.append(str(PACKAGE_DIR / old.name))
    return sorted(changed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evertune.infra.protogen",
        description="Regenerate the protobuf/gRPC stubs in evertune/v1/ from proto/evertune/v1/.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if the stubs are stale, naming the stale files",
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_files()
            if stale:
                print(
                    f"stale protobuf stubs: {', '.join(stale)} (run `make proto`)",
                    file=sys.stderr,
                )
                return 1
            return 0
        changed = sync()
    except EvertuneError as err:
        print(f"protogen: {err}", file=sys.stderr)
        return 1
    print(f"regenerated {len(changed)} file(s)" + (f": {', '.join(changed)}" if changed else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
