"""The communication graph: Erdos-Renyi draws, hop distances, and who hears whom after d rounds."""

from __future__ import annotations

import numpy as np

from common.errors import ParameterError

MAX_DRAWS = 1000


def erdos_renyi(n: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """A connected G(n, p) as a boolean adjacency matrix, drawn again until connected (the
    paper's protocol needs a connected graph)."""
    if n < 1:
        raise ParameterError("agents", n, "must be >= 1")
    if not 0.0 < p <= 1.0:
        raise ParameterError("graph_p", p, "must be in (0, 1]")
    for _ in range(MAX_DRAWS):
        upper = np.triu(rng.random((n, n)) < p, 1)
        adjacency = upper | upper.T
        if n == 1 or np.isfinite(distances(adjacency)).all():
            return adjacency
    raise ParameterError("graph_p", p, f"no connected G({n}, p) in {MAX_DRAWS} draws: raise p")


def distances(adjacency: np.ndarray) -> np.ndarray:
    """All-pairs hop distances (inf between components). scipy is loaded here, when a graph is
    drawn, so that `dexp`, which registers `dexp regret`, starts without it."""
    from scipy.sparse.csgraph import shortest_path

    return shortest_path(adjacency.astype(float), method="D", unweighted=True, directed=False)


def diameter(dist: np.ndarray) -> int:
    return int(dist.max())


def rings(dist: np.ndarray, gamma: int) -> list[np.ndarray]:
    """rings[d - 1][m, m'] = 1 when m' is exactly d hops from m, for d = 1 .. gamma: agent m
    holds at time t the message m' created at time t - d (one hop per round, forwarded gamma
    times)."""
    return [(dist == d).astype(float) for d in range(1, gamma + 1)]
