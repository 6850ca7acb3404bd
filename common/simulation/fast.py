"""The fast simulator: the reference's semantics in one compiled loop over activations.

`common.simulation.reference` is the definition: it drives `common.agent.LocalAgent` and the
subroutines of `common.subroutines` one activation at a time. This module keeps the same state in
numpy arrays (per agent: counts and sums (N, K), local set, checked round, round order, LUCB queue,
ME round, DP epoch, experiment epoch, votes already decided) and runs every activation inside one
numba kernel. Random streams differ from the reference (numba's generator, seeded from the trial's
SeedSequence); the distribution of every output is the same.

Cost per activation is O(K) for one agent; work over all agents happens only when the global set
changes (an elimination or a DSER4 reset) or, under the "global" stop rule, when retirements have
removed half the activation mass (the agent table is then rebuilt).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from common.simulation.config import SimulationConfig, TrialResult, majority_arm
from common.votes import Elimination

# Subroutine codes.
SUB_SE = 0  # SE, SER3, SER4 (shuffle / reset flags below)
SUB_ME = 1
SUB_LUCB = 2
SUB_DP = 3
_SUB_CODES = {"se": SUB_SE, "ser3": SUB_SE, "ser4": SUB_SE, "me": SUB_ME, "lucb": SUB_LUCB}
_SUB_CODES["dp-se"] = SUB_DP

STOP_NAMES = ("budget", "all-agents", "global", "exhausted")

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
P_SEED = 13
P_SIZE = 14

# Float parameters (fp).
F_EPS = 0
F_CONF = 1
F_SIGMA = 2
F_PHI = 3
F_DP_EPS = 4
F_DROP = 5
F_SIZE = 6

# Per-agent integer state columns (ist).
C_NACT = 0  # |K_n|
C_INIT = 1  # |K_n| at the last restart (the radius' K)
C_EPOCH = 2  # experiment epoch the agent last synced with
C_HELD = 3  # the one arm of K_n, or -1 (updated at the end of each own activation)
C_A = 4  # SE: checked round | ME: samples per arm | LUCB: queue length | DP: R(e)
C_B = 5  # LUCB: queue[0] | DP: epoch e
C_C = 6  # LUCB: queue[1] | DP: |K_n| at the start of the epoch
C_SIZE = 7


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


# -- one agent's subroutine ---------------------------------------------------------------------
@njit(cache=True, inline="always")
def _new_order(n, order, n_arms):
    for a in range(n_arms):
        order[n, a] = a
    for i in range(n_arms - 1, 0, -1):
        j = np.random.randint(0, i + 1)
        tmp = order[n, i]
        order[n, i] = order[n, j]
        order[n, j] = tmp


@njit(cache=True)
def _dp_start_epoch(n, ip, fp, ist, counts, sums):
    ist[n, C_C] = ist[n, C_NACT]
    ist[n, C_A] = _dp_epoch_length(ist[n, C_B], ist[n, C_C], fp[F_CONF], fp[F_DP_EPS])
    for a in range(ip[P_K]):
        counts[n, a] = 0
        sums[n, a] = 0.0


@njit(cache=True)
def _restart(n, remaining, ip, fp, ist, fst, active, counts, sums, order):
    """ArmSelection.restart(remaining): fresh statistics on the global set."""
    k = ip[P_K]
    c = 0
    for a in range(k):
        active[n, a] = remaining[a]
        if remaining[a]:
            c += 1
        counts[n, a] = 0
        sums[n, a] = 0.0
    ist[n, C_NACT] = c
    ist[n, C_INIT] = c
    sub = ip[P_SUB]
    if sub == SUB_SE:
        ist[n, C_A] = 0
        if ip[P_SHUFFLE]:
            _new_order(n, order, k)
    elif sub == SUB_ME:
        fst[n, 0] = fp[F_EPS] / 4.0
        fst[n, 1] = fp[F_CONF] / 2.0
        ist[n, C_A] = _me_samples(fst[n, 0], fst[n, 1], fp[F_SIGMA], ip[P_BOUNDED] != 0)
    elif sub == SUB_LUCB:
        ist[n, C_A] = 0
    else:
        ist[n, C_B] = 1
        _dp_start_epoch(n, ip, fp, ist, counts, sums)


@njit(cache=True, inline="always")
def _eliminate(n, a, ist, active, out):
    if active[n, a]:
        active[n, a] = False
        ist[n, C_NACT] -= 1
        out[a] = True


@njit(cache=True, inline="always")
def _mean(n, a, counts, sums):
    c = counts[n, a]
    return sums[n, a] / c if c > 0 else 0.0


@njit(cache=True)
def _se_check(n, rounds, ip, fp, ist, active, counts, sums, out):
    k = ip[P_K]
    radius = _elimination_radius(rounds, ist[n, C_INIT], fp[F_CONF], fp[F_SIGMA], ip[P_BOUNDED] != 0)
    best = -np.inf
    for a in range(k):
        if active[n, a]:
            best = max(best, _mean(n, a, counts, sums))
    for a in range(k):
        if active[n, a] and best - _mean(n, a, counts, sums) >= 2.0 * radius:
            _eliminate(n, a, ist, active, out)
    if radius <= fp[F_EPS] / 2.0 and ist[n, C_NACT] > 1:
        keep = -1
        keep_mu = -np.inf
        for a in range(k):
            if active[n, a]:
                mu = _mean(n, a, counts, sums)
                if keep < 0 or mu > keep_mu:
                    keep = a
                    keep_mu = mu
        for a in range(k):
            if a != keep:
                _eliminate(n, a, ist, active, out)


@njit(cache=True, inline="always")
def _se_observe(n, ip, fp, ist, active, counts, sums, order, out):
    """A check only right after a pull that leaves every active count equal to r > checked."""
    rounds = -1
    for a in range(ip[P_K]):
        if active[n, a]:
            if rounds < 0:
                rounds = counts[n, a]
            elif counts[n, a] != rounds:
                return
    if rounds <= ist[n, C_A]:
        return
    ist[n, C_A] = rounds
    _se_check(n, rounds, ip, fp, ist, active, counts, sums, out)
    if ip[P_SHUFFLE]:
        _new_order(n, order, ip[P_K])


@njit(cache=True)
def _me_end_round(n, ip, fp, ist, fst, active, counts, sums, out):
    k = ip[P_K]
    nact = ist[n, C_NACT]
    if nact <= 1:
        return
    samples = ist[n, C_A]
    for a in range(k):
        if active[n, a] and counts[n, a] < samples:
            return
    keep = (nact + 1) // 2
    mu = np.empty(k)
    for a in range(k):
        mu[a] = _mean(n, a, counts, sums)
    drop = np.zeros(k, np.bool_)
    for a in range(k):
        if active[n, a]:
            rank = 0
            for b in range(k):
                if active[n, b] and (mu[b] > mu[a] or (mu[b] == mu[a] and b < a)):
                    rank += 1
            drop[a] = rank >= keep
    for a in range(k):
        if drop[a]:
            _eliminate(n, a, ist, active, out)
        counts[n, a] = 0
        sums[n, a] = 0.0
    fst[n, 0] *= 0.75
    fst[n, 1] /= 2.0
    ist[n, C_A] = _me_samples(fst[n, 0], fst[n, 1], fp[F_SIGMA], ip[P_BOUNDED] != 0)


@njit(cache=True)
def _lucb_decide(n, ip, fp, ist, active, counts, sums, out):
    k = ip[P_K]
    if ist[n, C_NACT] <= 1 or ist[n, C_A] > 0:
        return
    time = 0
    for a in range(k):
        if active[n, a] and counts[n, a] == 0:
            return
        time += counts[n, a]
    time = max(1, time)
    bounded = ip[P_BOUNDED] != 0
    best = -1
    best_mu = -np.inf
    for a in range(k):
        if active[n, a]:
            mu = _mean(n, a, counts, sums)
            if best < 0 or mu > best_mu:
                best = a
                best_mu = mu
    ch = -1
    ch_ucb = -np.inf
    for a in range(k):
        if active[n, a] and a != best:
            rad = _lucb_radius(counts[n, a], time, ist[n, C_INIT], fp[F_CONF], fp[F_SIGMA], bounded)
            ucb = _mean(n, a, counts, sums) + rad
            if ch < 0 or ucb > ch_ucb:
                ch = a
                ch_ucb = ucb
    best_rad = _lucb_radius(counts[n, best], time, ist[n, C_INIT], fp[F_CONF], fp[F_SIGMA], bounded)
    if ch_ucb - (best_mu - best_rad) < fp[F_EPS]:
        for a in range(k):
            if a != best:
                _eliminate(n, a, ist, active, out)
    else:
        ist[n, C_A] = 2
        ist[n, C_B] = best
        ist[n, C_C] = ch


@njit(cache=True)
def _lucb_filter_queue(n, ist, active, pulled_mask):
    """Keep the queue entries that are active and (if a mask is given) were not just pulled."""
    q = 0
    for i in range(ist[n, C_A]):
        a = ist[n, C_B + i]
        if active[n, a] and not pulled_mask[a]:
            ist[n, C_B + q] = a
            q += 1
    ist[n, C_A] = q


@njit(cache=True)
def _dp_end_epoch(n, ip, fp, ist, active, counts, sums, out):
    k = ip[P_K]
    if ist[n, C_NACT] <= 1:
        return
    rounds = ist[n, C_A]
    for a in range(k):
        if active[n, a] and counts[n, a] < rounds:
            return
    scale = 1.0 / (fp[F_DP_EPS] * rounds)
    noisy = np.empty(k)
    top = -np.inf
    for a in range(k):
        if active[n, a]:
            noisy[a] = sums[n, a] / rounds + np.random.laplace(0.0, scale)
            top = max(top, noisy[a])
    epoch = ist[n, C_B]
    gap = _dp_gap(epoch, rounds, ist[n, C_C], fp[F_CONF], fp[F_DP_EPS])
    for a in range(k):
        if active[n, a] and top - noisy[a] > gap:
            _eliminate(n, a, ist, active, out)
    ist[n, C_B] = epoch + 1
    _dp_start_epoch(n, ip, fp, ist, counts, sums)


@njit(cache=True, inline="always")
def _pull(n, a, t, ip, fp, mu0, drift, counts, sums):
    """One reward of arm a at activation time t (the reference draws at t - 1)."""
    mu = mu0[a]
    bounded = ip[P_BOUNDED] != 0
    if ip[P_DRIFT]:
        mu = mu + drift[a] * float(t)
        if bounded:
            mu = min(max(mu, 0.0), 1.0)
    if bounded:
        r = 1.0 if np.random.random() < mu else 0.0
    else:
        r = np.random.normal(mu, fp[F_SIGMA])
    counts[n, a] += 1
    sums[n, a] += r


@njit(cache=True, inline="always")
def _play(n, t, ip, fp, ist, fst, active, counts, sums, order, mu0, drift, pulled, out):
    """select() then observe(): pull, record, and mark local eliminations in `out`."""
    k = ip[P_K]
    every = ip[P_EVERY_ARM] != 0
    sub = ip[P_SUB]
    npulled = 0
    if sub == SUB_SE or sub == SUB_DP:
        if every:
            for a in range(k):
                if active[n, a]:
                    pulled[a] = True
                    npulled += 1
        else:
            pick = -1
            for a in range(k):
                if active[n, a] and (
                    pick < 0
                    or counts[n, a] < counts[n, pick]
                    or (counts[n, a] == counts[n, pick] and sub == SUB_SE and order[n, a] < order[n, pick])
                ):
                    pick = a
            pulled[pick] = True
            npulled = 1
    elif sub == SUB_ME:
        samples = ist[n, C_A]
        pick = -1
        for a in range(k):
            if active[n, a] and counts[n, a] < samples:
                if every:
                    pulled[a] = True
                    npulled += 1
                elif pick < 0 or counts[n, a] < counts[n, pick]:
                    pick = a
        if not every and pick >= 0:
            pulled[pick] = True
            npulled = 1
    else:
        for a in range(k):
            if active[n, a] and counts[n, a] == 0:
                pulled[a] = True
                npulled += 1
                if not every:
                    break
        if npulled == 0 and ist[n, C_A] > 0:
            pulled[ist[n, C_B]] = True
            npulled = 1
            if every and ist[n, C_A] > 1:
                pulled[ist[n, C_C]] = True
                npulled = 2
    if npulled == 0:
        return
    for a in range(k):
        if pulled[a]:
            _pull(n, a, t - 1, ip, fp, mu0, drift, counts, sums)
    if sub == SUB_SE:
        _se_observe(n, ip, fp, ist, active, counts, sums, order, out)
    elif sub == SUB_ME:
        _me_end_round(n, ip, fp, ist, fst, active, counts, sums, out)
    elif sub == SUB_LUCB:
        _lucb_filter_queue(n, ist, active, pulled)
        _lucb_decide(n, ip, fp, ist, active, counts, sums, out)
    else:
        _dp_end_epoch(n, ip, fp, ist, active, counts, sums, out)
    for a in range(k):
        pulled[a] = False


@njit(cache=True, inline="always")
def _sync(n, remaining, epoch, ip, fp, ist, fst, active, counts, sums, order, voted, none, out):
    """LocalAgent.sync: K_n & K, restart on an empty intersection or a new epoch, else discard
    (which may end an ME round / DP epoch or trigger a LUCB decision)."""
    k = ip[P_K]
    if ist[n, C_EPOCH] != epoch:
        ist[n, C_EPOCH] = epoch
        for a in range(k):
            voted[n, a] = False
        _restart(n, remaining, ip, fp, ist, fst, active, counts, sums, order)
        return
    gone = 0
    for a in range(k):
        if active[n, a] and not remaining[a]:
            gone += 1
    if gone == 0:
        return
    if gone == ist[n, C_NACT]:
        _restart(n, remaining, ip, fp, ist, fst, active, counts, sums, order)
        return
    for a in range(k):
        if active[n, a] and not remaining[a]:
            active[n, a] = False
    ist[n, C_NACT] -= gone
    sub = ip[P_SUB]
    if sub == SUB_ME:
        _me_end_round(n, ip, fp, ist, fst, active, counts, sums, out)
    elif sub == SUB_LUCB:
        _lucb_filter_queue(n, ist, active, none)
        _lucb_decide(n, ip, fp, ist, active, counts, sums, out)
    elif sub == SUB_DP:
        _dp_end_epoch(n, ip, fp, ist, active, counts, sums, out)


@njit(cache=True, inline="always")
def _collect_votes(n, out, voted, drop, vbuf, nv):
    """LocalAgent._votes: arms not decided before, each kept with probability 1 - xi."""
    for a in range(out.shape[0]):
        if out[a]:
            out[a] = False
            if not voted[n, a]:
                voted[n, a] = True
                if drop <= 0.0 or np.random.random() >= drop:
                    vbuf[nv] = a
                    nv += 1
    return nv


@njit(cache=True, inline="always")
def _held(n, ist, active, k):
    if ist[n, C_NACT] != 1:
        return -1
    for a in range(k):
        if active[n, a]:
            return a
    return -1


@njit(cache=True)
def _simulate(ip, fp, mu0, drift, base):
    n_agents = ip[P_N]
    k = ip[P_K]
    voting = ip[P_VOTING] != 0
    retire = ip[P_RETIRE] != 0
    ser4 = ip[P_SER4] != 0
    global_reset = ip[P_GLOBAL_RESET] != 0
    threshold = ip[P_THRESHOLD]
    budget = ip[P_BUDGET]
    phi = fp[F_PHI]
    drop = fp[F_DROP]
    np.random.seed(ip[P_SEED])

    ist = np.zeros((n_agents, C_SIZE), np.int64)
    fst = np.zeros((n_agents, 2))
    active = np.zeros((n_agents, k), np.bool_)
    counts = np.zeros((n_agents, k), np.int64)
    sums = np.zeros((n_agents, k))
    order = np.empty((n_agents, k), np.int64)
    voted = np.zeros((n_agents, k), np.bool_)
    settled = np.zeros(n_agents, np.bool_)
    remaining = np.ones(k, np.bool_)
    n_remaining = k
    # Epoch stamps (epoch + 1 = "in this epoch"): a DSER4 reset clears them for free.
    voter_stamp = np.zeros((k, n_agents), np.int64)
    sent_stamp = np.zeros((n_agents, k), np.int64)
    n_voters = np.zeros(k, np.int64)
    elims = np.zeros((16, 4), np.int64)
    n_elims = 0
    out = np.zeros(k, np.bool_)
    pulled = np.zeros(k, np.bool_)
    none = np.zeros(k, np.bool_)
    vbuf = np.zeros(2 * k, np.int64)

    for n in range(n_agents):
        for a in range(k):
            order[n, a] = a
        _restart(n, remaining, ip, fp, ist, fst, active, counts, sums, order)
        ist[n, C_HELD] = _held(n, ist, active, k)
    n_settled = 0

    present = np.ones(n_agents, np.bool_)
    n_present = n_agents
    tab_idx = np.empty(n_agents, np.int64)
    tab_prob = np.empty(n_agents)
    tab_alias = np.empty(n_agents, np.int64)
    tab_n, tab_mass = _build_alias(base, present, tab_idx, tab_prob, tab_alias)
    present_mass = tab_mass

    epoch = 0
    messages = 0
    t = 0
    stop = 0
    while t < budget:
        if retire and n_present == 0:
            stop = 3
            break
        while True:
            u = np.random.random() * tab_n
            i = min(int(u), tab_n - 1)
            j = i if u - i < tab_prob[i] else tab_alias[i]
            n = tab_idx[j]
            if present[n]:
                break
        t += 1
        nv = 0
        if voting:
            _sync(n, remaining, epoch, ip, fp, ist, fst, active, counts, sums, order, voted, none, out)
            nv = _collect_votes(n, out, voted, drop, vbuf, nv)
        if ser4 and np.random.random() < phi:
            if global_reset:
                for a in range(k):
                    remaining[a] = True
                    n_voters[a] = 0
                n_remaining = k
                epoch += 1
                n_settled = 0
                for m in range(n_agents):
                    settled[m] = ist[m, C_HELD] >= 0
                    if settled[m]:
                        n_settled += 1
                _sync(n, remaining, epoch, ip, fp, ist, fst, active, counts, sums, order, voted, none, out)
            else:
                _restart(n, remaining, ip, fp, ist, fst, active, counts, sums, order)
        if ist[n, C_NACT] > 1:
            _play(n, t, ip, fp, ist, fst, active, counts, sums, order, mu0, drift, pulled, out)
            if voting:
                nv = _collect_votes(n, out, voted, drop, vbuf, nv)
            else:
                for a in range(k):
                    out[a] = False
        ist[n, C_HELD] = _held(n, ist, active, k)
        if nv > 0:
            changed = False
            stamp = epoch + 1
            for v in range(nv):
                a = vbuf[v]
                sent_stamp[n, a] = stamp
                messages += 1
                if not remaining[a] or voter_stamp[a, n] == stamp:
                    continue  # a late vote, or a duplicate: a message that changes nothing
                voter_stamp[a, n] = stamp
                n_voters[a] += 1
                if n_voters[a] >= threshold and n_remaining > 1:
                    remaining[a] = False
                    n_remaining -= 1
                    changed = True
                    if n_elims == elims.shape[0]:
                        grown = np.zeros((2 * n_elims, 4), np.int64)
                        grown[:n_elims] = elims
                        elims = grown
                    elims[n_elims, 0] = a
                    elims[n_elims, 1] = n_voters[a]
                    elims[n_elims, 2] = t
                    elims[n_elims, 3] = n_elims + 1
                    n_elims += 1
            if changed:
                n_settled = 0
                for m in range(n_agents):
                    h = ist[m, C_HELD]
                    settled[m] = h >= 0 and remaining[h]
                    if settled[m]:
                        n_settled += 1
        h = ist[n, C_HELD]
        now = h >= 0 and remaining[h]
        if now != settled[n]:
            n_settled += 1 if now else -1
            settled[n] = now
        if retire:
            if voting and n_remaining == 1:
                stop = 2
                break
            if h >= 0:
                present[n] = False
                n_present -= 1
                present_mass -= base[n]
                if n_present > 0 and present_mass < 0.5 * tab_mass:
                    tab_n, tab_mass = _build_alias(base, present, tab_idx, tab_prob, tab_alias)
                    present_mass = tab_mass
        elif n_settled == n_agents:
            stop = 1
            break

    held = ist[:, C_HELD].copy()
    agent_votes = sent_stamp == epoch + 1
    return (
        t,
        stop,
        messages,
        epoch,
        elims[:n_elims].copy(),
        agent_votes,
        held,
        remaining,
        n_voters,
        active[0].copy(),
    )


def _seed32(seed: np.random.SeedSequence | int) -> int:
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return int(seq.generate_state(1, np.uint32)[0])


def run_trial(config: SimulationConfig, seed: np.random.SeedSequence | int) -> TrialResult:
    """One trial, same semantics (and output distribution) as `reference.run_trial`."""
    env = config.environment
    algo = config.algorithm
    n_arms, n_agents = env.n_arms, config.n_agents
    params = algo.local_params(n_arms, n_agents, config.sigma)
    central = algo.algorithm == "central"
    voting = algo.votes
    sub = algo.local_subroutine

    ip = np.zeros(P_SIZE, np.int64)
    ip[P_N] = 1 if central else n_agents
    ip[P_K] = n_arms
    ip[P_SUB] = _SUB_CODES[sub]
    ip[P_SHUFFLE] = sub in ("ser3", "ser4")
    ip[P_SER4] = sub == "ser4" and params.phi > 0
    ip[P_GLOBAL_RESET] = algo.global_reset
    ip[P_VOTING] = voting and not central
    ip[P_RETIRE] = config.stop == "global" and not central
    ip[P_EVERY_ARM] = params.every_arm
    ip[P_BOUNDED] = env.bounded
    ip[P_DRIFT] = bool(env.drift)
    ip[P_THRESHOLD] = config.threshold or n_agents + 1
    ip[P_BUDGET] = config.budget
    ip[P_SEED] = _seed32(seed)
    fp = np.zeros(F_SIZE)
    fp[F_EPS] = params.epsilon
    fp[F_CONF] = params.confidence
    fp[F_SIGMA] = params.sigma if params.sigma is not None else 1.0
    fp[F_PHI] = params.phi
    fp[F_DP_EPS] = params.dp_epsilon
    fp[F_DROP] = algo.vote_drop
    mu0 = np.asarray(env.means, dtype=np.float64)
    drift = env.drift_array.astype(np.float64)
    base = np.ones(1) if central else np.asarray(config.probabilities(), dtype=np.float64)

    t, stop, messages, resets, elims, agent_votes, held, remaining, n_voters, active0 = _simulate(
        ip, fp, mu0, drift, base
    )
    t = int(t)
    stopped_by = STOP_NAMES[int(stop)]
    mu = env.means_at(t)
    optimal = mu >= mu.max() - algo.epsilon

    if central:
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

    agent_arms = held.astype(np.int64)
    if stopped_by == "all-agents" or not voting:
        best = majority_arm(agent_arms, n_arms)
        arms = agent_arms[agent_arms >= 0]
        correct = bool(arms.size == n_agents and optimal[arms].all())
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
        eliminations=[Elimination(int(a), int(v), int(tm), int(o)) for a, v, tm, o in elims],
        resets=int(resets),
        agent_votes=agent_votes,
        agent_arms=agent_arms,
    )
