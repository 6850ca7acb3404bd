"""The fast simulator: the reference's semantics in one compiled loop over activations.

`common.simulation.reference` is the definition: it drives `common.agent.LocalAgent` and the
subroutines of `common.subroutines` one activation at a time. This module keeps the same state in
numpy arrays (per agent: counts and sums (N, K), local set, checked round, round order, LUCB queue,
ME round, DP epoch, experiment epoch, votes already decided) and runs every activation inside one
numba kernel. Random streams differ from the reference (one xoshiro256** stream per trial, its 256-bit
state drawn from the trial's SeedSequence); the distribution of every output is the same.

Cost per activation is O(K) for one agent; work over all agents happens only when the global set
changes (an elimination or a DSER4 reset) or, under the "global" stop rule, when retirements have
removed half the activation mass (the agent table is then rebuilt). The tie rule
(`common.votes.is_tied`) is kept incrementally: O(K) after a counted vote, a CE settled message,
a retirement or a Byzantine agent's activation, O(N K) after an elimination or a reset, nothing
on the other activations.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import types
from numba.experimental import structref

from common.simulation import cde_fast, ldp
from common.simulation.config import (
    SimulationConfig,
    TrialResult,
    find_suspects,
    honest_outcome,
    tie_outcome,
)
from common.subroutines.bounds import (
    KL_EDGE,
    KL_ITERATIONS,
    KL_LUCB_ALPHA,
    KL_LUCB_K1,
    KL_TOLERANCE,
    STITCH_ALPHA,
    STITCH_LOGLOG,
    STITCH_SCALE,
)
from common.votes import Elimination

# Subroutine codes.
SUB_SE = 0  # SE, SER3, SER4, KL-SE, stitched-SE (shuffle / reset / bound flags below)
SUB_ME = 1
SUB_LUCB = 2
SUB_DP = 3
_SUB_CODES = {
    "se": SUB_SE,
    "ser3": SUB_SE,
    "ser4": SUB_SE,
    "kl-se": SUB_SE,
    "stitched-se": SUB_SE,
    "me": SUB_ME,
    "lucb": SUB_LUCB,
    "ugapec": SUB_LUCB,
    "kl-lucb": SUB_LUCB,
    "stitched-lucb": SUB_LUCB,
    "dp-se": SUB_DP,
}

STOP_NAMES = ("budget", "all-agents", "global", "exhausted", "tie")

# Integer parameters (ip).
P_N = 0  # agents with state (1 for central)
P_K = 1
P_SUB = 2
P_SHUFFLE = 3
P_SER4 = 4
P_GLOBAL_RESET = 5
P_VOTING = 6
P_RETIRE = 7
P_EVERY_ARM = 8
P_BOUNDED = 9
P_DRIFT = 10
P_THRESHOLD = 11
P_BUDGET = 12
P_ATTACKERS = 13  # Byzantine agents 0 .. A-1
P_ATTACKED = 14  # the arm they vote against
P_BOUND = 15  # the confidence bound: B_HOEFFDING, B_KL, B_STITCHED (SE and LUCB families)
P_RULE = 16  # the LUCB family's sampling and stopping rule: R_LUCB, R_UGAPEC
P_SIZE = 17

# Confidence bounds (ip[P_BOUND]) and explore-then-commit rules (ip[P_RULE]).
B_HOEFFDING = 0  # the subroutine's own Hoeffding / sub-Gaussian radius (se, ser3, ser4, lucb)
B_KL = 1
B_STITCHED = 2
R_LUCB = 0
R_UGAPEC = 1
# Per subroutine name: (the bound, the rule); absent: (B_HOEFFDING, R_LUCB).
_BOUNDS_AND_RULES: dict[str, tuple[int, int]] = {
    "kl-se": (B_KL, R_LUCB),
    "stitched-se": (B_STITCHED, R_LUCB),
    "ugapec": (B_HOEFFDING, R_UGAPEC),
    "kl-lucb": (B_KL, R_LUCB),
    "stitched-lucb": (B_STITCHED, R_LUCB),
}
# The SE family's subroutines whose round-robin order is drawn again every round.
_SHUFFLED = ("ser3", "ser4", "kl-se", "stitched-se")

# Float parameters (fp).
F_EPS = 0
F_CONF = 1
F_SIGMA = 2
F_PHI = 3
F_DP_EPS = 4
F_DROP = 5
F_RADIUS = 6  # RADIUS_SCALE at the call
F_SIZE = 7

# Every confidence radius of the local subroutines is multiplied by this (KL levels by its square,
# DP-SE's elimination gap by it; ME has no radius and is left alone). 1.0 is the product, bit for
# bit (x * 1.0 == x). The guarantee tests set it below 1, a
# deliberately broken engine, to show that they reject it (tests/test_guarantees.py). Read by
# `run_trial` at each call and passed in `fp`: numba freezes a global at compile time and its
# cache would keep the frozen value, so the kernel never reads this name.
RADIUS_SCALE = 1.0

# Per-agent state: one int64 row and one float64 row per agent, so that a helper call passes few
# arrays (numba reference-counts every array argument of a call, atomically).
C_NACT = 0  # |K_n|
C_INIT = 1  # |K_n| at the last restart (the radius' K)
C_EPOCH = 2  # experiment epoch the agent last synced with
C_HELD = 3  # the one arm of K_n, or -1 (updated at the end of each own activation)
C_A = 4  # SE: checked round | ME: samples per arm | LUCB: queue length | DP: R(e)
C_B = 5  # LUCB: queue[0] | DP: epoch e
C_C = 6  # LUCB: queue[1] | DP: |K_n| at the start of the epoch
C_VER = 7  # the global set's version at the agent's last sync (equal: nothing to sync)
C_ARMS = 8  # then K counts, K round-order ranks, K local-set flags, K decided-vote flags
# fst: the ME round's epsilon and delta, then K sums.
G_EPS = 0
G_DELTA = 1
G_ARMS = 2


# -- random numbers: xoshiro256** in a uint64[4] state, seeded from the trial's SeedSequence -----
# (numba's np.random looks its state up in thread-local storage at every call: 5x slower here.)
@njit(cache=True, inline="always")
def _rotl(x, k):
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True)
def _uniform(rs):
    """A double in [0, 1) with 53 random bits."""
    s0 = rs[0]
    s1 = rs[1]
    s2 = rs[2]
    s3 = rs[3]
    result = _rotl(s1 * np.uint64(5), 7) * np.uint64(9)
    t = s1 << np.uint64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    rs[0] = s0
    rs[1] = s1
    rs[2] = s2
    rs[3] = _rotl(s3, 45)
    return float(result >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def _normal(rs, mu, sigma):
    """Box-Muller."""
    u1 = 1.0 - _uniform(rs)  # (0, 1]
    u2 = _uniform(rs)
    return mu + sigma * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@njit(cache=True)
def _laplace(rs, scale):
    """numpy's inversion: U in [0, 1), U = 0 redrawn."""
    while True:
        u = _uniform(rs)
        if u >= 0.5:
            return -scale * np.log(2.0 - u - u)
        if u > 0.0:
            return scale * np.log(u + u)


