"""deploy/monitoring, checked offline: the Grafana dashboard and the Prometheus alert rules.

- the dashboard's JSON is what Grafana imports: a uid, a Prometheus datasource variable, panels
  that do not overlap, each with targets whose refIds are distinct;
- every expression parses (promtool: the dashboard's, as recording rules of a scratch file), the
  rules pass `promtool check rules` and their unit tests (`promtool test rules alerts.test.yml`),
  and prometheus.yml passes `promtool check config`;
- every series they name is one the coordinator exports (its registry, after importing the app),
  so a renamed metric breaks this test, not an operator's dashboard at 3 a.m.

tests/services/test_metrics_prometheus.py scrapes a real coordinator with a real Prometheus.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

import coordinator.app
import coordinator.server  # noqa: F401 (and those of the HTTP edge)
from tests.prerequisites import missing

MONITORING = Path(__file__).resolve().parents[1] / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
ALERTS = MONITORING / "alerts.yml"
# Grafana's variables, replaced by what they stand for before promtool parses an expression
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}
# what Prometheus itself adds to every target
SCRAPE_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
KEYWORDS = {"and", "or", "unless", "bool", "offset"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        missing("promtool is missing (Debian's prometheus package; scripts/test installs it)")
    return found


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_expressions(board: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for name, value in GRAFANA_VARIABLES.items():
        exprs = [e.replace(name, value) for e in exprs]
    return exprs


def alert_expressions() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def series_names(expr: str) -> set[str]:
    """The metric names an expression selects (label matchers, strings, durations, functions
    and keywords taken out first)."""
    bare = re.sub(r"\{[^}]*\}|\"[^\"]*\"|\[[^\]]*\]", " ", expr)
    bare = re.sub(r"[a-z_]+\s*\(", " ", GROUPING.sub(" ", bare))  # groupings, then functions
    return set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", bare)) - KEYWORDS


def exported_series() -> set[str]:
    """Every sample name the coordinator's registry can export, counters' _total included."""
    names = set(SCRAPE_SERIES)
    for family in REGISTRY.collect():
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def test_the_dashboard_is_a_grafana_dashboard_over_a_prometheus_datasource() -> None:
    board = dashboard()
    assert board["uid"] == "dexp-coordinator" and board["title"]
    variables = board["templating"]["list"]
    assert [(v["name"], v["type"], v["query"]) for v in variables] == [
        ("datasource", "datasource", "prometheus")
    ]
    ids, cells = set(), set()
    for panel in board["panels"]:
        assert panel["id"] not in ids, panel["title"]
        ids.add(panel["id"])
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs), panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        xs, ys = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        mine = {(x, y) for x in xs for y in ys}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine


def test_every_expression_parses_and_the_rules_pass_their_unit_tests(tmp_path: Path) -> None:
    tool = promtool()
    exprs = dashboard_expressions(dashboard())
    scratch = tmp_path / "dashboard-rules.yml"
    rules = [{"record": f"dashboard:expr{i}", "expr": e} for i, e in enumerate(exprs)]
    scratch.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    for argv in (
        [tool, "check", "rules", str(scratch)],
        [tool, "check", "rules", str(ALERTS)],
        [tool, "check", "config", str(MONITORING / "prometheus.yml")],
        [tool, "test", "rules", str(MONITORING / "alerts.test.yml")],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, cwd=MONITORING, check=False)
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"


def test_a_broken_expression_is_caught(tmp_path: Path) -> None:
    """The parse check can fail: promtool refuses an expression Grafana would show as an error."""
    scratch = tmp_path / "broken.yml"
    rule = {"record": "x:y", "expr": "sum by (route (rate(dexp_http_requests_total[1m]))"}
    scratch.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [rule]}]}))
    done = subprocess.run([promtool(), "check", "rules", str(scratch)], capture_output=True)
    assert done.returncode != 0


def test_every_series_the_dashboard_and_the_rules_name_is_exported() -> None:
    exported = exported_series()
    named = set().union(
        *map(series_names, dashboard_expressions(dashboard()) + alert_expressions())
    )
    assert named - exported == set()
    # what the operator needs is on the dashboard: RED, refusals, Redis, experiments
    for needed in (
        "dexp_http_requests_total",
        "dexp_http_request_duration_seconds_bucket",
        "dexp_refusals_total",
        "dexp_enrollments_total",
        "dexp_tickets_issued_total",
        "dexp_experiments",
        "dexp_agents_enrolled",
        "dexp_sse_subscribers",
        "dexp_redis_command_duration_seconds_bucket",
        "dexp_redis_errors_total",
        "dexp_resets_total",
    ):
        assert needed in named, needed


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (route) (rate(dexp_http_requests_total{code=~"5.."}[1m]))',
            {"dexp_http_requests_total"},
        ),
        ("histogram_quantile(0.99, sum by (le) (rate(dexp_x_bucket[5m])))", {"dexp_x_bucket"}),
        ("max(dexp_store_up) == 0", {"dexp_store_up"}),
        ("dexp_a / dexp_b > 0.05", {"dexp_a", "dexp_b"}),
    ],
)
def test_series_names_are_read_from_an_expression(expr: str, names: set[str]) -> None:
    """The name check sees a misspelt series: names are found wherever they stand."""
    assert series_names(expr) == names
