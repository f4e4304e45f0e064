"""Where evertune may send what a user configured: alert receivers' URLs.

An endpoint's owner chooses its alert URLs, and the sla-monitor POSTs to them from inside the
platform's network. Left open, that is a way in: the cloud's metadata service (169.254.169.254),
evertune's own services on loopback, anything on the private network. So a URL whose host is (or
resolves to) an internal address (loopback, link-local, private, reserved, multicast,
unspecified; the IPv4 inside an IPv4-mapped IPv6 address counts as itself) is refused unless an
operator allowed its network (`EVERTUNE_ALERT_ALLOWED_NETWORKS`, CIDRs). The embedded
single-machine setup (`evertune up` with its own NATS) allows loopback when nothing is set, so its
demo receivers work.

Checked twice: when a route is created (`OutboundPolicy.refusal`, the URL as written, no DNS) and
when an alert is sent (the sla-monitor's `GuardedResolver`: every address a name resolves to, so a name that
resolves to an internal address later is refused too; literal addresses are checked by
`refusal`, which aiohttp does not resolve). Pure: no I/O, no aiohttp, so settings can import it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from evertune.errors import InvalidArgument

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Networks the embedded single-machine setup allows when the operator set none.
LOOPBACK: tuple[IpNetwork, ...] = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
#: Host names that are internal whatever DNS says, with the address they stand for.
INTERNAL_NAMES: dict[str, IpAddress] = {
    "localhost": ipaddress.ip_address("127.0.0.1"),
    "metadata.google.internal": ipaddress.ip_address("169.254.169.254"),
    "metadata": ipaddress.ip_address("169.254.169.254"),
    "instance-data": ipaddress.ip_address("169.254.169.254"),
}


def internal(address: IpAddress) -> bool:
    """Whether `address` is inside the platform rather than on the internet."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_private
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
    )


def parse_networks(text: str) -> tuple[IpNetwork, ...]:
    """Networks from a comma-separated CIDR list ("" = none); `InvalidArgument` naming a bad one."""
    networks = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise InvalidArgument(f"{item!r} is not a network (CIDR such as 10.0.0.0/8)") from None
    return tuple(networks)


@dataclass(frozen=True)
class OutboundPolicy:
    """Which internal networks alert URLs may reach (everything on the internet is allowed)."""

    allowed: tuple[IpNetwork, ...] = ()  #: internal networks an operator allowed

    @classmethod
    def from_setting(cls, networks: str, *, embedded: bool) -> OutboundPolicy:
        """The policy of `EVERTUNE_ALERT_ALLOWED_NETWORKS`; when empty, loopback for the embedded
        single-machine setup and nothing internal otherwise."""
        allowed = parse_networks(networks)
        return cls(allowed=allowed or (LOOPBACK if embedded else ()))

    def refuses(self, address: IpAddress) -> bool:
        """Whether an alert may not go to `address`."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return internal(address) and not any(address in network for network in self.allowed)

    def refusal(self, url: str) -> str:
        """Why an alert may not go to `url` as written ("" when it may; no DNS lookup)."""
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
        if not host:
            return f"{url!r} names no host"
        try:
            address: IpAddress | None = ipaddress.ip_address(host)
        except ValueError:
            address = INTERNAL_NAMES.get(host)
            if address is None and host.endswith(".localhost"):
                address = INTERNAL_NAMES["localhost"]
        if address is not None and self.refuses(address):
            named = host if host == str(address) else f"{host} ({address})"
            return (
                f"{named} is an internal address; alerts go to internal networks only when"
                " EVERTUNE_ALERT_ALLOWED_NETWORKS allows them"
            )
        return ""