# -- sharper bounds (common.subroutines.bounds, same formulas). They live in this file because
# numba's cache is invalidated by changes to the cached function's own file only: a kernel cached
# with a callee from another module would keep the callee's old code.
@njit(cache=True)
def kl_bernoulli(p, q):
    out = 0.0
    if p > 0.0:
        out += p * np.log(p / q) if q > 0.0 else np.inf
    if p < 1.0:
        out += (1.0 - p) * np.log((1.0 - p) / (1.0 - q)) if q < 1.0 else np.inf
    return out


@njit(cache=True)
def _kl_newton(mean, pulls, level, q):
    for _ in range(KL_ITERATIONS):
        g = pulls * kl_bernoulli(mean, q) - level
        if g <= KL_TOLERANCE:
            break
        q -= g / (pulls * (q - mean) / (q * (1.0 - q)))
    return q


@njit(cache=True)
def kl_upper(mean, pulls, level):
    mean = min(max(mean, 0.0), 1.0)
    if mean >= 1.0:
        return 1.0
    if mean <= 0.0:
        return -np.expm1(-level / pulls)
    return _kl_newton(mean, pulls, level, min(mean + np.sqrt(level / (2.0 * pulls)), 1.0 - KL_EDGE))


@njit(cache=True)
def kl_lower(mean, pulls, level):
    mean = min(max(mean, 0.0), 1.0)
    if mean <= 0.0:
        return 0.0
    if mean >= 1.0:
        return np.exp(-level / pulls)
    return _kl_newton(mean, pulls, level, max(mean - np.sqrt(level / (2.0 * pulls)), KL_EDGE))


@njit(cache=True)
def elimination_level(rounds, n_arms, confidence):
    return np.log(4.0 * n_arms * rounds * rounds / confidence)


@njit(cache=True)
def kl_lucb_level(time, n_arms, confidence):
    # KL_LUCB_K1 is frozen into the compiled code and numba's cache checks this file only:
    # a change of KL_LUCB_K1 must come with an edit of this file.
    return np.log(KL_LUCB_K1 * n_arms * float(time) ** KL_LUCB_ALPHA / confidence)


@njit(cache=True)
def stitched_radius(pulls, n_arms, confidence, sigma, bounded):
    scale = 0.5 if bounded else sigma
    alpha = confidence / (2.0 * n_arms)
    n = float(pulls)
    inner = np.log(np.log(2.0 * n)) + STITCH_LOGLOG * np.log(STITCH_ALPHA / alpha)
    return STITCH_SCALE * scale * np.sqrt(inner / n)


@njit(cache=True)
def gaussian_radius(pulls, level, sigma):
    return sigma * np.sqrt(2.0 * level / pulls)


# -- radii and round sizes (same formulas, same float operations as subroutines/radius.py) ---------
@njit(cache=True)
def _elimination_radius(rounds, n_arms, confidence, sigma, bounded):
    log_term = np.log(4.0 * n_arms * rounds * rounds / confidence)
    if bounded:
        return np.sqrt(log_term / (2.0 * rounds))
    return sigma * np.sqrt(2.0 * log_term / rounds)


@njit(cache=True)
def _lucb_radius(pulls, time, n_arms, confidence, sigma, bounded):
    log_term = np.log(5.0 * n_arms * float(time) ** 4 / (4.0 * confidence))
    if bounded:
        return np.sqrt(log_term / (2.0 * pulls))
    return sigma * np.sqrt(2.0 * log_term / pulls)


@njit(cache=True)
def _me_samples(epsilon, delta, sigma, bounded):
    scale = 1.0 if bounded else (2.0 * sigma) ** 2
    return np.int64(np.ceil(scale * 4.0 / epsilon**2 * np.log(3.0 / delta)))


@njit(cache=True)
def _dp_epoch_length(epoch, n_arms, beta, dp_epsilon):
    eps_e = 2.0 ** (-epoch)
    e2 = float(epoch * epoch)
    a = 32.0 * np.log(8.0 * n_arms * e2 / beta) / eps_e**2
    b = 8.0 * np.log(4.0 * n_arms * e2 / beta) / (dp_epsilon * eps_e)
    return np.int64(np.ceil(max(a, b)))


@njit(cache=True)
def _dp_gap(epoch, rounds, n_arms, beta, dp_epsilon):
    e2 = float(epoch * epoch)
    h = np.sqrt(np.log(8.0 * n_arms * e2 / beta) / (2.0 * rounds))
    c = np.log(4.0 * n_arms * e2 / beta) / (dp_epsilon * rounds)
    return 2.0 * (h + c)


# -- activation distribution: alias table over the present agents ---------------------------------
@njit(cache=True)
def _build_alias(base, present, tab_idx, tab_prob, tab_alias):
    """Vose's alias table of `base` restricted to `present`; returns (size, mass)."""
    m = 0
    mass = 0.0
    for i in range(base.shape[0]):
        if present[i]:
            tab_idx[m] = i
            mass += base[i]
            m += 1
    scaled = np.empty(m)
    small = np.empty(m, np.int64)
    large = np.empty(m, np.int64)
    ns = 0
    nl = 0
    for j in range(m):
        tab_alias[j] = j
        scaled[j] = base[tab_idx[j]] * m / mass
        if scaled[j] < 1.0:
            small[ns] = j
            ns += 1
        else:
            large[nl] = j
            nl += 1
    while ns > 0 and nl > 0:
        ns -= 1
        s = small[ns]
        nl -= 1
        g = large[nl]
        tab_prob[s] = scaled[s]
        tab_alias[s] = g
        scaled[g] = (scaled[g] + scaled[s]) - 1.0
        if scaled[g] < 1.0:
            small[ns] = g
            ns += 1
        else:
            large[nl] = g
            nl += 1
    for j in range(nl):
        tab_prob[large[j]] = 1.0
    for j in range(ns):
        tab_prob[small[j]] = 1.0
    return m, mass


# -- one agent's subroutine (rare events: round ends, decisions, syncs) -------------------------
@njit(cache=True)
def _ratio(total, count):
    """An empirical mean, 0 for an arm not sampled yet (ArmSelection.means)."""
    return total / count if count > 0 else 0.0


@njit(cache=True)
def _eliminate(n, a, k, ist, out):
    o_act = C_ARMS + 2 * k
    if ist[n, o_act + a]:
        ist[n, o_act + a] = 0
        ist[n, C_NACT] -= 1
        out[a] = True
        return 1
    return 0


@njit(cache=True)
def _new_order(n, k, ist, rs):
    o_ord = C_ARMS + k
    for a in range(k):
        ist[n, o_ord + a] = a
    for i in range(k - 1, 0, -1):
        j = min(int(_uniform(rs) * (i + 1)), i)
        tmp = ist[n, o_ord + i]
        ist[n, o_ord + i] = ist[n, o_ord + j]
        ist[n, o_ord + j] = tmp


@njit(cache=True)
def _clear_stats(n, k, ist, fst):
    for a in range(k):
        ist[n, C_ARMS + a] = 0
        fst[n, G_ARMS + a] = 0.0


@njit(cache=True)
def _dp_start_epoch(n, ip, fp, ist, fst):
    ist[n, C_C] = ist[n, C_NACT]
    ist[n, C_A] = _dp_epoch_length(ist[n, C_B], ist[n, C_C], fp[F_CONF], fp[F_DP_EPS])
    _clear_stats(n, ip[P_K], ist, fst)


