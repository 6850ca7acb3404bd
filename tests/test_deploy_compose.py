"""Redis in the compose and Swarm files, read offline: it publishes no port, lets nobody in without a
user, and has exactly the users of common/redis_acl.py (the default one off); every service logs in
as its own user, with its own password (docs/RELIABILITY.md, "Redis reachable by others", "Redis
users"). tests/e2e/test_compose.py checks the same on the running stack, and
tests/e2e/test_redis_acl.py what each user may do; this test runs everywhere, Docker or not, so a
change to the files is caught before any image is built."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from agent.settings import AgentSettings
from common import redis_acl as acl
from coordinator.settings import Settings
from load_generator.settings import LoadSettings

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


# ----------------------------------------------------------------------------- the proxy
# The reverse proxy of the production files (deploy/proxy/), and Swarm's production stack with its
# Docker secrets (deploy/swarm/production.yml): what their content promises, checked offline.
# tests/e2e/test_compose.py and test_swarm.py attack and run them.

PROXY = ROOT / "deploy" / "proxy"
SWARM_PRODUCTION = "deploy/swarm/production.yml"
EDGE_SUBNET = "${DEXP_EDGE_SUBNET:-172.16.213.0/24}"


def haproxy_config() -> str:
    return (PROXY / "haproxy.cfg").read_text()


def seconds(config: str, directive: str) -> float:
    (value,) = re.findall(rf"^\s*{directive} (\d+)s$", config, re.M)
    return float(value)


def test_the_proxy_keeps_the_coordinators_edge_limits() -> None:
    """The proxy's deadlines and body bound are the coordinator's own defaults, so a client meets
    the same edge whether the proxy or the coordinator stops it first; X-Forwarded-For is set
    (never appended to what the client sent); every limit has a reason written above it."""
    config, settings = haproxy_config(), Settings()
    timeouts = re.findall(r"^\s*timeout http-request (\d+)s$", config, re.M)
    assert timeouts == [str(int(settings.header_timeout_seconds))]
    assert settings.body_timeout_seconds == settings.header_timeout_seconds
    assert config.count("option http-buffer-request") == 2  # bodies under the deadline too
    assert seconds(config, "timeout http-keep-alive") == settings.keep_alive_seconds
    assert f"req.hdr_val(content-length) gt {settings.max_body_bytes} }}" in config
    assert f"at most {settings.max_body_bytes} bytes" in config
    assert "http-request set-header X-Forwarded-For %[src]" in config
    assert "option forwardfor" not in config and "add-header X-Forwarded-For" not in config
    assert "bind :8443 ssl crt /run/secrets/dexp_tls.pem alpn http/1.1" in config
    assert "ssl-min-ver TLSv1.2" in config
    for limit in ("tcp-request connection reject", "sc0_http_req_rate gt", "timeout client"):
        (line,) = [i for i, text in enumerate(config.splitlines()) if limit in text]
        assert config.splitlines()[line - 1].strip().startswith("#"), limit


def test_the_proxys_errors_are_json() -> None:
    """Every error HAProxy answers itself is the API's {"detail": ...} with a right length."""
    config = haproxy_config()
    files = set(re.findall(r"errorfile \d+ (/etc/dexp-proxy/errors/\d+\.http)", config))
    assert {f"/etc/dexp-proxy/errors/{p.name}" for p in (PROXY / "errors").iterdir()} == files
    for path in sorted((PROXY / "errors").iterdir()):
        head, _, body = path.read_bytes().partition(b"\r\n\r\n")
        status, *headers = head.decode().split("\r\n")
        assert status.startswith(f"HTTP/1.1 {path.stem} "), path
        fields = dict(line.lower().split(": ", 1) for line in headers)
        assert fields["content-type"] == "application/json", path
        assert int(fields["content-length"]) == len(body), path
        assert set(json.loads(body)) == {"detail"}, path
    answers = re.findall(r"return status (\d+) content-type (\S+) .*string '([^']*)'", config)
    assert {status for status, _, _ in answers} == {"200", "404", "413", "429"}
    assert all(kind == "application/json" and json.loads(body) for _, kind, body in answers)


