"""deploy/kubernetes, checked offline: no cluster, no network.

Two layers, each shown able to fail on a broken copy:

- schema: every manifest (and the README's example Ingress) against the Kubernetes JSON schemas
  that the `kubernetes-validate` package ships, in strict mode (an unknown or misspelt field fails),
  for the oldest version the manifests claim (1.30, or the oldest shipped above it) and the newest
  version shipped;
- meaning, which no schema sees: every variable a manifest sets is a setting of the service it is
  given to (its pydantic settings class: env_prefix + field names, or aliases) and the values are
  accepted by it; the probes are routes the coordinator serves; the Service, PodDisruptionBudget,
  NetworkPolicy and spread selectors pick the pods they are meant to; one image everywhere, named
  by the kustomization's `images:`; the pods run as the Dockerfile's uid, hardened; secrets only by
  reference, from the Secrets the README creates; the kustomization lists every manifest but the
  example secret; the default experiment can end with the agents deployed; the Redis chart's users
  are common/redis_acl.py's, and each service logs in as its own.

A socket guard fails the test that opens any connection, so the validator is seen not to download.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes_validate import utils as kv
from packaging.version import Version
from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic_settings import BaseSettings

from agent.settings import AgentSettings
from common import redis_acl as acl
from common.algorithms import AlgorithmConfig
from common.environments import build_problem
from coordinator.api.models import ExperimentCreate
from coordinator.app import create_app
from coordinator.settings import Settings
from load_generator.settings import LoadSettings
from tests.prerequisites import missing

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
EXAMPLE_SECRET = "secret.example.yaml"
VALUES_FILES = {"redis-values.yaml"}  # Helm values, not manifests
FLOOR = Version("1.30")  # the oldest Kubernetes the manifests are written for
WORKLOADS = ("Deployment", "StatefulSet", "Job")
# The module each container runs (`python -m MODULE`) and the settings class it reads.
SETTINGS: dict[str, type[BaseSettings]] = {
    "coordinator": Settings,
    "agent": AgentSettings,
    "load_generator": LoadSettings,
}
# Settings that are secrets: never a literal value, never in a ConfigMap.
SECRET_FIELDS = {"admin_token", "enrollment_secret", "redis_url", "tickets"}
STRONG = "k8s-Wq7Zt2mXx9KpV4cNb8LsR3e"  # a stand-in for a generated secret (random)
# The Redis user each module logs in as (common/redis_acl.py).
REDIS_USERS = {
    "coordinator": acl.COORDINATOR,
    "agent": acl.AGENT,
    "load_generator": acl.LOAD_GENERATOR,
}


# ------------------------------------------------------------------------------ no network


class NetworkAttempt(AssertionError):
    pass


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise NetworkAttempt(f"network access attempted: {args[1:] or args}")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection or name lookup fails the test (the schemas are the package's files)."""
    monkeypatch.setattr(socket.socket, "connect", _refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse)
    monkeypatch.setattr(socket, "create_connection", _refuse)
    monkeypatch.setattr(socket, "getaddrinfo", _refuse)


def test_the_network_guard_bites() -> None:
    with pytest.raises(NetworkAttempt):
        socket.create_connection(("kubernetes.io", 443), timeout=1)
    with pytest.raises(NetworkAttempt):
        socket.getaddrinfo("raw.githubusercontent.com", 443)


# ------------------------------------------------------------------------------ loading


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where built with it


@functools.cache
def _parsed(path: Path, mtime: float) -> tuple[dict[str, Any], ...]:
    return tuple(d for d in yaml.load_all(path.read_text(), Loader=YAML_LOADER) if d)


def load(path: Path) -> list[dict[str, Any]]:
    """The file's documents (empty ones dropped), a fresh copy each call: tests mutate them."""
    return copy.deepcopy(list(_parsed(path, path.stat().st_mtime)))


def is_manifest(doc: dict[str, Any]) -> bool:
    return "apiVersion" in doc and "kind" in doc


def yaml_files() -> list[Path]:
    return sorted(K8S.glob("*.yaml")) + sorted(K8S.glob("*.yml"))


def manifest_files() -> list[Path]:
    return [
        p
        for p in yaml_files()
        if p.name != "kustomization.yaml" and p.name not in VALUES_FILES and load(p)
    ]


def readme_manifests() -> list[dict[str, Any]]:
    """The README's ```yaml blocks that are Kubernetes objects (the example Ingress)."""
    blocks = re.findall(r"```yaml\n(.*?)```", (K8S / "README.md").read_text(), re.S)
    return [d for b in blocks for d in yaml.safe_load_all(b) if d and is_manifest(d)]


