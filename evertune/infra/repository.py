"""Where the repository checkout is, resolved once: everything evertune reads from the checkout
(stream definitions, migrations, schemas, the contracts, shared traces) is found from here.

evertune runs from its checkout (an editable install, as `make install` makes it), so the files
under `infra/` and `proto/` sit beside the package rather than inside it.
"""

from __future__ import annotations

from pathlib import Path

#: The checkout's root: the folder that holds `evertune/`, `infra/` and `proto/`.
ROOT = Path(__file__).resolve().parents[2]
#: Deployment definitions: NATS streams, ClickHouse migrations, Kubernetes schemas.
INFRA = ROOT / "infra"