@njit(cache=True)
def _restart(n, remaining, ip, fp, ist, fst, rs):
    """ArmSelection.restart(remaining): fresh statistics on the global set."""
    k = ip[P_K]
    o_act = C_ARMS + 2 * k
    c = 0
    for a in range(k):
        ist[n, o_act + a] = 1 if remaining[a] else 0
        c += ist[n, o_act + a]
    _clear_stats(n, k, ist, fst)
    ist[n, C_NACT] = c
    ist[n, C_INIT] = c
    sub = ip[P_SUB]
    if sub == SUB_SE:
        ist[n, C_A] = 0
        if ip[P_SHUFFLE]:
            _new_order(n, k, ist, rs)
    elif sub == SUB_ME:
        fst[n, G_EPS] = fp[F_EPS] / 4.0
        fst[n, G_DELTA] = fp[F_CONF] / 2.0
        ist[n, C_A] = _me_samples(fst[n, G_EPS], fst[n, G_DELTA], fp[F_SIGMA], ip[P_BOUNDED] != 0)
    elif sub == SUB_LUCB:
        ist[n, C_A] = 0
    else:
        ist[n, C_B] = 1
        _dp_start_epoch(n, ip, fp, ist, fst)


@njit(cache=True)
def _empirical_best(n, k, ist, fst):
    """The active arm of highest mean, the lowest index on ties (ArmSelection._empirical_best)."""
    o_act = C_ARMS + 2 * k
    keep = -1
    keep_mu = -np.inf
    for a in range(k):
        if ist[n, o_act + a]:
            mu = _ratio(fst[n, G_ARMS + a], ist[n, C_ARMS + a])
            if keep < 0 or mu > keep_mu:
                keep = a
                keep_mu = mu
    return keep


@njit(cache=True)
def _se_round(n, rounds, ip, fp, ist, fst, out, rs):
    """The check at the end of round r: gap elimination, then the eps-stop; then a new order."""
    k = ip[P_K]
    o_act = C_ARMS + 2 * k
    ist[n, C_A] = rounds
    if ip[P_BOUND] == B_KL:
        nout = _kl_se_check(n, rounds, ip, fp, ist, fst, out)
        if ip[P_SHUFFLE]:
            _new_order(n, k, ist, rs)
        return nout
    if ip[P_BOUND] == B_STITCHED:
        radius = stitched_radius(
            rounds, ist[n, C_INIT], fp[F_CONF], fp[F_SIGMA], ip[P_BOUNDED] != 0
        )
    else:
        radius = _elimination_radius(
            rounds, ist[n, C_INIT], fp[F_CONF], fp[F_SIGMA], ip[P_BOUNDED] != 0
        )
    radius *= fp[F_RADIUS]
    best = -np.inf
    for a in range(k):
        if ist[n, o_act + a]:
            best = max(best, _ratio(fst[n, G_ARMS + a], ist[n, C_ARMS + a]))
    nout = 0
    for a in range(k):
        if (
            ist[n, o_act + a]
            and best - _ratio(fst[n, G_ARMS + a], ist[n, C_ARMS + a]) >= 2.0 * radius
        ):
            nout += _eliminate(n, a, k, ist, out)
    if radius <= fp[F_EPS] / 2.0 and ist[n, C_NACT] > 1:
        keep = _empirical_best(n, k, ist, fst)
        for a in range(k):
            if a != keep:
                nout += _eliminate(n, a, k, ist, out)
    if ip[P_SHUFFLE]:
        _new_order(n, k, ist, rs)
    return nout


@njit(cache=True)
def _kl_se_check(n, rounds, ip, fp, ist, fst, out):
    """KLSuccessiveElimination._check: KL intervals at level log(4 K r^2 / conf); eliminate every
    arm with U_a <= max_b L_b, then keep the empirical best h if max_{a != h} U_a - L_h < eps."""
    k = ip[P_K]
    o_act = C_ARMS + 2 * k
    level = elimination_level(rounds, ist[n, C_INIT], fp[F_CONF]) * fp[F_RADIUS] ** 2
    lower = np.empty(k)
    upper = np.empty(k)
    top_lower = -np.inf
    for a in range(k):
        if ist[n, o_act + a]:
            mu = _ratio(fst[n, G_ARMS + a], ist[n, C_ARMS + a])
            lower[a] = kl_lower(mu, rounds, level)
            upper[a] = kl_upper(mu, rounds, level)
            top_lower = max(top_lower, lower[a])
    nout = 0
    for a in range(k):
        if ist[n, o_act + a] and upper[a] <= top_lower:
            nout += _eliminate(n, a, k, ist, out)
    if ist[n, C_NACT] > 1:
        keep = _empirical_best(n, k, ist, fst)
        challenger = -np.inf
        for a in range(k):
            if ist[n, o_act + a] and a != keep:
                challenger = max(challenger, upper[a])
        if challenger - lower[keep] < fp[F_EPS]:
            for a in range(k):
                if a != keep:
                    nout += _eliminate(n, a, k, ist, out)
    return nout


@njit(cache=True)
def _me_end_round(n, ip, fp, ist, fst, out):
    """A round ends when every active arm has its samples: the lower half leaves."""
    k = ip[P_K]
    o_act = C_ARMS + 2 * k
    nact = ist[n, C_NACT]
    if nact <= 1:
        return 0
    samples = ist[n, C_A]
    for a in range(k):
        if ist[n, o_act + a] and ist[n, C_ARMS + a] < samples:
            return 0
    keep = (nact + 1) // 2
    mu = np.empty(k)
    for a in range(k):
        mu[a] = _ratio(fst[n, G_ARMS + a], ist[n, C_ARMS + a])
    drop = np.zeros(k, np.bool_)
    for a in range(k):
        if ist[n, o_act + a]:
            rank = 0
            for b in range(k):
                if ist[n, o_act + b] and (mu[b] > mu[a] or (mu[b] == mu[a] and b < a)):
                    rank += 1
            drop[a] = rank >= keep
    nout = 0
    for a in range(k):
        if drop[a]:
            nout += _eliminate(n, a, k, ist, out)
    _clear_stats(n, k, ist, fst)
    fst[n, G_EPS] *= 0.75
    fst[n, G_DELTA] /= 2.0
    ist[n, C_A] = _me_samples(fst[n, G_EPS], fst[n, G_DELTA], fp[F_SIGMA], ip[P_BOUNDED] != 0)
    return nout


@njit(cache=True)
def _ugapec_beta(pulls, time, n_arms, confidence, sigma, bounded):
    log_term = np.log(4.0 * n_arms * float(max(time - 1, 1)) ** 3 / confidence)
    if bounded:
        return np.sqrt(log_term / (2.0 * pulls))
    return sigma * np.sqrt(2.0 * log_term / pulls)