def kustomization() -> dict[str, Any]:
    return load(K8S / "kustomization.yaml")[0]


def deployed() -> list[dict[str, Any]]:
    """What `kubectl apply -k` applies: the kustomization's resources."""
    return [doc for name in kustomization()["resources"] for doc in load(K8S / name)]


def example_secrets() -> dict[str, dict[str, str]]:
    return {
        d["metadata"]["name"]: d.get("stringData") or d.get("data") or {}
        for d in load(K8S / EXAMPLE_SECRET)
        if d["kind"] == "Secret"
    }


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in WORKLOADS]


def module_of(container: dict[str, Any]) -> str:
    command = container.get("command", []) + container.get("args", [])
    assert command[:2] == ["python", "-m"], f"{container['name']}: {command}"
    return str(command[2])


def the_container(docs: list[dict[str, Any]], module: str) -> tuple[dict, dict]:
    """(workload, container) of the one container running `python -m module`."""
    found = [
        (w, c) for w in workloads(docs) for c in pod_spec(w)["containers"] if module_of(c) == module
    ]
    assert len(found) == 1, f"{module}: {len(found)} containers"
    return found[0]


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def pods_matched(docs: list[dict[str, Any]], selector: dict[str, Any]) -> set[str]:
    return {w["metadata"]["name"] for w in workloads(docs) if matches(selector, pod_labels(w))}


# ------------------------------------------------------------------------------ schemas


def schema_versions() -> list[str]:
    shipped = sorted({Version(kv.major_minor(v)) for v in kv.all_versions()})
    at_least_floor = [v for v in shipped if v >= FLOOR]
    assert at_least_floor, f"kubernetes-validate ships no schema for {FLOOR} or later"
    return sorted({str(at_least_floor[0]), str(shipped[-1])}, key=Version)


@pytest.fixture(scope="module", autouse=True)
def schemas_read_once() -> Iterator[None]:
    """kubernetes-validate reads the schema files again at each call (the shared definitions are
    about a megabyte per version): read each once. Its result is unchanged."""
    read = getattr(kv, "schema_contents", None)
    with pytest.MonkeyPatch.context() as patch:
        if read is not None:
            patch.setattr(kv, "schema_contents", functools.cache(read))
        yield


def validate(doc: dict[str, Any], version: str) -> str:
    return kv.validate(doc, version, strict=True)


def all_manifests() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in manifest_files() for d in load(p)] + [
        ("README.md", d) for d in readme_manifests()
    ]


@pytest.mark.parametrize("version", schema_versions())
@pytest.mark.parametrize(
    ("source", "doc"),
    [pytest.param(s, d, id=f"{s}:{d['kind']}/{d['metadata']['name']}") for s, d in all_manifests()],
)
def test_manifest_is_valid_for_kubernetes(source: str, doc: dict[str, Any], version: str) -> None:
    assert validate(doc, version) == version


