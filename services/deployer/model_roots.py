"""Which model folders a tenant's endpoints may serve (pure).

An engine serves whatever path its configuration names, so without a rule tenant A could serve
tenant B's model folder, or a hub id could download anything. With `EVERTUNE_DEPLOYER_MODEL_ROOTS`
set (JSON: tenant -> folders, `"*"` for folders every tenant may use), a model must be a path
that, with `..` and symbolic links resolved, lies inside one of its tenant's folders; a hub id (no
leading `/`) is refused unless `EVERTUNE_DEPLOYER_ALLOW_HUB_MODELS` is set. Unset, any model is
served (the single-machine default; the deployer warns at start when it has tokens, that is
tenants, and no roots).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from evertune.errors import InvalidArgument

#: The key of folders every tenant may serve models from.
EVERY_TENANT = "*"


@dataclass(frozen=True)
class ModelRoots:
    """The folders each tenant's models must lie in."""

    roots: Mapping[str, tuple[Path, ...]]  #: tenant ("*" = every tenant) -> allowed folders, resolved
    allow_hub: bool = False  #: hub ids (not paths) may be served

    @classmethod
    def parse(cls, text: str, *, allow_hub: bool = False) -> ModelRoots | None:
        """The roots of the setting's JSON ({"tenant": ["/folder", ...]}); None when empty (no
        rule). `InvalidArgument` with one line for anything else."""
        if not text.strip():
            return None
        try:
            data = json.loads(text)
        except ValueError as err:
            raise InvalidArgument(f"not JSON: {err}") from None
        if not isinstance(data, dict) or not data:
            raise InvalidArgument('must be an object of tenant -> folders, e.g. {"team-a": ["/models/a"]}')
        roots: dict[str, tuple[Path, ...]] = {}
        for tenant, folders in data.items():
            if not isinstance(folders, list) or not all(
                isinstance(f, str) and f.startswith("/") for f in folders
            ):
                raise InvalidArgument(f"{tenant!r}: a list of absolute folders")
            roots[tenant] = tuple(Path(f).resolve() for f in folders)
        return cls(roots=roots, allow_hub=allow_hub)

    def refusal(self, model: str, *, tenant: str) -> str:
        """Why `tenant` may not serve `model` ("" when it may)."""
        if not model.startswith("/"):
            if self.allow_hub:
                return ""
            return f"{model!r} is not a local path (hub models are off: EVERTUNE_DEPLOYER_ALLOW_HUB_MODELS)"
        resolved = Path(model).resolve()
        allowed = (*self.roots.get(tenant, ()), *self.roots.get(EVERY_TENANT, ()))
        if any(resolved.is_relative_to(root) for root in allowed):
            return ""
        return f"{model} is outside the folders tenant {tenant!r} may serve models from"
