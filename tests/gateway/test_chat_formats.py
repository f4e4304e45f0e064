"""Prefix hashes count each endpoint's prompts in its own model's chat format and tokenizer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evertune.domain.model import make_model
from evertune.domain.model.chat import ChatFormat
from evertune.gateway.chat_formats import ChatFormats
from evertune.gateway.prefix import chain_hashes, endpoint_key
from evertune.gateway.publisher import Pending, hash_prompts
from evertune.v1 import telemetry_pb2

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SECRET = b"s"
CHAT = [{"role": "system", "content": "You book tables. " * 60}, {"role": "user", "content": "Friday at 7?"}]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """evertune's tiny model, and a folder of the same tokenizer with a ChatML template."""
    root = tmp_path_factory.mktemp("formats")
    tiny = make_model(root / "tiny", size="tiny")
    chatml = root / "chatml"
    chatml.mkdir()
    shutil.copy(tiny / "tokenizer.json", chatml / "tokenizer.json")
    config = json.loads((tiny / "tokenizer_config.json").read_text())
    (chatml / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": CHATML}))
    return tiny, chatml


def _hashed(formats: ChatFormats, model: str, messages: list[dict[str, str]]) -> list[int]:
    item = Pending(record=telemetry_pb2.RequestRecord(endpoint="ep"), messages=messages, model=model)
    hash_prompts([item], formats, SECRET, 16)
    assert item.messages is None  # dropped once hashed
    return list(item.record.prefix_hashes)


def test_each_endpoint_model_counts_its_own_layout(folders: tuple[Path, Path]) -> None:
    tiny, chatml = folders
    formats = ChatFormats(ChatFormat.of_folder(tiny))
    own = ChatFormat.of_folder(chatml)
    expected = chain_hashes(endpoint_key(SECRET, "ep"), own.ids(CHAT), 16)
    assert _hashed(formats, str(chatml), CHAT) == expected
    # Another layout gives other blocks: the default's hashes are not the model's.
    default = chain_hashes(endpoint_key(SECRET, "ep"), ChatFormat.of_folder(tiny).ids(CHAT), 16)
    assert default != expected
    # A model this gateway cannot read (a hub id, a relative or missing path): the default.
    for model in ("HuggingFaceTB/SmolLM2-135M-Instruct", "", "/nowhere/model"):
        assert _hashed(formats, model, CHAT) == default


def test_a_chat_the_template_refuses_gets_no_hashes(folders: tuple[Path, Path]) -> None:
    tiny, _ = folders
    formats = ChatFormats(ChatFormat.of_folder(tiny))
    assert _hashed(formats, "", [{"role": "tool", "content": "x " * 100}]) == []