def test_schema_validation_rejects_a_broken_manifest() -> None:
    """The validator can fail: a misspelt field (passes without strict), a wrong type, a missing
    required field, each on a copy of the coordinator's Deployment."""
    version = schema_versions()[-1]
    deployment = find(deployed(), "Deployment", "coordinator")
    assert validate(deployment, version)

    typo = copy.deepcopy(deployment)
    container = pod_spec(typo)["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    kv.validate(typo, version, strict=False)  # the lax schema lets it through...
    with pytest.raises(kv.ValidationError, match="readinesProbe"):  # ...strict does not
        validate(typo, version)

    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        validate(wrong_type, version)

    nameless = copy.deepcopy(deployment)
    del pod_spec(nameless)["containers"][0]["name"]
    with pytest.raises(kv.ValidationError, match="'name' is a required property"):
        validate(nameless, version)


# ------------------------------------------------------------------------------ kustomization


def test_every_yaml_file_is_a_manifest_the_kustomization_or_a_values_file() -> None:
    for path in yaml_files():
        docs = load(path)
        assert docs, f"{path.name} is empty"
        if path.name == "kustomization.yaml":
            assert docs[0]["kind"] == "Kustomization"
        elif path.name in VALUES_FILES:
            assert not any(is_manifest(d) for d in docs), path.name
        else:
            assert all(is_manifest(d) for d in docs), f"{path.name}: a document is no object"


def test_the_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    k = kustomization()
    listed = k["resources"]
    assert len(listed) == len(set(listed)), "a file listed twice"
    assert set(listed) == {p.name for p in manifest_files()} - {EXAMPLE_SECRET}
    assert EXAMPLE_SECRET in {p.name for p in manifest_files()}
    assert k["namespace"] == "dexp"
    assert "Secret" not in {d["kind"] for d in deployed()}, "secrets are created by kubectl"
    names = [(d["kind"], d["metadata"]["name"]) for d in deployed()]
    assert len(names) == len(set(names)), "two objects of one kind share a name"
    assert all("namespace" not in d["metadata"] for d in deployed()), "the kustomization sets it"


def test_one_image_everywhere_named_by_the_kustomization() -> None:
    images = {
        c["image"]
        for w in workloads(deployed())
        for c in pod_spec(w)["containers"] + pod_spec(w).get("initContainers", [])
    }
    assert images == {"dexp-app:latest"}
    entries = kustomization()["images"]
    assert [e["name"] for e in entries] == ["dexp-app"]
    assert set(entries[0]) <= {"name", "newName", "newTag", "digest"}
    readme = (K8S / "README.md").read_text()
    assert "docker build -t REGISTRY/dexp-app:TAG ." in readme


def test_kubectl_kustomize_renders_the_same_objects() -> None:
    """kubectl's built-in kustomize (offline: local files) builds the directory into the same
    objects, in the namespace, with the image of `images:`. scripts/test installs kubectl (Debian's
    kubernetes-client) where it is missing."""
    if shutil.which("kubectl") is None:
        missing("kubectl not on PATH (apt-get install kubernetes-client)")
    out = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    rendered = [d for d in yaml.safe_load_all(out) if d]
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, rendered)) == sorted(map(key, deployed()))
    assert {d["metadata"]["namespace"] for d in rendered} == {"dexp"}
    entry = kustomization()["images"][0]
    assert {c["image"] for w in workloads(rendered) for c in pod_spec(w)["containers"]} == {
        f"{entry['newName']}:{entry['newTag']}"
    }


# ------------------------------------------------------------------------------ settings


