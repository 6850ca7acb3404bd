"""What an experiment is created with, by the names the coordinator's API takes, and the help text
the commands share for CDE's privacy. Nothing here imports numpy or the algorithms, so that the
commands that only talk to a coordinator (`dexp experiments ...`, `dexp watch`) start at once
(issue 37, point 11; tests/test_cli_imports.py).

The tuples are ExperimentCreate's choices (coordinator/api/models.py), written out rather than
imported from common/ (whose modules load numpy): tests/test_manage_cli.py checks they agree.
"""

from __future__ import annotations

ALGORITHMS = ("de", "ce", "dp-mase", "cde", "ldp")
# common.subroutines.USER_SUBROUTINES: the local subroutines an experiment may name.
SUBROUTINES = (
    "se",
    "ser3",
    "ser4",
    "kl-se",
    "stitched-se",
    "me",
    "lucb",
    "ugapec",
    "kl-lucb",
    "stitched-lucb",
)
# common.params.REWARD_FAMILIES: what an experiment declares of its rewards beside sigma.
REWARD_FAMILIES = ("bounded", "bernoulli")

# --privacy: what operators set for CDE, and what it is in terms of e0, what is certified.
PRIVACY_HELP = (
    "CDE: P, the hit-rate bound under a uniform prior over which arm is best, in (1/K, 1); "
    "equivalently e0 = log(P (K-1)/(1-P)), the certified epsilon of each report"
)
