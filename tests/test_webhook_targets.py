"""Webhooks without I/O: what DEXP_WEBHOOK_HOSTS admits, which addresses are public, the signature
a receiver checks, and the Redis commands of the webhooks' scripts (its ACL user allows them)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import re

import pytest

from common import redis_acl as acl
from coordinator.errors import Invalid
from coordinator.webhooks import records, targets
from coordinator.webhooks.signing import signature, valid


def check(url: str, hosts: str = "") -> targets.Target:
    return asyncio.run(targets.check(url, targets.AllowedHosts.parse(hosts)))


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "0.0.0.0", "::1",
     "fe80::1", "fc00::1", "::ffff:10.0.0.1", "224.0.0.1", "100.64.0.1", "240.0.0.1", "::"],
)  # fmt: skip
def test_non_public_addresses_are_refused_unless_listed(address: str) -> None:
    assert not targets.public(ipaddress.ip_address(address))
    literal = f"[{address}]" if ":" in address else address
    with pytest.raises(Invalid, match="not listed in DEXP_WEBHOOK_HOSTS"):
        check(f"http://{literal}/hook")
    network = "::/0" if ":" in address else "0.0.0.0/0"
    assert check(f"http://{literal}:8080/hook", network).url.endswith(":8080/hook")


def test_a_listed_name_still_needs_public_addresses_and_others_are_refused() -> None:
    with pytest.raises(Invalid, match=re.escape("resolves to 127.0.0.1")):
        check("http://localhost/hook", "localhost")
    with pytest.raises(Invalid, match="not listed"):
        check("http://93.184.215.14/", "hooks.example.com")  # listed names only
    target = check("https://93.184.215.14:8443/h?x=1")  # nothing listed: any public host
    assert target.url == "https://93.184.215.14:8443/h?x=1"
    assert target.host_header == "93.184.215.14:8443" and target.server_name == "93.184.215.14"


def test_the_request_goes_to_the_checked_address() -> None:
    target = check("http://localhost:9000/p", "127.0.0.0/8,::1")
    assert target.url in ("http://127.0.0.1:9000/p", "http://[::1]:9000/p")
    assert target.host_header == "localhost:9000" and target.server_name is None


@pytest.mark.parametrize("entry", ["http://x", "10.0.0.0/33", "a..b", "host/x", "*"])
def test_a_bad_entry_of_the_setting_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="DEXP_WEBHOOK_HOSTS"):
        targets.AllowedHosts.parse(entry)


def test_the_signature_is_the_documented_hmac() -> None:
    secret, body = "ab" * 32, b'{"event":"reset"}'
    expected = hmac.new(secret.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert signature(secret, 1700000000, body) == "sha256=" + expected
    assert valid(secret, "1700000000", body, "sha256=" + expected)
    assert not valid(secret, "1700000001", body, "sha256=" + expected)  # the timestamp is signed


def test_the_scripts_call_only_what_the_coordinator_user_may() -> None:
    allowed = set(acl.USERS[acl.COORDINATOR].commands)
    for script in (records.ADD, records.ENQUEUE, records.CLAIM, records.FINISH, records.REMOVE):
        called = {c.lower() for c in re.findall(r"redis\.call\('(\w+)'", script)}
        assert called and called <= allowed, called - allowed
