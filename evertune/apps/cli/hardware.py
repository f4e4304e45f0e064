"""`evertune hardware show`: this machine's fingerprint, as a runner here reports it."""

from __future__ import annotations

import json

from evertune.domain.engines.fingerprint import detect


def show(*, as_json: bool) -> int:
    """Print the fingerprint (one JSON object with `--json`, else one line per field)."""
    fingerprint = detect()
    if as_json:
        print(json.dumps(fingerprint.as_dict(), sort_keys=True))
        return 0
    rows = [
        ("id", fingerprint.id),
        ("tier", fingerprint.tier),
        ("kind", fingerprint.kind),
        ("cpu", f"{fingerprint.model} ({fingerprint.machine})"),
        ("signature", fingerprint.signature or "not reported"),
        ("cores", str(fingerprint.cores)),
        ("memory", f"{fingerprint.memory_gib:.1f} GiB"),
        ("isa", " ".join(fingerprint.features) or "none of the tracked features"),
    ]
    rows += [
        (f"device {i}", f"{d.name}, compute {d.compute_capability}, {d.memory_gib:.0f} GiB")
        for i, d in enumerate(fingerprint.devices)
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0