@njit(cache=True)
def _lucb_decide(n, ip, fp, ist, fst, out):
    """With an empty queue and every arm seen: the intervals by ip[P_BOUND], then the rule by
    ip[P_RULE]: LUCB1 (stop, keeping the empirical best, or queue (h, l)) or UGapEc (stop,
    keeping J, or queue the less known of J and u; both in the every-arm model)."""
    k = ip[P_K]
    o_act = C_ARMS + 2 * k
    if ist[n, C_NACT] <= 1 or ist[n, C_A] > 0:
        return 0
    time = 0
    for a in range(k):
        if ist[n, o_act + a] and ist[n, C_ARMS + a] == 0:
            return 0
        time += ist[n, C_ARMS + a]
    time = max(1, time)
    bounded = ip[P_BOUNDED] != 0
    bound = ip[P_BOUND]
    rule = ip[P_RULE]
    lower = np.empty(k)
    upper = np.empty(k)
    best = -1
    best_mu = -np.inf
    level = 0.0
    if bound == B_KL:
        level = kl_lucb_level(time, ist[n, C_INIT], fp[F_CONF]) * fp[F_RADIUS] ** 2
    for a in range(k):
        if ist[n, o_act + a]:
            pulls = ist[n, C_ARMS + a]
            mu = _ratio(fst[n, G_ARMS + a], pulls)
            if bound == B_KL:
                lower[a] = kl_lower(mu, pulls, level)
                upper[a] = kl_upper(mu, pulls, level)
            else:
                if bound == B_STITCHED:
                    rad = stitched_radius(pulls, ist[n, C_INIT], fp[F_CONF], fp[F_SIGMA], bounded)
                elif rule == R_UGAPEC:
                    rad = _ugapec_beta(
                        pulls, time, ist[n, C_INIT], fp[F_CONF], fp[F_SIGMA], bounded
                    )
                else:
                    rad = _lucb_radius(
                        pulls, time, ist[n, C_INIT], fp[F_CONF], fp[F_SIGMA], bounded
                    )
                rad *= fp[F_RADIUS]
                lower[a] = mu - rad
                upper[a] = mu + rad
            if best < 0 or mu > best_mu:
                best = a
                best_mu = mu
    nout = 0
    if rule == R_UGAPEC:
        chosen = -1
        chosen_gap = np.inf
        for a in range(k):
            if ist[n, o_act + a]:
                top = -np.inf
                for i in range(k):
                    if ist[n, o_act + i] and i != a:
                        top = max(top, upper[i])
                gap = top - lower[a]
                if chosen < 0 or gap < chosen_gap:
                    chosen = a
                    chosen_gap = gap
        if chosen_gap < fp[F_EPS]:
            for a in range(k):
                if a != chosen:
                    nout += _eliminate(n, a, k, ist, out)
            return nout
        rival = -1
        for a in range(k):
            if ist[n, o_act + a] and a != chosen and (rival < 0 or upper[a] > upper[rival]):
                rival = a
        if ip[P_EVERY_ARM]:
            ist[n, C_A] = 2
            ist[n, C_B] = chosen
            ist[n, C_C] = rival
        else:
            ist[n, C_A] = 1
            if upper[rival] - lower[rival] > upper[chosen] - lower[chosen]:
                ist[n, C_B] = rival
            else:
                ist[n, C_B] = chosen
        return nout
    ch = -1
    for a in range(k):
        if ist[n, o_act + a] and a != best and (ch < 0 or upper[a] > upper[ch]):
            ch = a
    if upper[ch] - lower[best] < fp[F_EPS]:
        for a in range(k):
            if a != best:
                nout += _eliminate(n, a, k, ist, out)
    else:
        ist[n, C_A] = 2
        ist[n, C_B] = best
        ist[n, C_C] = ch
    return nout


@njit(cache=True)
def _dp_end_epoch(n, ip, fp, ist, fst, out, rs):
    """An epoch ends when every active arm has R(e) samples: Laplace-noisy means, eliminate,
    forget the epoch's samples."""
    k = ip[P_K]
    o_act = C_ARMS + 2 * k
    if ist[n, C_NACT] <= 1:
        return 0
    rounds = ist[n, C_A]
    for a in range(k):
        if ist[n, o_act + a] and ist[n, C_ARMS + a] < rounds:
            return 0
    scale = 1.0 / (fp[F_DP_EPS] * rounds)
    noisy = np.empty(k)
    top = -np.inf
    for a in range(k):
        if ist[n, o_act + a]:
            noisy[a] = fst[n, G_ARMS + a] / rounds + _laplace(rs, scale)
            top = max(top, noisy[a])
    epoch = ist[n, C_B]
    gap = _dp_gap(epoch, rounds, ist[n, C_C], fp[F_CONF], fp[F_DP_EPS]) * fp[F_RADIUS]
    nout = 0
    for a in range(k):
        if ist[n, o_act + a] and top - noisy[a] > gap:
            nout += _eliminate(n, a, k, ist, out)
    ist[n, C_B] = epoch + 1
    _dp_start_epoch(n, ip, fp, ist, fst)
    return nout


@njit(cache=True)
def _sync(n, remaining, epoch, version, ip, fp, ist, fst, out, rs):
    """LocalAgent.sync: K_n & K, restart on an empty intersection or a new epoch (votes decided
    are forgotten with the epoch), else discard, which may end an ME round or a DP epoch or let
    LUCB decide. Returns the number of local eliminations marked in `out`."""
    k = ip[P_K]
    o_act = C_ARMS + 2 * k
    ist[n, C_VER] = version
    if ist[n, C_EPOCH] != epoch:
        ist[n, C_EPOCH] = epoch
        for a in range(k):
            ist[n, C_ARMS + 3 * k + a] = 0
        _restart(n, remaining, ip, fp, ist, fst, rs)
        return 0
    gone = 0
    for a in range(k):
        if ist[n, o_act + a] and not remaining[a]:
            gone += 1
    if gone == 0:
        return 0
    if gone == ist[n, C_NACT]:
        _restart(n, remaining, ip, fp, ist, fst, rs)
        return 0
    for a in range(k):
        if ist[n, o_act + a] and not remaining[a]:
            ist[n, o_act + a] = 0
    ist[n, C_NACT] -= gone
    sub = ip[P_SUB]
    if sub == SUB_ME:
        return _me_end_round(n, ip, fp, ist, fst, out)
    if sub == SUB_LUCB:
        q = 0
        for i in range(ist[n, C_A]):
            a = ist[n, C_B + i]
            if ist[n, o_act + a]:
                ist[n, C_B + q] = a
                q += 1
        ist[n, C_A] = q
        return _lucb_decide(n, ip, fp, ist, fst, out)
    if sub == SUB_DP:
        return _dp_end_epoch(n, ip, fp, ist, fst, out, rs)
    return 0


@njit(cache=True)
def _collect_votes(n, k, ist, out, drop, vbuf, nv, rs):
    """LocalAgent._votes: the arms not decided before (in arm order), each sent with probability
    1 - xi (CE); decided either way."""
    o_vot = C_ARMS + 3 * k
    for a in range(k):
        if out[a]:
            out[a] = False
            if not ist[n, o_vot + a]:
                ist[n, o_vot + a] = 1
                if drop <= 0.0 or _uniform(rs) >= drop:
                    vbuf[nv] = a
                    nv += 1
    return nv


# -- the tie rule (common.votes.is_tied), kept incrementally -------------------------------------
# An agent is "done" when it can vote no more in this epoch: the coordinator holds its settled flag
# (CE), it voted against every remaining arm but one, it retired (global rule), or it is a
# Byzantine agent that had its activation of the epoch. dv[a]: done agents that voted against a.
# Arm a can reach (agents not done) + dv[a] votes; a tie is when no remaining arm reaches the
# threshold. A counted vote or a new done agent costs O(K); an elimination or a reset recounts
# everything (O(N K), as the global set's change already costs O(N)).
@njit(cache=True)
def _tie_mark(n, k, stamp, remaining, voter_stamp, tdone, dv):
    """Agent n is done from now on: returns 1 if it was not before."""
    if tdone[n]:
        return 0
    tdone[n] = True
    for a in range(k):
        if remaining[a] and voter_stamp[a, n] == stamp:
            dv[a] += 1
    return 1