def test_the_proxys_image_builds_from_base_image() -> None:
    dockerfile = (PROXY / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.12-slim\nFROM ${BASE_IMAGE}\n" in dockerfile
    assert "apt-get install -y --no-install-recommends haproxy" in dockerfile
    assert "STOPSIGNAL SIGUSR1" in dockerfile  # haproxy -db ignores SIGTERM
    assert re.search(r"^\s*user haproxy$", haproxy_config(), re.M)  # serves unprivileged


def networks_of(spec: dict[str, Any]) -> set[str]:
    return set(spec.get("networks") or ["default"])


@pytest.mark.parametrize("name", [PRODUCTION, SWARM_PRODUCTION])
def test_only_the_proxy_faces_clients_and_the_coordinator_trusts_it_alone(name: str) -> None:
    """The coordinator publishes no port; the proxy publishes HTTPS (compose: on 127.0.0.1 by
    default). The edge network holds the proxy and the coordinators only, has no route out, and
    is the one source of X-Forwarded-For the coordinator believes."""
    loaded = yaml.load((ROOT / name).read_text(), Loader=ComposeLoader)
    specs = loaded["services"]
    assert specs["coordinator"].get("ports") is None  # compose: !reset
    assert specs["coordinator"]["environment"]["DEXP_TRUSTED_PROXIES"] == EDGE_SUBNET
    edge = loaded["networks"]["edge"]
    assert edge["internal"] is True and edge["ipam"]["config"] == [{"subnet": EDGE_SUBNET}]
    on_edge = {service for service, spec in specs.items() if "edge" in networks_of(spec)}
    assert on_edge == {"coordinator", "proxy"}
    assert networks_of(specs["proxy"]) == {"public", "edge"}
    (port,) = specs["proxy"]["ports"]
    if name == PRODUCTION:
        assert port == "${DEXP_PROXY_HOST:-127.0.0.1}:${DEXP_PROXY_PORT:-443}:8443"
        assert specs["proxy"]["environment"]["DEXP_PROXY_UPSTREAM"] == "coordinator:8000"
    else:  # host mode: the proxy sees the client's address, not the routing mesh's
        assert (port["target"], port["mode"]) == (8443, "host")
        assert specs["proxy"]["environment"]["DEXP_PROXY_UPSTREAM"] == "tasks.coordinator:8000"
    for target in ("dexp_tls.pem", "dexp_tls.pem.key"):
        assert target in [s["target"] for s in specs["proxy"]["secrets"]]


def swarm_secrets_script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "swarm_secrets", ROOT / "scripts/swarm_secrets.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_swarm_production_stack_holds_no_secret() -> None:
    """deploy/swarm/production.yml names no secret value or secret variable: every secret is a
    Docker secret that scripts/swarm_secrets.py makes, read from its file (DEXP_X_FILE, Redis's
    --aclfile); each service reads its own Redis URL. Production mode, tickets only."""
    text = (ROOT / SWARM_PRODUCTION).read_text()
    for variable in ("DEXP_ADMIN_TOKEN}", "DEXP_ENROLLMENT_SECRET", "_PASSWORD", "REDISCLI_AUTH"):
        assert variable not in text.split("version:")[1], variable
    loaded = yaml.load(text, Loader=ComposeLoader)
    specs, declared = loaded["services"], loaded["secrets"]
    made = swarm_secrets_script().contents("token", dict.fromkeys(acl.SERVICES, "pw"), b"", b"")
    assert {f"${{DEXP_SECRETS:-dexp}}_{suffix}" for suffix in made} - {
        "${DEXP_SECRETS:-dexp}_tickets"
    } | {"${DEXP_TICKETS_SECRET:-dexp_tickets}"} == {s["name"] for s in declared.values()}
    assert all(s["external"] is True for s in declared.values())
    for service, spec in specs.items():
        targets = {
            s if isinstance(s, str) else s.get("target", s["source"])
            for s in spec.get("secrets", [])
        }
        for variable, value in (spec.get("environment") or {}).items():
            assert not re.search(r"TOKEN|PASSWORD|SECRET", variable) or variable.endswith("_FILE")
            if variable.endswith("_FILE"):
                assert value.removeprefix("/run/secrets/") in targets, (service, variable)
        if service in SERVICE_USERS:
            user = SERVICE_USERS[service].replace("load-", "")
            assert spec["environment"]["DEXP_REDIS_URL_FILE"] == f"/run/secrets/redis_{user}_url"
    coordinator = specs["coordinator"]["environment"]
    assert coordinator["DEXP_ENVIRONMENT"] == "production"
    assert coordinator["DEXP_OPEN_ENROLLMENT"] == "false"
    assert specs["agent"]["environment"]["DEXP_TICKETS_FILE"] == "/run/secrets/tickets"
    command = specs["redis"]["command"]
    assert "--user" not in command and "--requirepass" not in command
    assert command[command.index("--aclfile") + 1] == "/run/secrets/redis-users.acl"


@pytest.mark.parametrize(
    ("service", "variable", "settings"),
    [
        ("coordinator", "DEXP_DP_EPSILON", Settings),
        ("coordinator", "DEXP_REPORTS_PER_AGENT", Settings),
        ("agent", "DEXP_ALLOCATION_SECONDS", AgentSettings),
        ("load_generator", "DEXP_VISITS_PER_USER", LoadSettings),
    ],
)
def test_the_ldp_demo_runs_through_compose(service: str, variable: str, settings: type) -> None:
    """`DEXP_ALGORITHM=ldp docker compose up`: the algorithm reaches the coordinator, and LDP's
    settings are passed on from the environment only when set (a null value: compose leaves the
    variable unset otherwise), so that each algorithm keeps its own default; each is a setting
    of the service it is given to."""
    env = services("docker-compose.yml")[service]["environment"]
    assert variable in env and env[variable] is None
    assert variable.removeprefix("DEXP_").lower() in settings.model_fields
    coordinator = services("docker-compose.yml")["coordinator"]["environment"]
    assert coordinator["DEXP_ALGORITHM"] == "${DEXP_ALGORITHM:-de}"
