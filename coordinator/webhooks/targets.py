"""Where a webhook may POST: no server-side request forgery.

A URL is http(s), with a host and no credentials. Its host is resolved here (getaddrinfo on the
loop) and every address it resolves to is checked: a loopback, link-local, private, reserved,
multicast or unspecified one is refused unless it lies in a network of DEXP_WEBHOOK_HOSTS; and
when that setting is not empty, only the host names and networks it lists are targets at all. The
request then goes to the checked address itself (`Target.url`, with the Host header and the TLS
server name of the URL), so a DNS answer that changes between the check and the connection
(rebinding) cannot send it elsewhere. The check runs at creation (422) and again before every
attempt.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from coordinator.errors import Invalid

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class AllowedHosts:
    """DEXP_WEBHOOK_HOSTS: host names (matched as written in the URL) and networks (CIDR, or one
    address), comma-separated. Empty: any host whose addresses are all public."""

    names: frozenset[str]
    networks: tuple[Network, ...]

    @classmethod
    def parse(cls, value: str) -> AllowedHosts:
        names: set[str] = set()
        networks: list[Network] = []
        for entry in (e.strip() for e in value.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                if (
                    "/" in entry
                    or ":" in entry
                    or not all(
                        part and part.replace("-", "").isalnum() for part in entry.split(".")
                    )
                ):
                    raise ValueError(
                        f"DEXP_WEBHOOK_HOSTS: {entry!r} is neither a host name nor a network"
                    ) from None
                names.add(entry.lower().rstrip("."))
        return cls(frozenset(names), tuple(networks))

    @property
    def empty(self) -> bool:
        return not self.names and not self.networks

    def listed(self, address: Address) -> bool:
        return any(address in network for network in self.networks)


def public(address: Address) -> bool:
    """Whether an address is on the public internet (an IPv4-mapped IPv6 one as its IPv4)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not (
        address.is_loopback
        or address.is_link_local
        or address.is_private
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
    )


@dataclass(frozen=True)
class Target:
    """A checked destination: the URL with the checked address as its host, and what the request
    must say of the original host (Host header, TLS server name)."""

    url: str
    host_header: str
    server_name: str | None  # https: the name the certificate must carry


def parse(url: str) -> SplitResult:
    """The URL's parts, or Invalid (422) saying what is wrong with its form."""
    if len(url) > 2048:
        raise Invalid("url: longer than 2048 characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError as exc:
        raise Invalid(f"url: not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise Invalid("url: the scheme must be http or https")
    if not parts.hostname:
        raise Invalid("url: no host")
    if parts.username is not None or parts.password is not None:
        raise Invalid("url: credentials in the URL are refused (the signature authenticates)")
    if parts.fragment:
        raise Invalid("url: a fragment is never sent; remove it")
    return parts


async def resolve(host: str, port: int) -> list[Address]:
    """Every address `host` resolves to (an address literal: itself)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Invalid(f"url: the host {host!r} does not resolve ({exc})") from None
    addresses = {ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos}
    if not addresses:
        raise Invalid(f"url: the host {host!r} does not resolve")
    return sorted(addresses, key=lambda a: (a.version, int(a)))


async def check(url: str, allowed: AllowedHosts) -> Target:
    """The checked target of `url`, or Invalid (422) saying why it is refused."""
    parts = parse(url)
    host = (parts.hostname or "").lower().rstrip(".")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    addresses = await resolve(host, port)
    name_listed = host in allowed.names
    for address in addresses:
        if allowed.listed(address):
            continue
        if not public(address):
            raise Invalid(
                f"url: the host {host!r} resolves to {address}, a loopback, link-local, private "
                "or reserved address not listed in DEXP_WEBHOOK_HOSTS"
            )
        if not allowed.empty and not name_listed:
            raise Invalid(f"url: the host {host!r} is not listed in DEXP_WEBHOOK_HOSTS")
    address = addresses[0]
    literal = f"[{address}]" if address.version == 6 else str(address)
    pinned = parts._replace(netloc=f"{literal}:{port}")
    host_header = parts.netloc.rsplit("@", 1)[-1]
    return Target(
        url=pinned.geturl(),
        host_header=host_header,
        server_name=host if parts.scheme == "https" else None,
    )