@njit(cache=True)
def _tie_recount(
    ip, epoch, n_remaining, remaining, voter_stamp, flag, present, attacked_epoch, nvr, tdone, dv
):
    """The whole bookkeeping from scratch; returns the number of done agents."""
    n_agents = ip[P_N]
    k = ip[P_K]
    attackers = ip[P_ATTACKERS]
    stamp = epoch + 1
    for m in range(n_agents):
        nvr[m] = 0
    for a in range(k):
        dv[a] = 0
        if remaining[a]:
            for m in range(n_agents):
                if voter_stamp[a, m] == stamp:
                    nvr[m] += 1
    count = 0
    for m in range(n_agents):
        done = (
            flag[m]
            or not present[m]
            or (m < attackers and attacked_epoch[m] == epoch)
            or n_remaining - nvr[m] <= 1
        )
        tdone[m] = done
        if done:
            count += 1
            for a in range(k):
                if remaining[a] and voter_stamp[a, m] == stamp:
                    dv[a] += 1
    return count


@njit(cache=True)
def _tied(n_agents, k, threshold, n_remaining, remaining, n_done, dv):
    """Several arms remain and none can reach the threshold any more."""
    if n_remaining < 2:
        return False
    free = n_agents - n_done
    if free >= threshold:
        return False
    top = 0
    for a in range(k):
        if remaining[a] and dv[a] > top:
            top = dv[a]
    return free + top < threshold


# -- the kernel: one trial, activation after activation ------------------------------------------
# Its state is one Run (a numba structref, below), the one argument of the helpers of its rarer
# events besides scalars: numba reference-counts every array a call is given (atomically), a Run
# counts once.
@structref.register
class RunType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class Run(structref.StructRefProxy):
    """One trial's state. Inputs: ip, fp (the parameters), rs (the random stream), mu0, drift
    (the arms), base (the activation probabilities). ist, fst: the agents' subroutines (C_*, G_*).
    remaining, n_voters: the global set and each arm's voters. voter_stamp (K, N), sent_stamp,
    sent_time (N, K): epoch stamps (epoch + 1 means "in this epoch": a DSER4 reset clears them for
    free) of counted and of sent votes, and the activation t of each sent vote. settled: each agent
    holds an arm still in the global set (Byzantine agents always are). flag, attacked_epoch,
    present, nvr, tdone, dv: the tie rule's state (see _tie_recount): the coordinator's settled
    flags (CE), each attacker's last epoch, the agents not retired, per agent its counted votes
    against remaining arms and whether it is done, per arm dv. out, pulled, vbuf: one activation's
    eliminations, pulled arms and votes. tab_*: the alias table (_build_alias). count: the
    counters (R_*); mass: the activation masses (M_*)."""


_RUN_FIELDS = [
    "ip",
    "fp",
    "rs",
    "mu0",
    "drift",
    "base",
    "ist",
    "fst",
    "remaining",
    "n_voters",
    "voter_stamp",
    "sent_stamp",
    "sent_time",
    "settled",
    "flag",
    "attacked_epoch",
    "present",
    "nvr",
    "tdone",
    "dv",
    "out",
    "pulled",
    "vbuf",
    "tab_idx",
    "tab_prob",
    "tab_alias",
    "count",
    "mass",
]
structref.define_constructor(Run, RunType, _RUN_FIELDS)

R_REMAINING = 0  # arms in the global set
R_EPOCH = 1  # the experiment epoch (DSER4 resets)
R_EPOCH_ELIMS = 2  # eliminations in this epoch
R_VERSION = 3  # the global set's version
R_SETTLED = 4  # settled agents
R_DONE = 5  # agents done for the tie rule
R_MESSAGES = 6  # votes sent and settled messages
R_SETTLED_MSGS = 7  # CE's settled messages
R_PRESENT = 8  # agents not retired
R_TAB_N = 9  # the alias table's size
R_SIZE = 10
M_TAB = 0  # the alias table's mass
M_PRESENT = 1  # the present agents' mass
M_SIZE = 2


@njit(cache=True)
def _new_run(ip, fp, rs, mu0, drift, base):
    """The trial's state before its first activation: every agent restarted on the whole arm set,
    the Byzantine agents settled (they never hold the all-agents stop back), every agent present
    in the activation table."""
    n_agents = ip[P_N]
    k = ip[P_K]
    attackers = ip[P_ATTACKERS]
    run = Run(
        ip,
        fp,
        rs,
        mu0,
        drift,
        base,
        np.zeros((n_agents, C_ARMS + 4 * k), np.int64),  # ist
        np.zeros((n_agents, G_ARMS + k)),  # fst
        np.ones(k, np.bool_),  # remaining
        np.zeros(k, np.int64),  # n_voters
        np.zeros((k, n_agents), np.int64),  # voter_stamp
        np.zeros((n_agents, k), np.int64),  # sent_stamp
        np.zeros((n_agents, k), np.int64),  # sent_time
        np.zeros(n_agents, np.bool_),  # settled
        np.zeros(n_agents, np.bool_),  # flag
        np.full(n_agents, -1, np.int64),  # attacked_epoch
        np.ones(n_agents, np.bool_),  # present
        np.zeros(n_agents, np.int64),  # nvr
        np.zeros(n_agents, np.bool_),  # tdone
        np.zeros(k, np.int64),  # dv
        np.zeros(k, np.bool_),  # out
        np.zeros(k, np.bool_),  # pulled
        np.zeros(2 * k, np.int64),  # vbuf
        np.empty(n_agents, np.int64),  # tab_idx
        np.empty(n_agents),  # tab_prob
        np.empty(n_agents, np.int64),  # tab_alias
        np.zeros(R_SIZE, np.int64),  # count
        np.zeros(M_SIZE),  # mass
    )
    run.count[R_REMAINING] = k
    for n in range(n_agents):
        for a in range(k):
            run.ist[n, C_ARMS + k + a] = a
        _restart(n, run.remaining, ip, fp, run.ist, run.fst, rs)
        run.ist[n, C_HELD] = -1
    for m in range(attackers):
        run.settled[m] = True
    run.count[R_SETTLED] = attackers
    run.count[R_PRESENT] = n_agents
    _rebuild_alias(run)
    return run


@njit(cache=True)
def _rebuild_alias(run):
    """The activation table over the present agents; their mass is the table's again."""
    tab_n, tab_mass = _build_alias(run.base, run.present, run.tab_idx, run.tab_prob, run.tab_alias)
    run.count[R_TAB_N] = tab_n
    run.mass[M_TAB] = tab_mass
    run.mass[M_PRESENT] = tab_mass


@njit(cache=True)
def _tied_now(run):
    """`_tied` on the run's state: several arms remain and none can reach the threshold."""
    ip, c = run.ip, run.count
    return _tied(
        ip[P_N], ip[P_K], ip[P_THRESHOLD], c[R_REMAINING], run.remaining, c[R_DONE], run.dv
    )


