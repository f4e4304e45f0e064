"""A small model of Kubernetes NetworkPolicy semantics (networking.k8s.io/v1), enough to ask what a
rendered policy lets through: label selectors (`matchLabels`, `matchExpressions`), peers
(`podSelector`, `namespaceSelector`, both, `ipBlock`), ports, and that a rule list without peers
means everyone. Namespaces carry only their automatic `kubernetes.io/metadata.name` label.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    """One side of a connection: a pod (labels, namespace) or, with `ip` alone, an outside address."""

    labels: dict[str, str] = field(default_factory=dict)
    namespace: str = ""
    ip: str | None = None


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a LabelSelector matches `labels` (an empty selector matches everything)."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_matches(peer: dict[str, Any], other: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        if other.ip is None:
            return False
        address = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except", [])
        )
    if other.ip is not None and not other.labels:
        return False  # an outside address is no pod
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": other.namespace}):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector", {}), other.labels)


def _port_matches(ports: list[dict[str, Any]] | None, protocol: str, port: int) -> bool:
    if not ports:
        return True
    return any(p.get("protocol", "TCP") == protocol and p.get("port") in (None, port) for p in ports)


def _allowed(policy: dict[str, Any], direction: str, other: Pod, protocol: str, port: int) -> bool:
    spec = policy["spec"]
    types = spec.get("policyTypes", ["Ingress"])
    if direction.capitalize() not in types:
        return True  # not isolated in that direction by this policy
    peers_key = "from" if direction == "ingress" else "to"
    namespace = policy["metadata"]["namespace"]
    for rule in spec.get(direction, []) or []:
        if not _port_matches(rule.get("ports"), protocol, port):
            continue
        peers = rule.get(peers_key)
        if not peers or any(_peer_matches(p, other, namespace) for p in peers):
            return True
    return False


def applies_to(policy: dict[str, Any], pod: Pod) -> bool:
    """Whether `policy` selects `pod`."""
    return pod.namespace == policy["metadata"]["namespace"] and selects(
        policy["spec"]["podSelector"], pod.labels
    )


def ingress_allowed(policy: dict[str, Any], source: Pod, *, port: int, protocol: str = "TCP") -> bool:
    """Whether `policy` lets `source` connect to the pods it selects on `port`."""
    return _allowed(policy, "ingress", source, protocol, port)


def egress_allowed(policy: dict[str, Any], destination: Pod, *, port: int, protocol: str = "TCP") -> bool:
    """Whether `policy` lets the pods it selects connect to `destination` on `port`."""
    return _allowed(policy, "egress", destination, protocol, port)