def env_names(cls: type[BaseSettings]) -> set[str]:
    """The environment variables a settings class reads: env_prefix + field name, or the field's
    aliases (a validation alias replaces the prefixed name)."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for name, field in cls.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {c for c in alias.choices if isinstance(c, str)}
        elif isinstance(alias, str):
            names.add(alias)
        else:
            names.add(prefix + (field.alias or name))
    return {n.upper() for n in names}


def field_of(cls: type[BaseSettings], env: str) -> str:
    prefix = str(cls.model_config.get("env_prefix", ""))
    for name, field in cls.model_fields.items():
        alias = field.validation_alias
        aliases = alias.choices if isinstance(alias, AliasChoices) else [alias or field.alias]
        if env in {str(a).upper() for a in aliases if a} or env == (prefix + name).upper():
            return name
    raise KeyError(env)


def container_env(docs: list[dict[str, Any]], container: dict[str, Any]) -> dict[str, Any]:
    """NAME -> its value (literal, or a ConfigMap's), ("secret", secret, key), or ("fieldRef",
    NAME), for each variable the container gets (env wins over envFrom, as in Kubernetes)."""
    env: dict[str, Any] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            cm = find(docs, "ConfigMap", source["configMapRef"]["name"])
            for key, value in cm.get("data", {}).items():
                env[source.get("prefix", "") + key] = value
        if "secretRef" in source:
            secret = source["secretRef"]["name"]
            for key in example_secrets()[secret]:
                env[source.get("prefix", "") + key] = ("secret", secret, key)
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = ("secret", ref["name"], ref["key"])
        elif "configMapKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["configMapKeyRef"]
            env[var["name"]] = find(docs, "ConfigMap", ref["name"])["data"][ref["key"]]
        else:
            env[var["name"]] = ("fieldRef", var["name"])
    return env


def env_problems(docs: list[dict[str, Any]]) -> list[str]:
    """Every variable set (env, envFrom's ConfigMap keys) that its service does not read."""
    problems = []
    for w in workloads(docs):
        for c in pod_spec(w)["containers"]:
            module = module_of(c)
            known = env_names(SETTINGS[module])
            for name in container_env(docs, c):
                if name not in known:
                    problems.append(f"{w['metadata']['name']}: {name} is not read by {module}")
    return problems


def test_every_variable_is_a_setting_of_its_service() -> None:
    docs = deployed()
    assert {module_of(c) for w in workloads(docs) for c in pod_spec(w)["containers"]} == set(
        SETTINGS
    )
    for module in SETTINGS:
        assert importlib.util.find_spec(module) is not None
    assert env_problems(docs) == []


def test_a_misspelt_variable_is_caught() -> None:
    docs = copy.deepcopy(deployed())
    _, container = the_container(docs, "coordinator")
    next(v for v in container["env"] if v["name"] == "DEXP_ADMIN_TOKEN")["name"] = "DEXP_ADMIN_TOKN"
    find(docs, "ConfigMap", "dexp-agent")["data"]["AGENTS_PER_REPLICAS"] = "4"
    find(docs, "ConfigMap", "dexp-load-generator")["data"]["DEXP_TICKETS_FILE"] = "/x"  # agent's
    assert env_problems(docs) == [
        "coordinator: DEXP_ADMIN_TOKN is not read by coordinator",
        "agent: AGENTS_PER_REPLICAS is not read by agent",
        "load-generator: DEXP_TICKETS_FILE is not read by load_generator",
    ]


def secret_value(secret: str, key: str) -> str:
    """What the operator's generated Secret holds (README, "Secrets"), strong stand-ins."""
    assert key in example_secrets()[secret], f"{secret} has no key {key}"
    urls = {
        f"{user}-redis-url": f"redis://{user}:{STRONG}@redis-master:6379/0" for user in acl.SERVICES
    }
    return {"admin-token": STRONG, "redis-password": STRONG, **urls}.get(key, "")


def settings_for(
    monkeypatch: pytest.MonkeyPatch, docs: list[dict[str, Any]], module: str
) -> BaseModel:
    """The settings object the container's process builds from the environment it gets."""
    _, container = the_container(docs, module)
    cls = SETTINGS[module]
    for name in env_names(cls):
        monkeypatch.delenv(name, raising=False)
    for name, value in container_env(docs, container).items():
        if isinstance(value, tuple):
            assert value[0] == "secret", f"{name}: {value}"
            value = secret_value(value[1], value[2])
        monkeypatch.setenv(name, value)
    return cls()


def test_each_service_accepts_the_settings_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = deployed()
    coordinator = settings_for(monkeypatch, docs, "coordinator")
    assert isinstance(coordinator, Settings)
    assert coordinator.environment == "production"
    assert not coordinator.open_enrollment_enabled
    assert coordinator.host not in ("127.0.0.1", "localhost", "::1"), "probes would not reach it"

    agent = settings_for(monkeypatch, docs, "agent")
    assert isinstance(agent, AgentSettings)
    assert agent.uses_tickets and agent.state_dir

    load_generator = settings_for(monkeypatch, docs, "load_generator")
    assert isinstance(load_generator, LoadSettings)


def test_production_and_secrets_are_set_in_the_manifests_not_in_configmaps() -> None:
    docs = deployed()
    _, container = the_container(docs, "coordinator")
    literal = {v["name"]: v.get("value") for v in container["env"]}
    assert literal["DEXP_ENVIRONMENT"] == "production"
    for w in workloads(docs):
        for c in pod_spec(w)["containers"]:
            cls = SETTINGS[module_of(c)]
            for name, value in container_env(docs, c).items():
                if field_of(cls, name) in SECRET_FIELDS:
                    assert isinstance(value, tuple) and value[0] == "secret", (
                        f"{w['metadata']['name']}: {name} must come from a Secret"
                    )
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        assert "DEXP_ENVIRONMENT" not in cm.get("data", {})


def test_the_example_secret_cannot_start_a_production_coordinator() -> None:
    example = example_secrets()["dexp-secrets"]
    with pytest.raises(ValidationError, match="shorter than 16 characters"):
        Settings(
            environment="production",
            admin_token=example["admin-token"],
            redis_url=example["coordinator-redis-url"],
        )


def test_the_secrets_the_manifests_read_are_the_ones_the_readme_creates() -> None:
    docs = deployed()
    refs: set[tuple[str, str]] = set()
    for w in workloads(docs):
        spec = pod_spec(w)
        for c in spec["containers"]:
            refs |= {(v[1], v[2]) for v in container_env(docs, c).values() if isinstance(v, tuple)}
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                name = volume["secret"]["secretName"]
                refs |= {(name, key) for key in example_secrets()[name]}
    (values,) = load(K8S / "redis-values.yaml")  # the Redis chart reads its passwords
    refs.add((values["auth"]["existingSecret"], values["auth"]["existingSecretPasswordKey"]))
    users = values["auth"]["acl"]
    refs |= {(users["userSecret"], user["username"]) for user in users["users"]}
    example = example_secrets()
    assert refs == {(name, key) for name, data in example.items() for key in data}
    readme = (K8S / "README.md").read_text()
    created = set(re.findall(r"--from-literal=([a-z-]+)=", readme))
    assert created == set(example["dexp-secrets"]) | set(example[users["userSecret"]]), (
        "README's kubectl create secret"
    )
    assert "create secret generic dexp-tickets --from-file=tickets.txt" in readme
    assert set(example["dexp-tickets"]) == {"tickets.txt"}


# ------------------------------------------------------------------------------ coordinator


@functools.cache
def served_paths() -> set[str]:
    """The paths the application routes: its schema's (FastAPI includes routers lazily, so
    `app.routes` names only the application's own), and the routes left out of the schema."""
    app = create_app(Settings(admin_token=STRONG))
    return set(app.openapi()["paths"]) | {getattr(r, "path", "") for r in app.routes}


def probe_problems(docs: list[dict[str, Any]]) -> list[str]:
    _, container = the_container(docs, "coordinator")
    served = served_paths()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    cm_port = int(find(docs, "ConfigMap", "dexp-coordinator")["data"]["DEXP_PORT"])
    expected = {"readinessProbe": "/readyz", "livenessProbe": "/healthz", "startupProbe": None}
    problems = []
    for probe, path in expected.items():
        if probe not in container:
            problems.append(f"no {probe}")
            continue
        get = container[probe]["httpGet"]
        if get["path"] not in served:
            problems.append(f"{probe}: {get['path']} is not served")
        if path and get["path"] != path:
            problems.append(f"{probe}: {get['path']}, expected {path}")
        port = ports.get(get["port"], get["port"])
        if port != cm_port:
            problems.append(f"{probe}: port {get['port']} is not DEXP_PORT {cm_port}")
    return problems


def test_the_probes_are_routes_the_coordinator_serves() -> None:
    assert {"/readyz", "/healthz"} <= served_paths()
    assert probe_problems(deployed()) == []


def test_a_probe_on_a_path_not_served_is_caught() -> None:
    docs = copy.deepcopy(deployed())
    _, container = the_container(docs, "coordinator")
    container["readinessProbe"]["httpGet"]["path"] = "/ready"
    del container["startupProbe"]
    assert probe_problems(docs) == [
        "readinessProbe: /ready is not served",
        "readinessProbe: /ready, expected /readyz",
        "no startupProbe",
    ]


def selector_problems(docs: list[dict[str, Any]]) -> list[str]:
    problems = []
    for w in workloads(docs):
        if w["kind"] != "Job" and not matches(w["spec"]["selector"], pod_labels(w)):
            problems.append(f"{w['metadata']['name']}: selector misses its own pods")
    service = find(docs, "Service", "coordinator")
    if pods_matched(docs, {"matchLabels": service["spec"]["selector"]}) != {"coordinator"}:
        problems.append("Service coordinator does not select exactly the coordinator pods")
    pdb = find(docs, "PodDisruptionBudget", "coordinator")
    if pods_matched(docs, pdb["spec"]["selector"]) != {"coordinator"}:
        problems.append("PodDisruptionBudget does not select exactly the coordinator pods")
    return problems


def test_service_and_disruption_budget_select_the_coordinator() -> None:
    docs = deployed()
    assert selector_problems(docs) == []
    deployment = find(docs, "Deployment", "coordinator")
    pdb = find(docs, "PodDisruptionBudget", "coordinator")
    assert deployment["spec"]["replicas"] == 2
    assert pdb["spec"]["minAvailable"] == 1 < deployment["spec"]["replicas"]
    service = find(docs, "Service", "coordinator")
    assert service["spec"]["type"] == "ClusterIP"
    (port,) = service["spec"]["ports"]
    assert port["port"] == 8000 and port["targetPort"] == "http"


def test_a_selector_that_misses_is_caught() -> None:
    docs = copy.deepcopy(deployed())
    pdb = find(docs, "PodDisruptionBudget", "coordinator")
    pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "coordinators"
    find(docs, "Service", "coordinator")["spec"]["selector"].pop("app.kubernetes.io/component")
    assert selector_problems(docs) == [
        "Service coordinator does not select exactly the coordinator pods",
        "PodDisruptionBudget does not select exactly the coordinator pods",
    ]


def test_coordinator_replicas_spread_across_nodes() -> None:
    deployment = find(deployed(), "Deployment", "coordinator")
    labels = pod_labels(deployment)
    spec = pod_spec(deployment)
    by_node = [
        c
        for c in spec.get("topologySpreadConstraints", [])
        if c["topologyKey"] == "kubernetes.io/hostname" and matches(c["labelSelector"], labels)
    ]
    anti = spec.get("affinity", {}).get("podAntiAffinity", {})
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", []) + [
        t["podAffinityTerm"]
        for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
    ]
    by_anti = [
        t
        for t in terms
        if t["topologyKey"] == "kubernetes.io/hostname" and matches(t["labelSelector"], labels)
    ]
    assert by_node or by_anti