@njit(cache=True)
def _recount_ties(run):
    """The tie rule's bookkeeping from scratch (after an elimination or a reset)."""
    c = run.count
    c[R_DONE] = _tie_recount(
        run.ip,
        c[R_EPOCH],
        c[R_REMAINING],
        run.remaining,
        run.voter_stamp,
        run.flag,
        run.present,
        run.attacked_epoch,
        run.nvr,
        run.tdone,
        run.dv,
    )


@njit(cache=True)
def _mark_done(n, run):
    """Agent n can vote no more in this epoch (see _tie_mark)."""
    c = run.count
    stamp = c[R_EPOCH] + 1
    c[R_DONE] += _tie_mark(n, run.ip[P_K], stamp, run.remaining, run.voter_stamp, run.tdone, run.dv)


@njit(cache=True)
def _attack(n, run):
    """A Byzantine agent's first activation in the epoch: no subroutine, one vote against the
    attacked arm if it is still in the global set. Returns the votes to send."""
    run.attacked_epoch[n] = run.count[R_EPOCH]
    _mark_done(n, run)
    attacked = run.ip[P_ATTACKED]
    if run.remaining[attacked]:
        run.vbuf[0] = attacked
        return 1
    return 0


@njit(cache=True)
def _synced_votes(n, run):
    """A voting agent that has not seen the global set's last change syncs with it; the local
    eliminations the sync causes become votes. Returns how many."""
    c = run.count
    synced = _sync(
        n,
        run.remaining,
        c[R_EPOCH],
        c[R_VERSION],
        run.ip,
        run.fp,
        run.ist,
        run.fst,
        run.out,
        run.rs,
    )
    if synced > 0:
        return _collect_votes(n, run.ip[P_K], run.ist, run.out, run.fp[F_DROP], run.vbuf, 0, run.rs)
    return 0


@njit(cache=True)
def _ser4_reset(n, run):
    """SER4's coin fell for agent n: DSER4 resets the whole experiment (returns True), SER4 only
    the agent's own run."""
    ip, fp = run.ip, run.fp
    if ip[P_GLOBAL_RESET] == 0:
        _restart(n, run.remaining, ip, fp, run.ist, run.fst, run.rs)
        return False
    _global_reset(run)
    c = run.count
    _sync(n, run.remaining, c[R_EPOCH], c[R_VERSION], ip, fp, run.ist, run.fst, run.out, run.rs)
    return True


@njit(cache=True)
def _global_reset(run):
    """DSER4: every arm back in the global set, a new epoch; every agent restarts in it."""
    attackers = run.ip[P_ATTACKERS]
    c = run.count
    for a in range(run.ip[P_K]):
        run.remaining[a] = True
        run.n_voters[a] = 0
    c[R_REMAINING] = run.ip[P_K]
    c[R_EPOCH] += 1
    c[R_EPOCH_ELIMS] = 0
    c[R_VERSION] += 1
    c[R_SETTLED] = attackers  # every agent restarts in the new epoch
    for m in range(run.ip[P_N]):
        run.settled[m] = m < attackers
        run.flag[m] = False
    _recount_ties(run)


@njit(cache=True)
def _count_votes(n, nv, t, run, elims):
    """The coordinator receives agent n's votes (vbuf): late and duplicate votes change nothing,
    an arm with `threshold` voters leaves the global set. Returns whether a vote counted."""
    threshold = run.ip[P_THRESHOLD]
    says_settled = run.ip[P_VOTING] != 0 and run.fp[F_DROP] > 0.0  # CE: settled messages
    c = run.count
    remaining, voter_stamp, n_voters = run.remaining, run.voter_stamp, run.n_voters
    counted = False
    changed = False
    epoch = c[R_EPOCH]
    stamp = epoch + 1
    for v in range(nv):
        a = run.vbuf[v]
        if run.sent_stamp[n, a] != stamp:
            run.sent_time[n, a] = t
        run.sent_stamp[n, a] = stamp
        c[R_MESSAGES] += 1
        if not remaining[a] or voter_stamp[a, n] == stamp:
            continue  # a late vote, or a duplicate: a message that changes nothing
        voter_stamp[a, n] = stamp
        n_voters[a] += 1
        counted = True
        if n_voters[a] >= threshold and c[R_REMAINING] > 1:
            remaining[a] = False
            c[R_REMAINING] -= 1
            changed = True
            c[R_EPOCH_ELIMS] += 1
            elims.append((a, n_voters[a], t, c[R_EPOCH_ELIMS], epoch))
            # The coordinator forgets the settled flag of agents that did not vote against the
            # arm (it may have been theirs).
            if says_settled:
                for m in range(run.ip[P_N]):
                    if run.flag[m] and voter_stamp[a, m] != stamp:
                        run.flag[m] = False
        elif not changed:  # else the recount below does it
            run.nvr[n] += 1
            if run.tdone[n]:
                run.dv[a] += 1
            elif c[R_REMAINING] - run.nvr[n] <= 1:
                _mark_done(n, run)
    if changed:
        _after_elimination(run)
    return counted


@njit(cache=True)
def _after_elimination(run):
    """The global set changed: a new version, every agent's settled state again, the tie rule's
    bookkeeping from scratch."""
    c = run.count
    c[R_VERSION] += 1
    c[R_SETTLED] = 0
    for m in range(run.ip[P_N]):
        hm = run.ist[m, C_HELD]
        run.settled[m] = m < run.ip[P_ATTACKERS] or (
            hm >= 0 and run.remaining[hm] and run.ist[m, C_EPOCH] == c[R_EPOCH]
        )
        if run.settled[m]:
            c[R_SETTLED] += 1
    _recount_ties(run)


@njit(cache=True)
def _retire(n, run):
    """The global stop rule: agent n leaves the activation process (the table is rebuilt once the
    present agents hold under half its mass). Returns whether the tie rule must look again."""
    c = run.count
    run.present[n] = False
    c[R_PRESENT] -= 1
    run.mass[M_PRESENT] -= run.base[n]
    if c[R_PRESENT] > 0 and run.mass[M_PRESENT] < 0.5 * run.mass[M_TAB]:
        _rebuild_alias(run)
    if run.ip[P_VOTING] != 0:
        _mark_done(n, run)
        return True
    return False


@njit(cache=True)
def _all_settled_stop(run):
    """Every agent is settled (all-agents rule): a stop, or a tie if several arms remain and none
    can leave even counting every honest agent as done (only unactivated attackers can vote)."""
    if run.ip[P_VOTING] == 0 or run.count[R_REMAINING] <= 1:
        return 1
    for m in range(run.ip[P_ATTACKERS], run.ip[P_N]):
        _mark_done(m, run)
    return 4 if _tied_now(run) else 1


@njit(cache=True, inline="always")
def _draw_agent(rs, tab_n, tab_idx, tab_prob, tab_alias, present):
    """An activation: the alias table, drawn again until a present agent comes."""
    while True:
        u = _uniform(rs) * tab_n
        i = min(int(u), tab_n - 1)
        j = i if u - i < tab_prob[i] else tab_alias[i]
        n = tab_idx[j]
        if present[n]:
            return n


