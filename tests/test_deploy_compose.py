"""Redis in the compose and Swarm files, read offline: it publishes no port, lets nobody in without a
user, and has exactly the users of common/redis_acl.py (the default one off); every service logs in
as its own user, with its own password (docs/RELIABILITY.md, "Redis reachable by others", "Redis
users"). tests/e2e/test_compose.py checks the same on the running stack, and
tests/e2e/test_redis_acl.py what each user may do; this test runs everywhere, Docker or not, so a
change to the files is caught before any image is built."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from common import redis_acl as acl
from coordinator.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = "docker-compose.production.yml"
FILES = ["docker-compose.yml", PRODUCTION, "deploy/swarm/docker-stack.yml"]
# The compose service -> the Redis user it logs in as.
SERVICE_USERS = {
    "coordinator": acl.COORDINATOR,
    "agent": acl.AGENT,
    "load_generator": acl.LOAD_GENERATOR,
}
URL = re.compile(r"^redis://(?P<user>[a-z-]+):(?P<password>\$\{[^}]+\})@redis:6379/0$")


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


def password(user: acl.RedisUser, name: str) -> str:
    """How `name` gives `user`'s password: a development default, or required (production)."""
    variable = user.password_variable
    if name == PRODUCTION:
        return f"${{{variable}:?set {variable} in .env (see .env.example)}}"
    return f"${{{variable}:-{user.development_password}}}"


def expected_users(name: str) -> list[str]:
    return acl.server_args({u: password(acl.USERS[u], name) for u in acl.SERVICES})


@pytest.mark.parametrize("name", FILES)
def test_redis_has_exactly_the_users_of_redis_acl_and_publishes_no_port(name: str) -> None:
    redis = services(name)["redis"]
    assert "ports" not in redis
    command = [str(word) for word in redis["command"]]
    assert command[0] == "redis-server"
    assert "--requirepass" not in command, "the default user is off: no password of its own"
    users = command[command.index("--user") :]
    expected = expected_users(name)
    assert users == expected, "not common.redis_acl.server_args: run scripts/redis_acl_files.py"
    assert users[:3] == ["--user", "default", "off"]


@pytest.mark.parametrize("name", FILES)
def test_every_service_logs_in_as_its_own_user(name: str) -> None:
    urls = {
        service: spec["environment"]["DEXP_REDIS_URL"]
        for service, spec in services(name).items()
        if "DEXP_REDIS_URL" in (spec.get("environment") or {})
    }
    assert set(urls) == set(SERVICE_USERS)
    for service, url in urls.items():
        match = URL.match(url)
        assert match, (service, url)
        user = acl.USERS[SERVICE_USERS[service]]
        assert match["user"] == user.name, (service, url)
        assert match["password"] == password(user, name), (service, url)


@pytest.mark.parametrize("name", FILES)
def test_the_healthcheck_logs_in_as_a_user(name: str) -> None:
    redis = services(name)["redis"]
    secret = redis["environment"]["REDISCLI_AUTH"]
    assert secret == password(acl.USERS[acl.COORDINATOR], name)
    if name != PRODUCTION:  # an override names only what it changes
        (test,) = [t for t in redis["healthcheck"]["test"] if "redis-cli" in t]
        assert f"redis-cli --user {acl.COORDINATOR} ping" in test and " -a " not in test


@pytest.mark.parametrize("service", acl.SERVICES)
def test_a_production_coordinator_refuses_each_development_password(service: str) -> None:
    """A development password of any user, in the coordinator's URL, stops it in production."""
    user = acl.USERS[service]
    assert user.password_variable and len(user.development_password) >= 16  # not refused as short
    url = f"redis://coordinator:{user.development_password}@redis:6379/0"
    with pytest.raises(ValidationError, match="Redis password in DEXP_REDIS_URL is a development"):
        Settings(environment="production", admin_token="x" * 32, redis_url=url)


def test_env_example_asks_for_each_password() -> None:
    example = (ROOT / ".env.example").read_text()
    required = {line.removesuffix("=") for line in example.splitlines() if line.endswith("=")}
    assert {acl.USERS[u].password_variable for u in acl.SERVICES} <= required
    assert "DEXP_REDIS_PASSWORD" not in example