def test_clients_reach_the_coordinator_through_its_service() -> None:
    docs = deployed()
    service = find(docs, "Service", "coordinator")
    for module in ("agent", "load_generator"):
        _, container = the_container(docs, module)
        url = urlsplit(container_env(docs, container)["DEXP_COORDINATOR_URL"])
        assert (url.scheme, url.hostname, url.port) == (
            "http",
            service["metadata"]["name"],
            service["spec"]["ports"][0]["port"],
        )


def test_the_default_experiment_is_accepted_and_the_agents_can_end_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The coordinator creates the ConfigMap's experiment at start-up (it refuses to start if it
    is invalid); the StatefulSet's agents reach its threshold M; the load generator plays it."""
    docs = deployed()
    settings = settings_for(monkeypatch, docs, "coordinator")
    assert isinstance(settings, Settings)
    arms = [a for a in settings.arms.split(",") if a.strip()]
    params = {f.name: getattr(settings, f.name) for f in dataclasses.fields(AlgorithmConfig)}
    body = ExperimentCreate(id=settings.experiment, arms=arms, sigma=settings.sigma, **params)
    threshold = body.checked_config(settings).threshold(len(arms))
    assert threshold == 29

    agents = find(docs, "StatefulSet", "agent")
    agent = settings_for(monkeypatch, docs, "agent")
    assert isinstance(agent, AgentSettings)
    assert agent.every_experiment or settings.experiment in agent.experiments
    assert agents["spec"]["replicas"] * agent.agents_per_replica >= threshold

    load_generator = settings_for(monkeypatch, docs, "load_generator")
    assert isinstance(load_generator, LoadSettings)
    assert load_generator.experiment == settings.experiment
    problem = build_problem(load_generator.problem or None, load_generator.means or None)
    assert problem.environment.n_arms == len(arms)