@njit(cache=True, inline="always")
def _select(n, k, sub, every, ist, pulled):
    """select(): marks in `pulled` the arms agent n pulls now; returns how many."""
    o_cnt = C_ARMS
    o_ord = C_ARMS + k
    o_act = C_ARMS + 2 * k
    npulled = 0
    if every:
        for a in range(k):
            if ist[n, o_act + a] and (
                sub in (SUB_SE, SUB_DP)
                or (sub == SUB_ME and ist[n, o_cnt + a] < ist[n, C_A])
                or (sub == SUB_LUCB and ist[n, o_cnt + a] == 0)
            ):
                pulled[a] = True
                npulled += 1
        if sub == SUB_LUCB and npulled == 0 and ist[n, C_A] > 0:
            for i in range(ist[n, C_A]):
                pulled[ist[n, C_B + i]] = True
                npulled += 1
        return npulled
    pick = -1
    if sub == SUB_LUCB:
        for a in range(k):
            if ist[n, o_act + a] and ist[n, o_cnt + a] == 0:
                pick = a
                break
        if pick < 0 and ist[n, C_A] > 0:
            pick = ist[n, C_B]
    else:  # the least-pulled active arm, first in the agent's order on a tie
        limit = ist[n, C_A] if sub == SUB_ME else np.iinfo(np.int64).max
        pc = 0
        po = 0
        for a in range(k):
            if ist[n, o_act + a]:
                c = ist[n, o_cnt + a]
                if c >= limit:
                    continue
                o = ist[n, o_ord + a]
                if pick < 0 or c < pc or (c == pc and o < po):
                    pick = a
                    pc = c
                    po = o
    if pick >= 0:
        pulled[pick] = True
        npulled = 1
    return npulled


@njit(cache=True, inline="always")
def _pull(n, k, t, pulled, mu0, drift, drifting, bounded, sigma, ist, fst, rs):
    """The environment: a reward for each pulled arm at time t, added to agent n's sums."""
    for a in range(k):
        if pulled[a]:
            mu = mu0[a]
            if drifting:
                mu = mu + drift[a] * float(t - 1)
                if bounded:
                    mu = min(max(mu, 0.0), 1.0)
            if not bounded:
                r = _normal(rs, mu, sigma)
            elif _uniform(rs) < mu:  # a Bernoulli reward
                r = 1.0
            else:
                r = 0.0
            ist[n, C_ARMS + a] += 1
            fst[n, G_ARMS + a] += r


@njit(cache=True, inline="always")
def _held_arm(n, k, ist):
    """The arm agent n holds: its one active arm, or -1 while it has several."""
    o_act = C_ARMS + 2 * k
    h = ist[n, C_HELD]
    if ist[n, C_NACT] != 1:
        h = -1
    elif h < 0 or not ist[n, o_act + h]:
        for a in range(k):
            if ist[n, o_act + a]:
                h = a
                break
    ist[n, C_HELD] = h
    return h


@njit(cache=True)
def _simulate(ip, fp, rs, mu0, drift, base):
    """One trial: activations until a stop rule, a tie or the budget.

    Each activation: draw an agent; an attacker attacks, an honest agent catches up with the
    global set, may reset (DSER4), then select() / pull / observe() and sends its votes; the
    coordinator counts them; then the stop rules. The rarer events are helpers over the Run.
    The hot path's steps (_draw_agent, _select, _pull, _held_arm) are inlined by numba
    (inline="always"): numba reference-counts, atomically, every array a called function is
    given, and an ordinary call per step cost half the rate."""
    n_agents = ip[P_N]
    k = ip[P_K]
    sub = ip[P_SUB]
    every = ip[P_EVERY_ARM] != 0
    voting = ip[P_VOTING] != 0
    retire = ip[P_RETIRE] != 0
    ser4 = ip[P_SER4] != 0
    bounded = ip[P_BOUNDED] != 0
    drifting = ip[P_DRIFT] != 0
    budget = ip[P_BUDGET]
    attackers = ip[P_ATTACKERS]
    phi = fp[F_PHI]
    drop = fp[F_DROP]
    sigma = fp[F_SIGMA]
    o_act = C_ARMS + 2 * k
    says_settled = voting and drop > 0.0  # CE: settled messages
    run = _new_run(ip, fp, rs, mu0, drift, base)
    ist, fst, out, pulled, vbuf = run.ist, run.fst, run.out, run.pulled, run.vbuf
    remaining, settled, flag, present, count = (
        run.remaining,
        run.settled,
        run.flag,
        run.present,
        run.count,
    )
    tab_idx, tab_prob, tab_alias = run.tab_idx, run.tab_prob, run.tab_alias
    elims = [(k, k, k, k, k)]  # (arm, votes, time, order in its epoch, epoch): a typed list
    elims.pop()
    t = 0
    stop = 0
    while t < budget:
        if retire and count[R_PRESENT] == 0:
            # a voting run: every agent retired with several arms left, none can leave: a tie
            stop = 4 if voting and _tied_now(run) else 3
            break
        n = _draw_agent(rs, count[R_TAB_N], tab_idx, tab_prob, tab_alias, present)
        t += 1
        nv = 0
        h = -1
        byz = n < attackers
        tie_event = False  # something that can make the votes tie: checked only then
        if byz:
            if run.attacked_epoch[n] != count[R_EPOCH]:
                nv = _attack(n, run)
                tie_event = True
        else:
            if voting and ist[n, C_VER] != count[R_VERSION]:
                nv = _synced_votes(n, run)
            if ser4 and _uniform(rs) < phi and _ser4_reset(n, run):
                nv = 0  # votes decided on the old epoch's statistics are never sent
                tie_event = True
            if ist[n, C_NACT] > 1 and _select(n, k, sub, every, ist, pulled) > 0:
                _pull(n, k, t, pulled, mu0, drift, drifting, bounded, sigma, ist, fst, rs)
                # observe(): each subroutine decides at the end of its round. Inline: as a
                # helper given these arrays, even inlined, it cost 25-35 % of the rate.
                nout = 0
                if sub == SUB_SE:  # a round ends when every active arm has one more pull
                    rounds = -1
                    for a in range(k):
                        if ist[n, o_act + a]:
                            if rounds < 0:
                                rounds = ist[n, C_ARMS + a]
                            elif ist[n, C_ARMS + a] != rounds:
                                rounds = -1
                                break
                    if rounds > ist[n, C_A]:
                        nout = _se_round(n, rounds, ip, fp, ist, fst, out, rs)
                elif sub == SUB_LUCB:  # LUCB's pair, each arm pulled
                    q = 0
                    for i in range(ist[n, C_A]):
                        a = ist[n, C_B + i]
                        if not pulled[a]:
                            ist[n, C_B + q] = a
                            q += 1
                    ist[n, C_A] = q
                    if q == 0:
                        nout = _lucb_decide(n, ip, fp, ist, fst, out)
                else:  # ME's round, DP's epoch: each active arm pulled `limit` times
                    limit = ist[n, C_A]
                    full = True
                    for a in range(k):
                        if ist[n, o_act + a] and ist[n, C_ARMS + a] < limit:
                            full = False
                            break
                    if full:
                        if sub == SUB_ME:
                            nout = _me_end_round(n, ip, fp, ist, fst, out)
                        else:
                            nout = _dp_end_epoch(n, ip, fp, ist, fst, out, rs)
                for a in range(k):
                    pulled[a] = False
                if nout > 0 and voting:
                    nv = _collect_votes(n, k, ist, out, drop, vbuf, nv, rs)
                elif nout > 0:
                    for a in range(k):
                        out[a] = False
            h = _held_arm(n, k, ist)
        if nv > 0 and _count_votes(n, nv, t, run, elims):
            tie_event = True
        now = byz or (h >= 0 and remaining[h] and ist[n, C_EPOCH] == count[R_EPOCH])
        if now != settled[n]:
            count[R_SETTLED] += 1 if now else -1
            settled[n] = now
        if says_settled and now and not byz and not flag[n]:
            # CE: "my local set holds one arm" (again, if an arm left that it did not visibly
            # vote against: the coordinator then forgot it)
            flag[n] = True
            count[R_MESSAGES] += 1
            count[R_SETTLED_MSGS] += 1
            _mark_done(n, run)
            tie_event = True
        if retire:
            if voting and count[R_REMAINING] == 1:
                stop = 2
                break
            if (h >= 0 or byz) and _retire(n, run):  # an attacker retires at once
                tie_event = True
        if tie_event and _tied_now(run):
            stop = 4
            break
        if not retire and count[R_SETTLED] == n_agents:
            stop = _all_settled_stop(run)
            break
    return _outcome(t, stop, run, elims)


