"""The files evertune reads at run time, found as package data: the same in a checkout's editable
install and in an installed wheel, with no path into a checkout.

`infra/` (NATS definitions, ClickHouse migrations, Kubernetes manifests and schemas, Prometheus
rules, Grafana dashboards, the image's build files) and `proto/` (the contracts) stay where the
repository's layout puts them, the one source of each. pyproject.toml maps them into the package
as `evertune.definitions` and `evertune.contracts`: an editable install reads the checkout's own
files, a wheel (and an sdist) carries them.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def _folder(package: str) -> Path:
    """The folder of a data package, on disk (nats-server and ClickHouse read them by path)."""
    found = files(package)
    if not isinstance(found, Path):
        raise RuntimeError(f"{package} is not on disk ({found!r}): install evertune unzipped")
    return found


#: Deployment definitions: NATS streams and servers, ClickHouse migrations, Kubernetes manifests and
#: schemas, Prometheus rules, Grafana dashboards (the repository's `infra/`).
INFRA = _folder("evertune.definitions")
#: The contracts' `.proto` files, under `evertune/v1/` (the repository's `proto/`).
PROTO = _folder("evertune.contracts")
