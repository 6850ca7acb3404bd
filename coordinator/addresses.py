"""The client a per-address bound counts: an IPv4 address, or an IPv6 address's /64.

One IPv6 host usually gets a whole /64 (SLAAC, a home router's prefix), so counting exact IPv6
addresses would give one host 2^64 fresh buckets. The production proxy (deploy/proxy/haproxy.cfg,
`src,ipmask(32,64)`) groups them so; every per-address bound of the coordinator does the same
(connections per client, failed credentials, enrollments, event streams), so that the two agree.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

IPV6_PREFIX = 64


@lru_cache(maxsize=65_536)
def client_group(address: str) -> str:
    """`address` itself for IPv4 (an IPv4-mapped IPv6 address as its IPv4), its /64 for IPv6
    ('2001:db8:1:2::/64'), and anything else (a unix socket, a test client's name) unchanged."""
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])  # a zone id is not the host
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, IPV6_PREFIX), strict=False))
    return str(parsed)