@njit(cache=True)
def _outcome(t, stop, run, elims):
    """What run_trial reads back: the stop, the counts, the current epoch's votes and their
    times, each agent's arm, the global set and the first agent's local set (central)."""
    k = run.ip[P_K]
    epoch = run.count[R_EPOCH]
    o_act = C_ARMS + 2 * k
    agent_votes = run.sent_stamp == epoch + 1
    return (
        t,
        stop,
        run.count[R_MESSAGES],
        epoch,
        elims,
        agent_votes,
        np.where(agent_votes, run.sent_time, 0),
        run.ist[:, C_HELD].copy(),
        run.remaining,
        run.n_voters,
        run.ist[0, o_act : o_act + k] != 0,
        run.count[R_SETTLED_MSGS],
    )


def _rng_state(seed: np.random.SeedSequence | int) -> np.ndarray:
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    state = seq.generate_state(4, np.uint64)
    if not state.any():  # xoshiro's one forbidden state
        state[0] = 1
    return state


def _int_parameters(config: SimulationConfig) -> np.ndarray:
    """ip: what the kernel reads as integers (P_*)."""
    env = config.environment
    algo = config.algorithm
    n_agents = config.n_agents
    params = config.local_params()
    central = algo.algorithm == "central"
    sub = algo.local_subroutine
    ip = np.zeros(P_SIZE, np.int64)
    ip[P_N] = 1 if central else n_agents
    ip[P_K] = env.n_arms
    ip[P_SUB] = _SUB_CODES[sub]
    ip[P_SHUFFLE] = sub in _SHUFFLED
    ip[P_SER4] = sub == "ser4" and params.phi > 0
    ip[P_GLOBAL_RESET] = algo.global_reset
    ip[P_VOTING] = algo.votes and not central
    ip[P_RETIRE] = config.stop == "global" and not central
    ip[P_EVERY_ARM] = params.every_arm
    ip[P_BOUNDED] = env.bounded
    ip[P_DRIFT] = bool(env.drift)
    ip[P_THRESHOLD] = config.threshold or n_agents + 1
    ip[P_BUDGET] = config.budget
    ip[P_ATTACKERS] = 0 if central else config.attackers
    ip[P_ATTACKED] = config.attacked_arm
    ip[P_BOUND], ip[P_RULE] = _BOUNDS_AND_RULES.get(sub, (B_HOEFFDING, R_LUCB))
    return ip


def _float_parameters(config: SimulationConfig) -> np.ndarray:
    """fp: what the kernel reads as floats (F_*), RADIUS_SCALE as it is now."""
    params = config.local_params()
    fp = np.zeros(F_SIZE)
    fp[F_EPS] = params.epsilon
    fp[F_CONF] = params.confidence
    fp[F_SIGMA] = params.sigma if params.sigma is not None else 1.0
    fp[F_PHI] = params.phi
    fp[F_DP_EPS] = params.dp_epsilon
    fp[F_DROP] = config.algorithm.vote_drop
    fp[F_RADIUS] = RADIUS_SCALE
    return fp


def _central_result(
    t: int, held: np.ndarray, active0: np.ndarray, n_agents: int, optimal: np.ndarray
) -> TrialResult:
    """The central baseline: one learner, N - 1 broadcasts per activation; without a decision
    its answer is its first active arm."""
    done = bool(held[0] >= 0)
    best = int(held[0]) if done else int(np.flatnonzero(active0)[0])
    return TrialResult(
        sample_complexity=t,
        messages=t * (n_agents - 1),
        best_arm=best,
        correct=done and bool(optimal[best]),
        stopped_by="global" if done else "budget",
        agent_arms=np.array([best if done else -1]),
    )


def run_trial(config: SimulationConfig, seed: np.random.SeedSequence | int) -> TrialResult:
    """One trial, same semantics (and output distribution) as `reference.run_trial`; CDE's
    trials are drawn by their own vectorized engine (common.simulation.cde_fast), LDP's by
    common.simulation.ldp (no agent learns: nothing of this engine applies)."""
    if config.algorithm.reports:
        return cde_fast.run_trial(config, seed)
    if config.algorithm.crowd:
        return ldp.run_trial(config, seed)
    env = config.environment
    algo = config.algorithm
    n_agents = config.n_agents
    central = algo.algorithm == "central"
    voting = algo.votes
    ip, fp = _int_parameters(config), _float_parameters(config)
    mu0 = np.asarray(env.means, dtype=np.float64)
    drift = env.drift_array.astype(np.float64)
    base = np.ones(1) if central else np.asarray(config.probabilities(), dtype=np.float64)

    (
        t,
        stop,
        messages,
        resets,
        elims,
        agent_votes,
        vote_times,
        held,
        remaining,
        n_voters,
        active0,
        settled_messages,
    ) = _simulate(ip, fp, _rng_state(seed), mu0, drift, base)
    t = int(t)
    stopped_by = STOP_NAMES[int(stop)]
    mu = env.means_at(t)
    optimal = mu >= mu.max() - algo.epsilon

    if central:
        return _central_result(t, held, active0, n_agents, optimal)

    agent_arms = held.astype(np.int64)  # -1 for the Byzantine agents: they hold nothing
    candidates: list[int] = []
    if stopped_by == "tie":
        best, correct, candidates = tie_outcome(np.flatnonzero(remaining), n_voters, optimal)
    elif stopped_by == "all-agents" or not voting:
        best, correct = honest_outcome(config, agent_arms, optimal)
    else:
        left = np.flatnonzero(remaining)
        best = int(left[0]) if left.size == 1 else int(min(left, key=lambda a: (n_voters[a], a)))
        correct = bool(optimal[best])
    return TrialResult(
        sample_complexity=t,
        messages=int(messages),
        best_arm=best,
        correct=correct,
        stopped_by=stopped_by,
        eliminations=[
            Elimination(int(a), int(v), int(tm), int(o), int(e)) for a, v, tm, o, e in elims
        ],
        resets=int(resets),
        agent_votes=agent_votes,
        agent_vote_times=vote_times,
        agent_arms=agent_arms,
        suspects=find_suspects(agent_votes, best),
        candidates=candidates,
        settled_messages=int(settled_messages),
    )
