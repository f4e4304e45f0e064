"""The chat format each endpoint's model lays prompts out in, for the prefix hashes.

A route table names the endpoint's model (`RouteTable.model`, the endpoint's `EndpointSpec.model`).
Where that is a model folder this gateway can read (the embedded default, or a shared volume), its
prompts are rendered with that model's chat template and counted with its tokenizer, so the hashes
cut the same token blocks the engine's prefix cache does. Otherwise the gateway's own folder
(`EVERTUNE_GATEWAY_TOKENIZER_DIR`, else evertune's local model) stands in. Folders are read once,
on the publisher's hashing thread, never on the event loop.
"""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from evertune.domain.model.chat import ChatFormat
from evertune.errors import EvertuneError

log = structlog.get_logger(__name__)


class ChatFormats:
    """Chat formats by model name, read once; the default where a model is no readable folder."""

    def __init__(self, default: ChatFormat) -> None:
        self.default = default
        self._by_model: dict[str, ChatFormat] = {}
        self._lock = threading.Lock()

    def for_model(self, model: str) -> ChatFormat:
        """The chat format of `model` (a model folder's path), or the default. Blocking on the first
        call per model (reads the folder's tokenizer): call it off the event loop."""
        with self._lock:
            known = self._by_model.get(model)
            if known is not None:
                return known
            found = self.default
            folder = Path(model) if model else None
            if folder is not None and folder.is_absolute() and (folder / "tokenizer_config.json").is_file():
                try:
                    found = ChatFormat.of_folder(folder)
                except (EvertuneError, OSError, ValueError) as err:
                    log.warning(
                        "model folder unreadable, default tokenizer used", model=model, error=str(err)
                    )
            self._by_model[model] = found
            return found