# ------------------------------------------------------------------------------ pods


def dockerfile_uid() -> int:
    text = (ROOT / "Dockerfile").read_text()
    match = re.search(r"useradd\b[^\n]*--uid (\d+) (\w+)", text)
    assert match, "the Dockerfile's useradd --uid"
    assert re.search(rf"^USER {match.group(2)}$", text, re.M), "the Dockerfile runs as that user"
    return int(match.group(1))


def hardening_problems(docs: list[dict[str, Any]], uid: int) -> list[str]:
    problems = []
    for w in workloads(docs):
        spec, name = pod_spec(w), w["metadata"]["name"]
        pod = spec.get("securityContext", {})
        if spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: automountServiceAccountToken")
        if spec.get("enableServiceLinks") is not False:
            problems.append(f"{name}: enableServiceLinks")
        for c in spec["containers"] + spec.get("initContainers", []):
            sc, where = c.get("securityContext", {}), f"{name}/{c['name']}"
            effective = {**pod, **sc}
            if effective.get("runAsUser") != uid:
                problems.append(f"{where}: runAsUser {effective.get('runAsUser')}, not {uid}")
            if effective.get("runAsNonRoot") is not True:
                problems.append(f"{where}: runAsNonRoot")
            if effective.get("seccompProfile", {}).get("type") != "RuntimeDefault":
                problems.append(f"{where}: seccompProfile")
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: allowPrivilegeEscalation")
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: readOnlyRootFilesystem")
            if sc.get("capabilities", {}).get("drop") != ["ALL"]:
                problems.append(f"{where}: capabilities")
            for kind in ("requests", "limits"):
                if set(c.get("resources", {}).get(kind, {})) != {"cpu", "memory"}:
                    problems.append(f"{where}: resources.{kind}")
    return problems


def test_pods_run_as_the_image_user_hardened() -> None:
    assert hardening_problems(deployed(), dockerfile_uid()) == []


