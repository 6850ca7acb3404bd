"""The DP audit of the LDP mode (common/ldp_audit.py, `dexp audit ldp`): under the claim for the
product, close to it (the attack has power), and above it once the noise is cut."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from common.ldp_audit import LDPAudit


@pytest.mark.parametrize("reports", [1, 2])
def test_the_bound_sits_below_the_claim_and_near_it(reports: int) -> None:
    audit = LDPAudit(1.0, reports, seed=1)
    bound = audit.attack(1_000, 10_000).bound
    assert 0.85 * audit.claim < bound <= audit.claim


def test_cutting_the_noise_is_caught() -> None:
    audit = LDPAudit(1.0, 1, noise_multiplier=0.5, seed=2)
    assert audit.attack(1_000, 10_000).bound > audit.claim


def test_the_command_prints_json_and_refuses_bad_input() -> None:
    run = [sys.executable, "-m", "dexp", "audit", "ldp"]
    out = subprocess.run(
        [*run, "--runs", "2000", "--selection-runs", "500", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    doc = json.loads(out.stdout)
    assert doc["claim"] == 1.0 and 0 < doc["epsilon_lower_bound"]["value"] <= 1.0
    for bad in (["--dp-epsilon", "-1"], ["--reports-per-agent", "0"], ["--runs", "0"]):
        refused = subprocess.run([*run, *bad], capture_output=True, text=True)
        assert refused.returncode == 2 and refused.stdout == ""
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
