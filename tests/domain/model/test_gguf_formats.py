"""The GGUF file of a model in a file type: made once, kept by weights and exporter version, lower
bits made by the llama.cpp build's quantizer, a `.gguf` served as it is."""

from __future__ import annotations

import shutil
from pathlib import Path

import gguf
import pytest

from evertune.domain.engines.llama_cpp import QUANTIZE, installed_binary
from evertune.domain.model.gguf_formats import EXPORT_VERSION, ensure_gguf, file_types
from evertune.errors import FailedPrecondition, InvalidArgument


def _file_type(path: Path) -> int:
    field = gguf.GGUFReader(path).get_field("general.file_type")
    assert field is not None
    return int(field.contents())


@pytest.fixture
def model(tiny_model: Path, tmp_path: Path) -> Path:
    """A copy of the tiny model of its own, so the GGUF files made beside it are this test's."""
    return Path(shutil.copytree(tiny_model, tmp_path / "tiny"))


def test_a_folder_is_exported_once_per_file_type_beside_it(model: Path) -> None:
    q8 = ensure_gguf(model, "q8_0", quantize=None)
    assert q8.parent == model.with_name("tiny.gguf") and q8.name.startswith("q8_0-")
    assert q8.name.endswith(f"-v{EXPORT_VERSION}.gguf") and _file_type(q8) == 7  # llama.cpp's MOSTLY_Q8_0
    made = q8.stat().st_mtime_ns
    assert ensure_gguf(model, "Q8_0", quantize=None) == q8 and q8.stat().st_mtime_ns == made  # kept
    # unset: the folder's own dtype (the tiny model is bf16), nothing rounded further
    assert _file_type(ensure_gguf(model, None, quantize=None)) == 32


def test_a_gguf_file_is_served_as_it_is(model: Path) -> None:
    f32 = ensure_gguf(model, "f32", quantize=None)
    assert ensure_gguf(f32, None, quantize=None) == f32


def test_lower_bits_come_from_the_builds_quantizer(model: Path) -> None:
    quantize = installed_binary(QUANTIZE)
    assert quantize is not None, "make engines builds llama.cpp (make test runs it)"
    q2 = ensure_gguf(model, "q2_k", quantize=quantize)
    assert _file_type(q2) == 10 and q2.name.startswith("q2_k-")  # llama.cpp's MOSTLY_Q2_K
    assert ensure_gguf(model, "f32", quantize=None).is_file()  # its source, kept too
    requantized = ensure_gguf(q2, "q4_k_m", quantize=quantize)
    assert requantized.name == f"{q2.stem}.q4_k_m.gguf" and _file_type(requantized) == 15


def test_what_cannot_be_made_is_refused_with_one_line(model: Path, tmp_path: Path) -> None:
    with pytest.raises(
        FailedPrecondition, match=r"q4_k_m is made by llama\.cpp's llama-quantize.*make engines"
    ):
        ensure_gguf(model, "q4_k_m", quantize=None)
    with pytest.raises(InvalidArgument, match="'q3_x' is not a GGUF file type"):
        ensure_gguf(model, "q3_x", quantize=None)
    with pytest.raises(InvalidArgument, match=r"neither a model folder nor a \.gguf file"):
        ensure_gguf(tmp_path / "nothing", None, quantize=None)
    assert file_types() == ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k_m", "q2_k")