def test_a_pod_running_as_another_user_is_caught() -> None:
    docs = copy.deepcopy(deployed())
    job = find(docs, "Job", "load-generator")
    pod_spec(job)["securityContext"]["runAsUser"] = 1000
    pod_spec(job)["containers"][0]["securityContext"].pop("runAsUser")
    pod_spec(job)["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = False
    assert hardening_problems(docs, dockerfile_uid()) == [
        "load-generator/load-generator: runAsUser 1000, not 10001",
        "load-generator/load-generator: readOnlyRootFilesystem",
    ]


def mount_of(workload: dict[str, Any], container: dict[str, Any], path: str) -> dict:
    """The volume a path lives on (the longest mountPath containing it)."""
    mounts = [
        m
        for m in container.get("volumeMounts", [])
        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert mounts, f"{path} is on no volume"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    templates = {
        t["metadata"]["name"]: {"name": t["metadata"]["name"], "claim": t}
        for t in workload["spec"].get("volumeClaimTemplates", [])
    }
    return {**volumes, **templates}[mount["name"]]


def test_agents_keep_their_identity_on_their_own_volume_and_read_tickets_from_the_secret() -> None:
    docs = deployed()
    workload, container = the_container(docs, "agent")
    assert workload["kind"] == "StatefulSet"
    env = container_env(docs, container)
    state = mount_of(workload, container, env["DEXP_STATE_DIR"])
    assert "claim" in state, "DEXP_STATE_DIR must be on the pod's volumeClaimTemplate"
    assert state["claim"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert workload["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"
    tickets = mount_of(workload, container, env["DEXP_TICKETS_FILE"])
    assert tickets["secret"]["secretName"] == "dexp-tickets"
    mount = next(m for m in container["volumeMounts"] if m["name"] == tickets["name"])
    assert "subPath" not in mount, "a subPath mount never sees the Secret updated"
    assert Path(env["DEXP_TICKETS_FILE"]).name in example_secrets()["dexp-tickets"]
    governing = find(docs, "Service", workload["spec"]["serviceName"])
    assert governing["spec"]["clusterIP"] == "None"
    assert pods_matched(docs, {"matchLabels": governing["spec"]["selector"]}) == {"agent"}


def test_the_load_generator_job_runs_once_when_started() -> None:
    docs = deployed()
    job, _ = the_container(docs, "load_generator")
    spec = job["spec"]
    assert job["kind"] == "Job"
    assert spec["backoffLimit"] == 0 and pod_spec(job)["restartPolicy"] == "Never"
    assert spec["suspend"] is True, "apply -k must not start it before the agents have tickets"
    assert spec["ttlSecondsAfterFinished"] > 0
    data = find(docs, "ConfigMap", "dexp-load-generator")["data"]
    waits = float(data["DEXP_AGENT_WAIT_SECONDS"]) + float(data["DEXP_MAX_SECONDS"])
    assert spec["activeDeadlineSeconds"] > waits, "the deadline would cut a run short"


# ------------------------------------------------------------------------------ network, Redis


def redis_release() -> str:
    match = re.search(r"helm install (\S+) oci://\S+/redis\b", (K8S / "README.md").read_text())
    assert match, "README: helm install of the Bitnami redis chart"
    return match.group(1)


def test_network_policies_admit_only_who_needs_each_service() -> None:
    docs = deployed()
    everyone = {w["metadata"]["name"] for w in workloads(docs)}
    assert everyone == {"coordinator", "agent", "load-generator"}

    coordinator = find(docs, "NetworkPolicy", "coordinator")
    assert pods_matched(docs, coordinator["spec"]["podSelector"]) == {"coordinator"}
    (rule,) = coordinator["spec"]["ingress"]
    in_namespace = [p["podSelector"] for p in rule["from"] if set(p) == {"podSelector"}]
    other = [p for p in rule["from"] if "namespaceSelector" in p]
    assert set().union(*(pods_matched(docs, s) for s in in_namespace)) == {
        "agent",
        "load-generator",
    }
    assert len(other) == 1 and "podSelector" in other[0], "the ingress controller's pods only"
    assert [p["port"] for p in rule["ports"]] == ["http"]

    redis = find(docs, "NetworkPolicy", "redis")
    release = redis_release()
    bitnami_pod = {
        "app.kubernetes.io/name": "redis",
        "app.kubernetes.io/instance": release,
        "app.kubernetes.io/component": "master",
    }
    assert matches(redis["spec"]["podSelector"], bitnami_pod)
    assert not pods_matched(docs, redis["spec"]["podSelector"])
    (rule,) = redis["spec"]["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}, "dexp's pods, in this namespace only"
    assert pods_matched(docs, peer["podSelector"]) == everyone
    assert not matches(peer["podSelector"], bitnami_pod)
    assert [p["port"] for p in rule["ports"]] == [6379]

    closed = find(docs, "NetworkPolicy", "agents-and-load-generator")
    assert pods_matched(docs, closed["spec"]["podSelector"]) == {"agent", "load-generator"}
    assert closed["spec"]["policyTypes"] == ["Ingress"] and not closed["spec"].get("ingress")


def test_redis_values_match_the_secret_the_url_and_the_policy() -> None:
    (values,) = load(K8S / "redis-values.yaml")
    assert values["architecture"] == "standalone"
    assert values["auth"]["enabled"] is True
    secret = example_secrets()[values["auth"]["existingSecret"]]
    assert values["auth"]["existingSecretPasswordKey"] in secret
    config = values["commonConfiguration"].splitlines()
    assert {"appendonly yes", "appendfsync everysec", "maxmemory-policy noeviction"} <= set(config)
    assert values["master"]["persistence"]["enabled"] is True
    assert values["networkPolicy"]["enabled"] is False, "network-policies.yaml decides"


def redis_problems(docs: list[dict[str, Any]], values: dict[str, Any]) -> list[str]:
    """The chart's users are not common/redis_acl.py's, or a service does not log in as its own
    user, with its password, at the chart's Service."""
    problems = []
    chart = values["auth"]["acl"]
    if chart.get("enabled") is not True:
        problems.append("auth.acl.enabled is not true: Redis has no user per service")
    if chart.get("users") != acl.bitnami_users():
        problems.append("auth.acl.users is not common.redis_acl.bitnami_users()")
    passwords = example_secrets()[chart["userSecret"]]
    for module, user in REDIS_USERS.items():
        _, container = the_container(docs, module)
        source = container_env(docs, container)["DEXP_REDIS_URL"]
        url = urlsplit(example_secrets()[source[1]][source[2]])
        if (url.hostname, url.port) != (f"{redis_release()}-master", 6379):
            problems.append(f"{module}: Redis at {url.hostname}:{url.port}")
        if url.username != user or url.password != passwords.get(user):
            problems.append(f"{module}: DEXP_REDIS_URL logs in as {url.username}, not {user}")
    return problems


def test_each_service_logs_in_to_redis_as_its_own_user() -> None:
    (values,) = load(K8S / "redis-values.yaml")
    assert redis_problems(deployed(), values) == []
    assert {u["username"] for u in values["auth"]["acl"]["users"]} == set(acl.SERVICES)
    readme = (K8S / "README.md").read_text()
    assert "| grep -c nopass" in readme, "the README shows how to check that every user has one"


def test_a_service_with_another_user_or_rules_is_caught() -> None:
    (values,) = load(K8S / "redis-values.yaml")
    docs = copy.deepcopy(deployed())
    _, agent = the_container(docs, "agent")
    ref = next(v for v in agent["env"] if v["name"] == "DEXP_REDIS_URL")
    ref["valueFrom"]["secretKeyRef"]["key"] = "coordinator-redis-url"  # the agents as coordinator
    values["auth"]["acl"]["users"][2]["commands"] += " +set"
    assert redis_problems(docs, values) == [
        "auth.acl.users is not common.redis_acl.bitnami_users()",
        "agent: DEXP_REDIS_URL logs in as coordinator, not agent",
    ]


def test_the_readme_ingress_points_at_the_coordinator_service() -> None:
    (ingress,) = readme_manifests()
    service = find(deployed(), "Service", "coordinator")
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == service["metadata"]["name"]
            assert backend["port"].get("name") in port_names


def test_the_readme_walks_the_operator_through() -> None:
    readme = (K8S / "README.md").read_text()
    for step in (
        "kubectl create namespace dexp",
        "helm install redis oci://registry-1.docker.io/bitnamicharts/redis",
        "kubectl -n dexp create secret generic dexp-secrets",
        "kubectl apply -k deploy/kubernetes",
        "kubectl -n dexp exec deploy/coordinator -- dexp tickets issue demo --count",
        "kubectl -n dexp scale statefulset/agent --replicas=",
        "kubectl -n dexp patch job load-generator",
        "kubectl -n dexp port-forward service/coordinator 8000:8000",
        "dexp watch demo",
    ):
        assert step in readme, step
