"""LDP in a real browser: one visit, one private report (sdk/js/src/private.ts, docs/LDP.md).

A coordinator and Redis started here, a plain page on another origin (tests/services/sdk_pages/
ldp_visit.html) importing /sdk/agent.js in Debian's chromium: each page load is a fresh browser
context (fresh localStorage, a visitor's first and only visit) with its own ticket; it draws its
arm from the published allocation (the SDK's crypto uniforms), draws a Bernoulli reward from known
means with its own seed, and reports once. Visits come a few at a time until the coordinator
identifies an arm: arm 0. Every request a page made is watched: none sent more than one report,
and none carried the reward (only arm, bit and seq)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import httpx
import pytest
import redis

from common import redis_keys as keys

from .browser import chromium
from .helpers import admin_headers, coordinator, coordinator_settings, create_experiment
from .test_sdk_browser import PAGES, StaticSite

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Request

ARMS = ["A", "B", "C"]
# An easy instance on purpose: the test is about the pages (one visit, one report, no reward
# leaving), not the statistics (tests/test_ldp_simulation.py). Arm 0 far ahead: the simulator
# (common.simulation, dp_epsilon 2, eps 0.25, delta 0.05) identifies it in about 115 visits
# (99th percentile 200) where 0.8, 0.5, 0.3 took about 270: each visit is a page load.
MEANS = [0.9, 0.3, 0.1]
EXPERIMENT = "offers"
AT_ONCE = 8  # pages loading together, each in its own context
MAX_VISITS = 1500  # far more than dp_epsilon 2 needs here
SCREENSHOT = Path("/tmp/dexp-ldp-visit.png")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


class Window:
    """A page of its own browser context, visited again and again: before each visit its
    localStorage is cleared (fresh storage: a visitor's first and only visit); every report request
    of each visit is recorded."""

    def __init__(self, browser: Browser) -> None:
        self.context: BrowserContext = browser.new_context()
        self.page: Page = self.context.new_page()
        self.reports: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.page.on("request", self._request)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.visits = 0

    def _request(self, request: Request) -> None:
        if request.method == "POST" and request.url.endswith("/reports"):
            self.reports.append(json.loads(request.post_data or "null"))

    def visit(self, url: str) -> None:
        if self.visits:
            self.page.evaluate("localStorage.clear()")
        self.visits += 1
        self.reports, self.errors = [], []
        self.page.goto(url, wait_until="commit")

    def result(self) -> dict[str, Any]:
        self.page.wait_for_function("window.visit || window.failed", timeout=20_000, polling=50)
        failed = self.page.evaluate("window.failed")
        assert failed is None, (failed, self.errors)
        visit: dict[str, Any] = self.page.evaluate("window.visit")
        return visit


def test_one_visit_one_report_pages_identify_the_best_arm(
    browser: Browser, redis_url: str, clean_redis: str
) -> None:
    store = redis.Redis.from_url(clean_redis)
    with StaticSite(PAGES) as site:
        settings = coordinator_settings(redis_url, publish_batch=5, cors_origins=site.origin)
        with coordinator(settings) as server, httpx.Client(base_url=server.url) as http:
            body = {"id": EXPERIMENT, "arms": ARMS, "algorithm": "ldp", "dp_epsilon": 2.0}
            body |= {"epsilon": 0.25}  # arm 1 (0.3) is 0.6 below: only arm 0 is good
            created = create_experiment(http, **body, rewards="bernoulli")
            assert created["reports_per_agent"] == 1 and created["user_privacy"] == 2.0
            issued = http.post(
                f"/v1/experiments/{EXPERIMENT}/tickets",
                json={"count": MAX_VISITS},
                headers=admin_headers(),
            )
            assert issued.status_code == 201, issued.text
            tickets = issued.json()["tickets"]
            site.values |= {
                "coordinator": server.url,
                "experiment": EXPERIMENT,
                "means": json.dumps(MEANS),
            }
            windows = [Window(browser) for _ in range(AT_ONCE)]
            visits: list[dict[str, Any]] = []
            status = "exploring"
            while status == "exploring":
                assert len(visits) < MAX_VISITS, "no decision"
                for i, window in enumerate(windows):
                    n = len(visits) + i
                    query = urlencode({"ticket": tickets[n], "seed": n + 1})
                    window.visit(f"{site.origin}/ldp_visit.html?{query}")
                for visit in windows:
                    result = visit.result()
                    assert len(visit.reports) <= 1, visit.reports  # one report at most, ever
                    assert all(set(r) == {"arm", "bit", "seq"} for r in visit.reports)
                    assert all(r["seq"] == 1 and r["arm"] == result["arm"] for r in visit.reports)
                    result["requests"] = len(visit.reports)
                    if not visits:
                        visit.page.screenshot(path=str(SCREENSHOT))
                    visits.append(result)
                status = http.get(f"/v1/experiments/{EXPERIMENT}").json()["status"]

            doc = http.get(f"/v1/experiments/{EXPERIMENT}").json()
            assert doc["status"] == "identified" and doc["remaining_arms"] == [0]
            for estimate, mean in zip(doc["estimates"], MEANS, strict=True):
                assert estimate["ci"][0] <= mean <= estimate["ci"][1], estimate
            sent = [v for v in visits if v["reported"]]
            assert all(v["sent"] == 1 and v["left"] == 0 and v["done"] for v in sent)
            assert all(v["saved"]["private"] == {"sent": 1, "pending": None} for v in sent)
            assert len({v["saved"]["agent_id"] for v in visits}) == len(visits)  # one agent each
            assert not any({"reward", "rewards", "local"} & set(v["saved"]) for v in visits)
            # Redis's own count: one report per reporting page, none twice
            per_agent = [int(n) for n in store.hvals(keys.report_seq(EXPERIMENT))]
            assert per_agent == [1] * len(per_agent) and len(per_agent) == len(sent)
            assert sum(v["requests"] for v in visits) <= len(visits)
            shown = [sum(v["arm"] == a for v in visits) for a in range(3)]
            assert min(shown) > 0, shown  # every arm drawn from the allocation
    print(f"{len(visits)} visits, {len(sent)} reports, arms shown {shown}")


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "DEVICES.md"


def guide_page() -> str:
    """The web page of docs/DEVICES.md's section "LDP: one visit, one private report"."""
    text = GUIDE.read_text()
    start = text.index("\n## LDP: one visit, one private report\n")
    section = text[start : text.index("\n## ", start + 1)]
    page = re.search(r"^```html\n(.*?)^```$", section, flags=re.M | re.S)
    assert page is not None
    return page.group(1)


def test_the_guides_page_reports_once_when_the_visitor_leaves(
    browser: Browser, redis_url: str, clean_redis: str
) -> None:
    """The guide's page as written (the coordinator's URL and a ticket put in): the visitor sees
    an offer, clicks it and leaves; at `pagehide` one report leaves (the offer shown, bit, seq 1)
    and is counted. The same visitor comes back (same localStorage): the same agent, an offer
    still shown, and nothing more sent."""
    store = redis.Redis.from_url(clean_redis)
    with StaticSite(PAGES) as site:
        settings = coordinator_settings(redis_url, cors_origins=site.origin)
        with coordinator(settings) as server, httpx.Client(base_url=server.url) as http:
            create_experiment(http, id="offers", arms=ARMS, algorithm="ldp")
            issued = http.post(
                "/v1/experiments/offers/tickets", json={"count": 1}, headers=admin_headers()
            )
            (ticket,) = issued.json()["tickets"]
            code = guide_page().replace("https://coordinator.example", server.url)
            site.pages["/ldp_guide.html"] = code.replace('"TICKET"', json.dumps(ticket))
            window = Window(browser)
            shown = "document.getElementById('offer').textContent"
            counts = keys.report_counts("offers")
            for visit in range(2):
                window.page.goto(f"{site.origin}/ldp_guide.html")
                window.page.wait_for_function(f"{shown} !== ''", polling=50, timeout=20_000)
                offer = window.page.evaluate(shown)
                assert offer in ARMS
                saved = window.page.evaluate("JSON.parse(localStorage.getItem('dexp-offers'))")
                assert saved.get("private") == (
                    None if visit == 0 else {"sent": 1, "pending": None}
                )
                window.page.click("#offer")
                window.page.goto("about:blank")  # the visitor leaves: pagehide, the report
                if visit == 0:  # (sent with keepalive: the page is gone, Redis tells)
                    deadline = time.monotonic() + 20
                    while not store.hlen(keys.report_seq("offers")):
                        assert time.monotonic() < deadline, "no report counted"
                        time.sleep(0.05)
                    assert store.hgetall(counts) == {str(ARMS.index(offer)).encode(): b"1"}
                    agent = saved["agent_id"]
                else:
                    assert saved["agent_id"] == agent  # resumed from localStorage
            # the second visit (the same agent, its one report spent) sent nothing
            assert [int(n) for n in store.hvals(keys.report_seq("offers"))] == [1]
            assert sum(int(n) for n in store.hvals(counts)) == 1
            agents = http.get("/v1/experiments/offers").json()["agents"]
            assert agents == 1 and not window.errors, window.errors
