"""Redis in the compose and Swarm files, read offline: it asks for a password and publishes no
port, and every service reaches it with the password (docs/RELIABILITY.md, "Redis reachable by
others"). tests/e2e/test_compose.py checks the same on the running stack; this test runs
everywhere, Docker or not, so a change to the files is caught before any image is built."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FILES = ["docker-compose.yml", "docker-compose.production.yml", "deploy/swarm/docker-stack.yml"]
PASSWORD = re.compile(r"^\$\{DEXP_REDIS_PASSWORD(:-(?P<default>[^}]+)|:\?[^}]+)\}$")
URL = re.compile(r"^redis://:(?P<password>\$\{DEXP_REDIS_PASSWORD[^}]*\})@redis:6379/0$")


class ComposeLoader(yaml.SafeLoader):
    """YAML with Compose's merge tags: `!reset` (drop the inherited value) and `!override`."""


ComposeLoader.add_constructor("!reset", lambda loader, node: None)
ComposeLoader.add_constructor(
    "!override",
    lambda loader, node: (
        loader.construct_sequence(node)
        if isinstance(node, yaml.SequenceNode)
        else loader.construct_mapping(node)
        if isinstance(node, yaml.MappingNode)
        else loader.construct_scalar(node)
    ),
)


def services(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load((ROOT / name).read_text(), Loader=ComposeLoader)
    return dict(loaded["services"])


@pytest.mark.parametrize("name", FILES)
def test_redis_asks_for_a_password_and_publishes_no_port(name: str) -> None:
    redis = services(name)["redis"]
    assert "ports" not in redis
    command = [str(word) for word in redis["command"]]
    password = command[command.index("--requirepass") + 1]
    match = PASSWORD.match(password)
    assert match, password
    if "production" in name:
        assert match["default"] is None  # no default: compose stops while it is unset


@pytest.mark.parametrize("name", FILES)
def test_every_service_reaches_redis_with_the_password(name: str) -> None:
    urls = {
        service: spec["environment"]["DEXP_REDIS_URL"]
        for service, spec in services(name).items()
        if "DEXP_REDIS_URL" in (spec.get("environment") or {})
    }
    if name != "docker-compose.production.yml":  # an override names only what it changes
        assert {"coordinator", "agent", "load_generator"} <= set(urls)
    assert urls
    for service, url in urls.items():
        assert URL.match(url), (service, url)
