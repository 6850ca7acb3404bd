"""The JavaScript agent (sdk/js, @dexp/agent) and the Python one (common/agent.py) are the same agent.

Each case drives the Python LocalAgent through a run: rewards drawn from an environment, the global
set shrinking, DSER4-style resets (new epochs), one arm left, a reload (state saved and restored),
and records every random draw the agent takes (SER3's orders, CE's drop coins, DP-MASE's Laplace
noise, CDE's tie-break and report coins). The built module (sdk/js/dist/agent.js) then replays the
same operations under `node` with those draws injected, and must give the same arms to play, the
same votes, local sets and reports at every step, consume exactly the recorded draws, load the
Python agent's saved state at the reload and end in the same state. Float agreement is exact: the
radii are written in the same order of operations on both sides.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from scipy import stats

from agent.private_device import draw_arm
from common.agent import AgentSpec, LocalAgent
from common.algorithms import AlgorithmConfig
from common.cde import report_probabilities
from common.errors import ParameterError
from common.ldp import Mechanism, unit_reward
from common.subroutines.bounds import (
    elimination_level,
    kl_lower,
    kl_lucb_level,
    kl_upper,
    stitched_radius,
)
from common.subroutines.fixed_budget import samples_per_arm
from common.subroutines.radius import (
    dp_elimination_gap,
    dp_epoch_length,
    elimination_radius,
    lucb_radius,
)
from tests.prerequisites import missing

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "sdk" / "js" / "dist" / "agent.js"
RUNNER = ROOT / "tests" / "js" / "agreement.mjs"
AGENTS = 40  # N: enters only the independent baseline's confidence, not these algorithms'
RANDOM_SEEDS = 10  # random cases per algorithm and subroutine, beside the edge cases


class RecordingRng:
    """The numpy Generator calls common/ makes, each result recorded in the form
    sdk/js/src/draws.ts's `replayDraws` reads (a choice is recorded as the index it picked)."""

    def __init__(self, seed: int) -> None:
        self.gen = np.random.default_rng(seed)
        self.draws: list[dict[str, Any]] = []

    def random(self, size: int | None = None) -> Any:
        out = self.gen.random(size)
        if size is None:
            self.draws.append({"kind": "random", "value": float(out)})
        else:
            self.draws.append({"kind": "randoms", "n": int(size), "values": out.tolist()})
        return out

    def integers(self, n: int) -> int:
        value = int(self.gen.integers(n))
        self.draws.append({"kind": "integer", "n": int(n), "value": value})
        return value

    def permutation(self, n: int) -> np.ndarray:
        out = self.gen.permutation(n)
        self.draws.append({"kind": "permutation", "n": int(n), "values": out.tolist()})
        return out

    def laplace(self, loc: float, scale: float, size: int) -> np.ndarray:
        assert loc == 0.0
        out = self.gen.laplace(loc, scale, size=size)
        self.draws.append({"kind": "laplace", "scale": float(scale), "values": out.tolist()})
        return out

    def choice(self, options: list[int]) -> int:
        return options[self.integers(len(options))]


@dataclass(frozen=True)
class Case:
    """One run: the algorithm, the arms' means, and how often the global set moves."""

    algorithm: str
    subroutine: str
    means: tuple[float, ...]
    seed: int
    sigma: float | None = None  # None: Bernoulli rewards; else Gaussian with this sigma
    every_arm: bool = False
    event_rate: float = 0.004  # per step: an arm leaves, a reset, one arm left, own votes applied
    steps: int = 4000
    label: str = "random"
    bernoulli: bool = False  # rewards declared 0/1 (CDE: the exact binomial T)


def _spec(case: Case) -> AgentSpec:
    algo = AlgorithmConfig(
        algorithm=case.algorithm,
        subroutine=case.subroutine,
        xi=0.05 if case.algorithm == "ce" else 0.0,
        every_arm=case.every_arm,
        phi=0.002 if case.subroutine == "ser4" else 0.0,
    )
    params = algo.local_params(len(case.means), AGENTS, case.sigma, case.bernoulli)
    return AgentSpec(
        len(case.means), algo.local_subroutine, params, algo.vote_drop, algo.report_privacy
    )


