"""`dexp audit`: measure what the privacy mechanisms protect, beside what they certify.

`dexp audit votes` (dexp/audit_votes.py) plays adversaries on what the coordinator sees of one
agent; `dexp audit dp` (dexp/audit_dp.py) runs a distinguishing attack on DP-MASE's local
algorithm and turns it into a lower bound on its epsilon; `dexp audit ldp` (dexp/audit_ldp.py)
does the same on the reports of one LDP device.
"""

from __future__ import annotations

import typer

from dexp.audit_dp import dp
from dexp.audit_ldp import ldp
from dexp.audit_votes import votes

audit_app = typer.Typer(
    help="Privacy audits: measured leakage with confidence intervals, beside the certified bound.",
    no_args_is_help=True,
)
audit_app.command("votes")(votes)
audit_app.command("dp")(dp)
audit_app.command("ldp")(ldp)