def _jsonable(state: dict[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(json.dumps(state)))


def python_run(case: Case) -> dict[str, Any]:
    """Runs the Python agent; returns the JS runner's input (spec, draws, trace) and, per step,
    the outputs the JS agent must reproduce."""
    spec = _spec(case)
    n_arms = spec.n_arms
    rng = RecordingRng(case.seed)
    env = np.random.default_rng([case.seed, 7])
    agent = LocalAgent(spec, cast(np.random.Generator, rng))
    means = np.asarray(case.means)
    remaining, epoch, sent = set(range(n_arms)), 0, set[int]()
    reload_at = int(env.integers(1, 80))  # early: most runs decide within a few hundred steps
    trace: list[dict[str, Any]] = []
    expect: list[dict[str, Any]] = []

    def sync() -> None:
        votes = agent.sync(sorted(remaining), epoch)
        sent.update(votes)
        trace.append({"op": "sync", "remaining": sorted(remaining), "epoch": epoch})
        expect.append({"votes": votes, "local": agent.local_arms, "done": agent.done})

    for step in range(case.steps):
        if env.random() < case.event_rate:
            event = int(env.integers(4))
            if event == 0 and len(remaining) > 1:  # another agent's votes removed an arm
                remaining.discard(int(env.choice(sorted(remaining))))
            elif event == 1:  # a DSER4 reset: a new epoch, every arm back, votes forgotten
                epoch, remaining, sent = epoch + 1, set(range(n_arms)), set()
            elif event == 2 and env.random() < 0.3:  # one arm left
                remaining = {int(env.choice(sorted(remaining)))}
            elif event == 3 and sent and len(sent) < len(remaining):  # this agent's votes landed
                remaining -= sent
            sync()
        if agent.done:
            break
        if spec.subroutine == "ser4":  # DSER4: the agent's own reset starts a new epoch
            wants = agent.wants_reset()
            trace.append({"op": "wants_reset"})
            expect.append({"reset": wants})
            if wants:
                epoch, remaining, sent = epoch + 1, set(range(n_arms)), set()
                sync()
        arms = agent.select()
        trace.append({"op": "select"})
        expect.append({"arms": arms})
        if case.sigma is None:
            rewards = (env.random(len(arms)) < means[arms]).astype(float).tolist()
        else:
            rewards = (means[arms] + case.sigma * env.standard_normal(len(arms))).tolist()
        votes = agent.observe(arms, rewards)
        sent.update(votes)
        trace.append({"op": "observe", "arms": arms, "rewards": rewards})
        expect.append(
            {"votes": votes, "local": agent.local_arms, "report": agent.report, "done": agent.done}
        )
        if step == reload_at:
            state = _jsonable(agent.to_state())
            trace.append({"op": "reload", "state": state})
            expect.append({"state": state})
            agent = LocalAgent.from_state(spec, state, cast(np.random.Generator, rng))
    return {
        "input": {
            "spec": _jsonable(spec.__dict__ | {"params": spec.params.__dict__}),
            "draws": rng.draws,
            "trace": trace,
        },
        "expect": expect,
        "final": _jsonable(agent.to_state()),
    }


def js_run(inputs: dict[str, Any]) -> list[Any]:
    node = shutil.which("node")
    if node is None:
        missing("node (Debian's nodejs) runs the JavaScript agent")
    if not BUNDLE.is_file():
        missing(f"{BUNDLE.relative_to(ROOT)} is not built (cd sdk/js && npm ci && npm run build)")
    done = subprocess.run(
        [node, str(RUNNER), str(BUNDLE)],
        input=json.dumps(inputs),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return cast(list[Any], json.loads(done.stdout))


def cases_for(algorithm: str, subroutine: str) -> list[Case]:
    base = {"algorithm": algorithm, "subroutine": subroutine}
    # dp-se and the KL bounds take rewards in [0, 1] only
    sigma_ok = algorithm != "dp-mase" and not subroutine.startswith("kl-")
    picker = np.random.default_rng([sum(map(ord, algorithm + subroutine)), 26])
    out = []
    for i in range(RANDOM_SEEDS):
        n_arms = int(picker.integers(2, 6))
        means = tuple(float(m) for m in np.round(picker.uniform(0.05, 0.95, n_arms), 2))
        gaussian = sigma_ok and i % 3 == 2
        dp = algorithm == "dp-mase"  # epochs of ~500 rounds: rare resets, or none completes
        out.append(
            Case(
                **base,
                means=means,
                seed=1000 + i,
                sigma=0.5 if gaussian else None,
                every_arm=dp or bool(i % 2),
                event_rate=0.0004 if dp else 0.004,
            )
        )
    out += [
        # equal means, and exactly equal empirical means (rewards 1 and 0 only)
        Case(**base, means=(0.5, 0.5, 0.2), seed=1, every_arm=True, label="tied means"),
        Case(**base, means=(1.0, 1.0, 0.0, 0.0), seed=2, label="tied constant rewards"),
        Case(**base, means=(0.5,) * 4, seed=3, every_arm=True, label="all tied"),
        # the global set moves often: arms leave, one arm left, resets
        Case(**base, means=(0.7, 0.5, 0.4, 0.3), seed=4, event_rate=0.05, label="busy global"),
        Case(**base, means=(0.8, 0.2), seed=5, event_rate=0.02, label="two arms"),
    ]
    if algorithm == "cde":  # rewards declared Bernoulli: the T the spec carries is the exact one
        out += [
            Case(**base, means=(0.6, 0.4, 0.3), seed=6, bernoulli=True, label="bernoulli"),
            Case(**base, means=(0.5, 0.5), seed=7, every_arm=True, bernoulli=True, label="tied"),
        ]
    return out


COMBINATIONS = [
    ("de", "se"),
    ("de", "ser3"),
    ("de", "stitched-lucb"),
    ("de", "stitched-se"),
    ("de", "kl-se"),
    ("de", "lucb"),
    ("de", "kl-lucb"),
    ("de", "ser4"),  # DSER4: resets drawn by the agent
    ("ce", "se"),
    ("ce", "ser3"),
    ("ce", "stitched-lucb"),
    ("ce", "stitched-se"),
    ("ce", "kl-se"),
    ("ce", "lucb"),
    ("ce", "kl-lucb"),
    ("ce", "ser4"),  # CE's dropped votes with SER4's resets
    ("dp-mase", "ser3"),  # DP-MASE runs its own dp-se
    ("cde", "ser3"),  # CDE runs its own fixed-budget run and report
]


@pytest.mark.parametrize(("algorithm", "subroutine"), COMBINATIONS)
def test_js_agent_votes_as_the_python_agent(algorithm: str, subroutine: str) -> None:
    cases = cases_for(algorithm, subroutine)
    runs = [python_run(case) for case in cases]
    results = js_run({"cases": [run["input"] for run in runs]})
    assert len(results) == len(runs)
    decided = 0
    for case, run, got in zip(cases, runs, results, strict=True):
        where = f"{case.label} case, seed {case.seed}, means {case.means}"
        trace, expect = run["input"]["trace"], run["expect"]
        for i, (want, have) in enumerate(zip(expect, got["outputs"], strict=False)):
            assert have == want, f"{where}: step {i} ({trace[i]['op']}) differs"
        assert got["error"] is None, f"{where}: {got['error']} after {len(got['outputs'])} steps"
        assert len(got["outputs"]) == len(expect), where
        assert got["unused"] == 0, f"{where}: {got['unused']} recorded draws left unused"
        assert got["final"] == run["final"], f"{where}: final states differ"
        decided += bool(run["final"]["sub"]["active"] and len(run["final"]["sub"]["active"]) == 1)
        decided += run["final"]["report"] is not None
    # the runs went somewhere: local decisions (votes, reports) were compared, not just plays
    assert decided >= len(cases) // 2


# the KL bounds end a Newton iteration on pulls kl(mean, q) - level, a difference of two large
# numbers: one ulp of a log there moves q by tens of ulps (still a valid bound on both sides)
NEWTON_RELATIVE = 1e-12


def _ulps(a: float, b: float) -> float:
    return abs(a - b) / float(np.spacing(abs(b))) if a != b else 0.0


def test_js_radii_are_the_python_ones_within_two_ulps() -> None:
    """The radii, epoch lengths, budgets and report odds of both sides, on a grid of parameters:
    integers equal, floats within 2 ulps. Not bit for bit: V8's Math.log (fdlibm) and glibc's log
    differ by one ulp on about 1 % of arguments (sdk/js/STATUS.md), which moves a vote only when
    a comparison sits within that of its boundary. A formula that differs in a constant or in a
    term shows here even when no vote of the runs above happens to sit near the boundary it moves
    (0.72 -> 0.7201 in the stitched radius is 1e11 ulps)."""
    grid = np.random.default_rng(2026)
    calls: list[tuple[str, Any, tuple[Any, ...]]] = []
    for _ in range(300):
        pulls, arms = int(grid.integers(1, 100_000)), int(grid.integers(2, 50))
        conf, sigma = float(grid.uniform(0.01, 0.99)), [None, float(grid.uniform(0.1, 3))]
        epoch, dp_eps = int(grid.integers(1, 12)), float(grid.uniform(0.01, 2.0))
        eps = float(grid.uniform(0.01, 1.0))
        for s in sigma:
            calls.append(("eliminationRadius", elimination_radius, (pulls, arms, conf, s)))
            calls.append(("stitchedRadius", stitched_radius, (pulls, arms, conf, s)))
            calls.append(("samplesPerArm", samples_per_arm, (eps, conf, arms, s)))
            calls.append(("lucbRadius", lucb_radius, (pulls, pulls * arms, arms, conf, s)))
        calls.append(("eliminationLevel", elimination_level, (pulls, arms, conf)))
        calls.append(("klLucbLevel", kl_lucb_level, (pulls * arms, arms, conf)))
        mean, level = float(grid.choice([0.0, 1.0, grid.uniform()])), float(grid.uniform(0.1, 30))
        calls.append(("klUpper", kl_upper, (mean, pulls, level)))
        calls.append(("klLower", kl_lower, (mean, pulls, level)))
        calls.append(("dpEpochLength", dp_epoch_length, (epoch, arms, conf, dp_eps)))
        calls.append(("dpEliminationGap", dp_elimination_gap, (epoch, pulls, arms, conf, dp_eps)))
        privacy = float(grid.uniform(1.0 / arms + 1e-6, 1.0 - 1e-6))
        calls.append(("reportProbabilities", report_probabilities, (privacy, arms)))
    got = js_run({"calls": [[name, *args] for name, _, args in calls]})
    exact = 0
    for (name, python, args), value in zip(calls, got, strict=True):
        want = python(*args)
        pairs = list(zip(value, want, strict=True)) if isinstance(want, tuple) else [(value, want)]
        for have, should in pairs:
            if isinstance(should, int):
                assert have == should, f"{name}{args}: JS {have!r}, Python {should!r}"
            elif name in ("klUpper", "klLower"):
                assert abs(have - should) <= NEWTON_RELATIVE * abs(should), f"{name}{args}"
            else:
                assert _ulps(have, should) <= 2, f"{name}{args}: JS {have!r}, Python {should!r}"
            exact += have == should
    assert exact > 0.9 * len(calls)  # the rule, not the tolerance, makes them agree


# each statistical check below fails by chance with probability ~1e-9: never, in practice
CHANCE = 1e-9


def test_js_crypto_draws_have_their_distributions() -> None:
    """What a page draws from when nothing is injected (crypto.getRandomValues): uniforms in
    [0, 1), integers uniform on [0, n), every permutation equally likely, Laplace(0, b) noise
    (DP-MASE's privacy rests on its scale). Bad arguments throw rather than draw."""
    n = 40_000
    got = js_run(
        {
            "draws": [
                ["randoms", n],
                ["integer", 7],
                *[["integer", 7] for _ in range(n // 10)],
                *[["permutation", 4] for _ in range(n // 10)],
                ["laplace", 2.5, n],
                ["integer", 0],
                ["integer", 2.5],
            ]
        }
    )
    uniforms, first = np.asarray(got[0]), got[1]
    integers = np.asarray([first, *got[2 : 2 + n // 10]])
    perms = got[2 + n // 10 : 2 + 2 * (n // 10)]
    laplace, bad_zero, bad_float = np.asarray(got[-3]), got[-2], got[-1]
    assert uniforms.min() >= 0.0 and uniforms.max() < 1.0
    assert uniforms.max() > 0.999 and uniforms.min() < 0.001  # all of [0, 1): fails w.p. e^-40
    assert stats.kstest(uniforms, "uniform").pvalue > CHANCE
    assert set(integers.tolist()) <= set(range(7))
    assert stats.chisquare(np.bincount(integers, minlength=7)).pvalue > CHANCE
    assert all(sorted(p) == [0, 1, 2, 3] for p in perms)
    codes = [p[0] * 64 + p[1] * 16 + p[2] * 4 + p[3] for p in perms]
    counts = np.unique(codes, return_counts=True)[1]
    assert len(counts) == 24 and stats.chisquare(counts).pvalue > CHANCE
    assert stats.kstest(laplace, "laplace", args=(0.0, 2.5)).pvalue > CHANCE
    assert bad_zero["error"].startswith("RangeError") and bad_float["error"].startswith(
        "RangeError"
    )


def test_js_reads_an_experiments_params_as_the_python_agent() -> None:
    """The browser agent builds its local side from the public experiment document alone: for
    every algorithm and subroutine an agent runs, with bounded, Bernoulli and Gaussian rewards, it
    must take the subroutine, confidence (CE's eta_xi, DP-MASE's beta), vote drop, report privacy
    and CDE's published T (`pulls_per_arm`: the exact Bernoulli one, or the sub-Gaussian one) that
    agent.library.GlobalView.agent_spec takes (CE's eta_xi within 1e-13: V8's power differs from
    glibc's by an ulp, and 1 - (1 - eta) / x multiplies that by a few)."""
    documents: list[tuple[dict[str, Any], int, float | None, bool, int | None]] = []
    for algorithm, subroutine in COMBINATIONS:
        for n_arms, sigma, bernoulli in ((2, None, False), (5, None, True), (7, 0.5, False)):
            extra: dict[str, Any] = {"ce": {"xi": 0.02}, "dp-mase": {"beta": 0.4}}.get(
                algorithm, {}
            )
            if subroutine == "ser4":
                extra["phi"] = 0.1
            try:
                config = AlgorithmConfig(
                    algorithm=algorithm, subroutine=subroutine, eta=0.3, delta=0.05, **extra
                )
                config.local_params(n_arms, 1, sigma, bernoulli)
            except ParameterError:
                continue  # rewards this subroutine does not take: no experiment has them
            pulls = config.pulls_per_arm(n_arms, sigma, bernoulli)  # what the coordinator publishes
            documents.append((asdict(config), n_arms, sigma, bernoulli, pulls))
    assert len(documents) > 2 * len(COMBINATIONS)
    cde_pulls = {(d[1], d[3]): d[4] for d in documents if d[0]["algorithm"] == "cde"}
    assert cde_pulls[(5, True)] is not None and cde_pulls[(5, True)] < samples_per_arm(
        0.25, 0.3, 5, None
    )
    got = js_run(
        {
            "calls": [
                ["agentSpec", params, k, sigma, pulls] for params, k, sigma, _, pulls in documents
            ]
        }
    )
    for (params, n_arms, sigma, bernoulli, pulls), spec in zip(documents, got, strict=True):
        config = AlgorithmConfig(**params)
        expected = AgentSpec(
            n_arms,
            config.local_subroutine,
            config.local_params(n_arms, 1, sigma, bernoulli, pulls),
            config.vote_drop,
            report_privacy=config.report_privacy,
        )
        assert spec["subroutine"] == expected.subroutine, params
        confidence = spec["params"].pop("confidence")
        assert confidence == pytest.approx(expected.params.confidence, rel=1e-13, abs=0), params
        assert spec["params"] == {
            k: v for k, v in asdict(expected.params).items() if k != "confidence"
        }, params
        assert (spec["vote_drop"], spec["report_privacy"]) == (
            expected.vote_drop,
            expected.report_privacy,
        ), params


def test_js_privatize_is_python_mechanism_privatize_on_a_grid() -> None:
    """LDP's device side (sdk/js/src/private.ts against common/ldp.py and agent/private_device.py):
    the same bit from the same (reward, u_round, u_flip) at every dp_epsilon, the boundaries
    included (u_round at the reward, u_flip at p and one ulp below it: both sides compare with
    `<`); p itself equal bit for bit; the same arm from the same allocation and uniform; the same
    clipped reward."""
    grid = np.random.default_rng(2027)
    epsilons = [0.05, 0.5, 1.0, 2.0, 3.7, 10.0]
    keeps = js_run({"calls": [["keepProbability", e] for e in epsilons]})
    assert keeps == [Mechanism(e).keep for e in epsilons]
    rewards = [0.0, 1.0, 0.5, 0.1, 0.3, 0.9, *grid.uniform(size=6).tolist()]
    calls: list[list[Any]] = []
    for e in epsilons:
        keep = Mechanism(e).keep
        flips = [0.0, keep, math.nextafter(keep, 0.0), 0.999999, *grid.uniform(size=3).tolist()]
        for r in rewards:
            rounds = [r, math.nextafter(r, 0.0) if r > 0 else 0.0, 0.0, *grid.uniform(size=3)]
            calls += [["privatize", e, r, float(u), f] for u in rounds for f in flips]
    bits = js_run({"calls": calls})
    expected = [Mechanism(e).privatize(r, u, f) for _, e, r, u, f in calls]
    assert bits == expected
    assert {0, 1} == set(bits) and len(calls) > 3000

    draws: list[tuple[list[float], float]] = []
    for _ in range(400):
        weights = grid.dirichlet(np.ones(4)) * (grid.uniform(size=4) > 0.3)
        if weights.sum() == 0:
            continue
        u = float(grid.choice([0.0, 1.0 - 2**-53, grid.uniform()]))
        draws.append((weights.tolist(), u))
    arms = js_run({"calls": [["drawArm", w, u] for w, u in draws]})
    assert arms == [draw_arm(w, u) for w, u in draws]
    clipped = [(float(x), -1.0, 3.0) for x in grid.uniform(-3, 5, size=50)]
    units = js_run({"calls": [["unitReward", *c] for c in clipped]})
    assert units == [unit_reward(*c) for c in clipped]
