"""The operator dashboard (GET /dashboard) in a real browser against the real coordinator.

Debian's chromium, driven by Playwright, loads the page from the coordinator fixture (real Redis,
real HTTP) while the test votes over HTTP: the page must follow without a reload, render data as
text (an arm named like an HTML tag), fit a phone, and say when the coordinator stops answering.
Where the browser or the playwright package is missing the browser tests are skipped with the
reason, except under CI (env CI set), where they fail (scripts/test installs chromium).
Screenshots go to DEXP_SCREENSHOT_DIR (default: the test's tmp_path).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from common import redis_keys as keys

from .browser import chromium
from .helpers import (
    Agent,
    ThreadedCoordinator,
    admin_headers,
    create_experiment,
    enroll_agents,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Route

M3 = {"delta": 0.2, "eta": 0.5}  # threshold M = ceil(log 0.2 / log 0.5) = 3
POLL = "interval=250"  # the page's polling period, ms: quick updates keep the test short
WAIT = 5000  # ms: any update must show within this (the page polls every 250 ms)
XSS = "<img src=x onerror=alert(1)>"
SCRIPT = '"><script>alert(2)</script>'
STATIC = files("coordinator.dashboard") / "static"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One chromium for the module; every test opens its own context (no shared state)."""
    with chromium() as launched:
        yield launched


class Watched:
    """A page with what it must never do recorded: dialogs (an injected script ran), uncaught
    errors, console errors (e.g. a CSP violation by the page's own code)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.console: list[str] = []
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", lambda m: self.console.append(m.text) if m.type == "error" else None)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def assert_clean(self) -> None:
        assert self.dialogs == [], f"a dialog fired: {self.dialogs}"
        assert self.errors == [], self.errors
        assert self.console == [], self.console


@pytest.fixture(scope="module")
def desktop_context(
    browser: Browser, coordinator_server: ThreadedCoordinator
) -> Iterator[BrowserContext]:
    """One desktop context for the module (a context costs more than a page to open)."""
    context = browser.new_context(
        base_url=coordinator_server.url, viewport={"width": 1280, "height": 900}, locale="en-US"
    )
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def desktop(desktop_context: BrowserContext, coordinator_url: str) -> Iterator[Watched]:
    """A fresh page per test (routes and media emulation are the page's), Redis emptied."""
    watched = Watched(desktop_context.new_page())
    try:
        yield watched
    finally:
        watched.page.unroute_all(behavior="ignoreErrors")  # a handler may be mid-poll
        watched.page.close()


@pytest.fixture
def phone(browser: Browser, coordinator_url: str) -> Iterator[Watched]:
    context = browser.new_context(
        base_url=coordinator_url,
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
        locale="en-US",
    )
    watched = Watched(context.new_page())
    try:
        yield watched
    finally:
        watched.page.unroute_all(behavior="ignoreErrors")  # a handler may be mid-poll
        context.close()


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("DEXP_SCREENSHOT_DIR") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def vote(client: httpx.Client, exp: str, agent: Agent, arm: int, epoch: int = 0) -> dict[str, Any]:
    response = client.post(
        f"/v1/experiments/{exp}/votes", json={"arm": arm, "epoch": epoch}, headers=agent.headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def arm_row(page: Page, index: int) -> Any:
    return page.locator(f'#arms tr[data-arm="{index}"]')


# -- the files and their headers (no browser) ---------------------------------------------------
def test_the_page_is_package_data_served_with_security_headers(client: httpx.Client) -> None:
    for path in ("/dashboard", "/dashboard/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("text/html")
        assert response.content == (STATIC / "index.html").read_bytes()
        assert_security_headers(response)
    for name, kind in [
        ("app.js", "text/javascript"),
        ("app.css", "text/css"),
        ("favicon.svg", "image/svg+xml"),
    ]:
        response = client.get(f"/dashboard/static/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith(kind)
        assert response.content == (STATIC / name).read_bytes()  # the installed package's file
        assert_security_headers(response)
    for bad in ("/dashboard/static/index.py", "/dashboard/static/..%2Froutes.py", "/dashboard/x"):
        assert client.get(bad).status_code == 404, bad
    assert not [p for p in client.get("/openapi.json").json()["paths"] if "dashboard" in p]

    html = (STATIC / "index.html").read_text()
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert scripts and all("src=" in s for s in scripts), "inline script"
    assert "<style" not in html and not re.search(r"\son\w+\s*=", html)
    script = (STATIC / "app.js").read_text()
    sink = re.search(r"\.(inner|outer)HTML\b|insertAdjacentHTML|document\.write|\beval\(", script)
    assert sink is None, f"app.js parses data as HTML: {sink}"
    # one credential, the key given for the agents' panel, sent by one call and stored nowhere
    assert script.count("Authorization") == 1, "a credential sent by more than the agents' panel"
    assert not re.search(r"localStorage|sessionStorage|document\.cookie|indexedDB", script)


def assert_security_headers(response: httpx.Response) -> None:
    policy = {
        d.split()[0]: d.split()[1:]
        for d in response.headers["content-security-policy"].split(";")
        if d.strip()
    }
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]  # no 'unsafe-inline', no 'unsafe-eval'
    assert policy["connect-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


# -- in the browser -----------------------------------------------------------------------------
def test_votes_show_up_live_until_the_best_arm(
    desktop: Watched, client: httpx.Client, screenshots: Path
) -> None:
    from playwright.sync_api import expect

    page = desktop.page
    create_experiment(client, id="live", arms=["A", "B", "C"], **M3)
    a, b, c, _ = enroll_agents(client, "live", 4)
    page.goto(f"/dashboard?{POLL}#live")
    expect(page.locator("#exp-title")).to_have_text("live", timeout=WAIT)
    expect(page.locator("#arms th.arm-name .name")).to_have_text(["A", "B", "C"])
    expect(page.locator("#arms .count")).to_have_text(["0 / 3"] * 3)
    expect(page.locator("#status")).to_have_text("Exploring: 3 of 3 arms remain")
    expect(page.locator("#facts")).to_contain_text("Agents enrolled4")
    expect(page.locator("#params")).to_contain_text("Algorithmde")
    expect(page.locator("#warnings")).to_contain_text("tie")  # 4 agents < 2M - 1 = 5
    expect(page.locator("#loadgen-card")).to_be_hidden()  # no load generator runs here
    # 3 of the 4 agents erring, each at most (pi^2 / 24) 0.5: 0.0294..., rounded up
    expect(page.locator("#certified-failure")).to_have_text("≤ 0.0295")
    expect(page.locator("#certified-verdict")).to_have_text("within δ = 0.2")
    expect(page.locator("#certified-scope")).to_have_text(
        "with the 4 agents enrolled; ≤ 1 if as many agents enroll as the coordinator admits"
    )
    expect(page.locator("#certificate")).to_contain_text("3 of the 4 agents to err")
    page.evaluate("window.notReloaded = true")

    vote(client, "live", a, 2)
    expect(arm_row(page, 2).locator(".count")).to_have_text("1 / 3", timeout=WAIT)
    vote(client, "live", b, 2)
    assert vote(client, "live", c, 2)["outcome"] == "eliminated"
    expect(arm_row(page, 2).locator(".state")).to_have_text("out #1", timeout=WAIT)
    expect(page.locator("#eliminations li")).to_have_count(1)
    expect(page.locator("#eliminations li .order")).to_have_text(["#1"])
    expect(page.locator("#eliminations li .name")).to_have_text(["C"])
    expect(page.locator("#status")).to_have_text("Exploring: 2 of 3 arms remain")

    create_experiment(client, id="other", arms=["X", "Y"], **M3)  # running, and more recent
    expect(page.locator("#experiments .exp-id")).to_have_text(["other", "live"], timeout=WAIT)

    for agent in (a, b, c):
        vote(client, "live", agent, 1)
    expect(page.locator("#status")).to_have_text("Identified: the best arm is A", timeout=WAIT)
    expect(page.locator("#exp-badge")).to_have_text("identified")
    expect(page.locator("#eliminations li .name")).to_have_text(["C", "B"])
    expect(page.locator("#eliminations li .when").nth(1)).to_contain_text("+")
    expect(arm_row(page, 0).locator(".state")).to_have_text("best arm")
    expect(page.locator("#experiments a[aria-current=page] .exp-id")).to_have_text("live")
    expect(page.locator("#conn-state")).to_have_text("Live")
    expect(page.locator("#chart-remaining svg path.step")).to_have_count(1)
    # 8 more agents after the decision (12 would certify only 0.462): the decision keeps the
    # certificate it was made with, 4 agents'
    enroll_agents(client, "live", 8)
    expect(page.locator("#facts")).to_contain_text("Agents enrolled12", timeout=WAIT)
    expect(page.locator("#certified-failure")).to_have_text("≤ 0.0295")
    expect(page.locator("#certified-verdict")).to_have_text("within δ = 0.2")
    expect(page.locator("#warnings")).not_to_contain_text("above delta")
    assert page.evaluate("window.notReloaded") is True, "the page reloaded"
    page.screenshot(path=str(screenshots / "dashboard-desktop.png"), full_page=True)
    desktop.assert_clean()


def test_a_tie_shows_its_candidates_and_what_is_certified(
    desktop: Watched, client: httpx.Client, screenshots: Path
) -> None:
    from playwright.sync_api import expect

    page = desktop.page
    create_experiment(client, id="a-first", arms=["P", "Q"], **M3)
    create_experiment(client, id="tie", arms=["A", "B", "C"], **M3)
    a, b, c, d = enroll_agents(client, "tie", 4)  # 4 < 2M - 1: each can keep A or B
    for agent in (a, b, c, d):
        vote(client, "tie", agent, 2)
    for agent, arm in ((a, 0), (b, 0), (c, 1), (d, 1)):
        vote(client, "tie", agent, arm)
    best = client.get("/v1/experiments/tie/best-arm").json()
    assert best["status"] == "tied"

    page.goto(f"/dashboard?{POLL}")  # no hash: the first experiment
    expect(page.locator("#exp-title")).to_have_text("a-first", timeout=WAIT)
    page.locator("#experiments a", has_text="tie").click()
    expect(page.locator("#exp-title")).to_have_text("tie", timeout=WAIT)
    assert page.url.endswith("#tie")
    status = page.locator("#status")
    expect(status.locator(".headline")).to_have_text("Tied between A and B", timeout=WAIT)
    expect(status.locator(".certified")).to_have_text(f"Certified: {best['certified']}")
    expect(arm_row(page, 0).locator(".state")).to_have_text("candidate")
    expect(arm_row(page, 1).locator(".state")).to_have_text("candidate")
    expect(arm_row(page, 0).locator(".count")).to_have_text("2 / 3")
    # the time axis ends at the tie (the publication that showed it), not at the last elimination
    tied_at = client.get("/v1/experiments/tie").json()["result"]["decided_at"]
    expect(page.locator("#result")).to_contain_text("Tied betweenA, B")
    expect(page.locator("#chart-remaining svg")).to_have_attribute("data-x1", str(tied_at))
    expect(page.locator("#experiments li", has_text="tie").locator(".badge")).to_have_text("tied")
    page.emulate_media(color_scheme="dark")  # the dark scheme, seen once
    page.screenshot(path=str(screenshots / "dashboard-tied-dark.png"), full_page=True)
    desktop.assert_clean()


def test_a_cde_experiment_shows_its_reports_and_certified_epsilon(
    desktop: Watched, client: httpx.Client, screenshots: Path
) -> None:
    """CDE (one report per agent, M = 3 for 7 agents expected): the arms count reports, and the
    certified epsilon e0 stands beside the certified failure, what it means for every prior
    first, the hit rate with its prior named after it (P = 0.8 with 3 arms: e^e0 = 8)."""
    from playwright.sync_api import expect

    page = desktop.page
    cde = {"algorithm": "cde", "eta": 0.1, "delta": 0.05, "privacy": 0.8, "agents": 7}
    create_experiment(client, id="cde", arms=["A", "B", "C"], epsilon=0.5, **cde)
    agents = enroll_agents(client, "cde", 6)
    for agent, arm in zip(agents, (0, 0, 1, 0), strict=False):
        reply = client.post("/v1/experiments/cde/report", json={"arm": arm}, headers=agent.headers)
        assert reply.status_code == 200, reply.text
    page.goto(f"/dashboard?{POLL}#cde")
    expect(page.locator("#status")).to_have_text("Identified: the best arm is A", timeout=WAIT)
    expect(page.locator("#arms-counted")).to_have_text("Reports / M")
    expect(page.locator("#arms .count")).to_have_text(["3 / 3", "1 / 3", "0 / 3"])
    expect(page.locator("#eliminations li .when").first).to_contain_text("1 reports")
    doc = client.get("/v1/experiments/cde").json()
    assert doc["certified_epsilon"] == pytest.approx(math.log(8))
    expect(page.locator("#certified-epsilon")).to_have_text("ε₀ = 2.08")  # log 8, rounded up
    expect(page.locator("#privacy-odds")).to_have_text(
        "Whatever it believed before, any adversary's odds about one agent's answer, hence its "
        "rewards, are multiplied by at most e^ε₀ = 8 by its report."
    )
    expect(page.locator("#privacy-uniform")).to_contain_text(
        "Hit rate under a uniform prior over which arm is best: ≤ 0.8 (one ε-optimal arm)"
    )
    expect(page.locator("#privacy")).not_to_contain_text("Certified privacy ≤")
    expect(page.locator("#certificate")).to_contain_text(
        "The answer is not epsilon-optimal with probability"
    )
    params = page.locator("#params")
    expect(params).to_contain_text("P (privacy, CDE)0.8")
    for absent in ("DP ε", "β (beta", "φ (phi", "ξ (xi"):
        expect(params).not_to_contain_text(absent)
    expect(page.locator("#result")).to_contain_text("Reports4")
    page.locator("#certificate-card").screenshot(
        path=str(screenshots / "dashboard-cde-privacy.png")
    )
    desktop.assert_clean()


def test_a_late_visitor_sees_the_whole_run_and_its_result(
    desktop: Watched, client: httpx.Client, clean_redis: str, screenshots: Path
) -> None:
    """Opened after the run: the votes chart from the coordinator's history, both time axes
    ending at the decision, the result kept after the load generator's lease went (set and
    removed here as load_generator/lease.py does), no tie warning after a clean identification,
    only DE's parameters, the threshold marks in one column whatever each count's width, and the
    list with the running experiments first, then the most recent."""
    import redis
    from playwright.sync_api import expect

    page = desktop.page
    create_experiment(client, id="older", arms=["X", "Y"], **M3)
    # M = 12 (eta = 1/2, delta = 2^-11.5): counts of one and two digits, "0 / 12" and "12 / 12"
    create_experiment(client, id="late", arms=["A", "B", "C"], delta=0.5**11.5, eta=0.5)
    agents = enroll_agents(client, "late", 12)  # < 2 M - 1: it warns that it can end tied
    assert "tied" in " ".join(client.get("/v1/experiments/late").json()["warnings"])
    store = redis.Redis.from_url(clean_redis)
    lease = {"run": "run-9", "epoch": 0, "activations": 4321, "activations_per_second": 987.0}
    store.set(keys.load_generator("late"), json.dumps({**lease, "updated_at": 1}), px=60_000)
    for arm in (2, 1):
        for agent in agents:
            vote(client, "late", agent, arm)
    doc = client.get("/v1/experiments/late").json()
    store.delete(keys.load_generator("late"))  # the run ended
    store.close()
    create_experiment(client, id="newer", arms=["X", "Y"], **M3)
    assert doc["status"] == "identified" and doc["warnings"] == []
    decided_at = doc["result"]["decided_at"]

    page.goto(f"/dashboard?{POLL}#late")
    expect(page.locator("#status")).to_have_text("Identified: the best arm is A", timeout=WAIT)
    expect(page.locator("#experiments .exp-id")).to_have_text(["newer", "older", "late"])
    expect(page.locator("#experiments li", has_text="late").locator(".exp-result")).to_have_text(
        re.compile(r"best arm A · in \d+\.\d+ s")
    )
    result = page.locator("#result")
    for text in ("Best armA", "Messages24", "Votes24", "Activations4,321", "Activations / s987"):
        expect(result).to_contain_text(text)
    expect(page.locator("#loadgen-card")).to_be_hidden()
    expect(page.locator("#warnings-card")).to_be_hidden()
    expect(page.locator("#privacy")).to_be_hidden()  # CDE's only
    params = page.locator("#params")
    expect(params).to_contain_text("η (eta)0.5")
    for absent in ("DP ε", "β (beta", "φ (phi", "ξ (xi", "privacy"):
        expect(params).not_to_contain_text(absent)
    expect(page.locator("#certificate .cert-inline")).to_have_text(
        page.locator("#certified-failure").text_content() or "-"
    )
    # the votes over time, step by step as published: one level per published total
    votes = page.locator("#chart-votes svg")
    expect(votes).to_have_attribute("data-x1", str(decided_at))
    expect(page.locator("#chart-remaining svg")).to_have_attribute("data-x1", str(decided_at))
    path = votes.locator("path.votes").get_attribute("d") or ""
    assert path.count(" V") == len(doc["votes_history"]) - 1 > 0, path
    expect(arm_row(page, 0).locator(".count")).to_have_text("0 / 12")
    expect(arm_row(page, 1).locator(".count")).to_have_text("12 / 12")
    ends = page.evaluate(
        "[...document.querySelectorAll('#arms .track')].map(t => t.getBoundingClientRect().right)"
    )
    assert len(ends) == 3 and max(ends) - min(ends) < 0.5, ends
    page.screenshot(path=str(screenshots / "dashboard-late.png"), full_page=True)
    desktop.assert_clean()


def test_after_a_reset_the_answer_is_timed_from_the_epoch_on_one_24_hour_clock(
    desktop: Watched, client: httpx.Client, clean_redis: str, screenshots: Path
) -> None:
    """Issue 37, point 8: an experiment created an hour before its reset was shown decided "after
    1.0 h since the creation" (the epoch took seconds), and its decision's time on a 12-hour clock
    ("3:04:05 PM") beside the page's 24-hour ones. Now: timed from the epoch's start, and one
    24-hour clock (the page's locale is en-US, whose default is 12-hour)."""
    import redis
    from playwright.sync_api import expect

    create_experiment(client, id="again", arms=["A", "B", "C"], **M3)
    store = redis.Redis.from_url(clean_redis)
    created = int(store.hget(keys.meta("again"), "created_at") or 0)
    store.hset(keys.meta("again"), "created_at", created - 3_600_000)  # created an hour ago
    store.close()
    agents = enroll_agents(client, "again", 3)
    reset = client.post("/v1/experiments/again/reset", headers=admin_headers())
    assert reset.status_code == 200, reset.text
    for arm in (2, 1):
        for agent in agents:
            vote(client, "again", agent, arm, epoch=1)
    doc = client.get("/v1/experiments/again").json()
    assert doc["status"] == "identified" and doc["result"]["epoch"] == 1
    took = doc["result"]["decided_at"] - doc["epoch_started_at"]
    assert doc["result"]["duration_ms"] >= 3_600_000 > took

    page = desktop.page
    page.goto(f"/dashboard?{POLL}#again")
    expect(page.locator("#status")).to_have_text("Identified: the best arm is A", timeout=WAIT)
    after = page.locator("#result dd", has_text="since epoch 1 began")
    expect(after).to_have_text(re.compile(r"^\d+\.\d+ s since epoch 1 began$"))
    seconds = float((after.text_content() or "").split()[0])
    assert abs(seconds - took / 1000) <= 0.01, (seconds, took)
    line = page.locator("#experiments li", has_text="again").locator(".exp-result")
    expect(line).to_have_text(re.compile(r"best arm A · epoch 1, at \d\d:\d\d:\d\d"))
    text = page.locator("main").inner_text()
    assert not re.search(r"\b(AM|PM)\b", text), text
    times = re.findall(r"\b\d{1,2}:\d\d:\d\d\b", text)
    assert times and all(len(t) == 8 for t in times), times  # HH:MM:SS, two-digit hours
    page.screenshot(path=str(screenshots / "dashboard-reset.png"), full_page=True)
    desktop.assert_clean()


def test_arm_names_render_as_text(desktop: Watched, client: httpx.Client) -> None:
    from playwright.sync_api import expect

    page = desktop.page
    create_experiment(client, id="xss", arms=[XSS, "B", SCRIPT], **M3)
    agents = enroll_agents(client, "xss", 3)
    for agent in agents:
        vote(client, "xss", agent, 2)
    for agent in agents:
        vote(client, "xss", agent, 1)
    page.goto(f"/dashboard?{POLL}#xss")
    expect(page.locator("#status")).to_have_text(f"Identified: the best arm is {XSS}", timeout=WAIT)
    expect(page.locator("#arms th.arm-name .name")).to_have_text([XSS, "B", SCRIPT])
    expect(page.locator("#eliminations li .name")).to_have_text([SCRIPT, "B"])
    assert page.locator("img").count() == 0
    assert page.locator("body script").count() == 0
    desktop.assert_clean()  # no alert() dialog


def test_a_key_shows_the_agents_and_is_kept_in_memory_only(
    desktop: Watched, client: httpx.Client
) -> None:
    """The one view that needs a key: the agents, one by one (GET .../agents, viewer or above).
    A key that is no key is refused with the coordinator's reason; the page stores nothing."""
    from playwright.sync_api import expect

    page = desktop.page
    create_experiment(client, id="panel", arms=["A", "B"], **M3)
    first, second = enroll_agents(client, "panel", 2)
    vote(client, "panel", first, 1)
    made = client.post(
        "/v1/keys", json={"name": "wall-screen", "role": "viewer"}, headers=admin_headers()
    )
    assert made.status_code == 201, made.text
    page.goto(f"/dashboard?{POLL}#panel")
    expect(page.locator("#status")).to_contain_text("Exploring", timeout=WAIT)
    assert page.locator("#agents-table").is_hidden()
    page.fill("#key-input", "dexp_not-a-key")
    page.click("#key-submit")
    expect(page.locator("#admin-status")).to_contain_text("401: invalid key", timeout=WAIT)
    page.fill("#key-input", made.json()["key"])
    page.click("#key-submit")
    expect(page.locator("#agents tr td:first-child")).to_have_text(
        [first.agent_id, second.agent_id], timeout=WAIT
    )
    expect(page.locator("#agents tr").first.locator("td").nth(1)).to_have_text("B")
    assert page.locator("#key-input").input_value() == ""  # not left in the field
    stored = page.evaluate("[localStorage.length, sessionStorage.length, document.cookie]")
    assert stored == [0, 0, ""]
    page.click("#key-forget")
    assert page.locator("#agents-table").is_hidden()
    # the 401 above is the only error the browser logged
    assert [m for m in desktop.console if "401" not in m] == [] and desktop.errors == []


def test_a_phone_shows_everything_without_horizontal_scrolling(
    phone: Watched, client: httpx.Client, screenshots: Path
) -> None:
    """Long unbroken names, warnings, and the figures of a running load generator (added to the
    coordinator's answer in the browser, as the simulated environment publishes them)."""
    from playwright.sync_api import expect

    page = phone.page
    exp = "a-long-experiment-identifier-that-has-to-wrap-on-a-phone-0123"
    names = ["control", "Variant-with-an-unbroken-name-" + "x" * 30, "B", "C", "D"]
    create_experiment(client, id=exp, arms=names, **M3)
    create_experiment(client, id="second", arms=["X", "Y"], **M3)
    agents = enroll_agents(client, exp, 4)
    for agent in agents[:3]:
        vote(client, exp, agent, 4)
    vote(client, exp, agents[0], 3)

    def with_load_generator(route: Route) -> None:
        response = route.fetch()
        body = response.json()
        body.setdefault("epoch_messages", body["messages"])
        if not body.get("load_generator"):
            body["load_generator"] = {
                "run": "run-7f3a",
                "host": "load-generator-1",
                "started_at": body["created_at"],
                "updated_at": body["created_at"],
                "epoch": 0,
                "activations": 123456,
                "delivered": 123000,
                "backlog": 456,
                "activations_per_second": 1234.5,
            }
        route.fulfill(response=response, json=body)

    page.route(re.compile(r"/v1/experiments/[^/?#]+$"), with_load_generator)
    page.goto(f"/dashboard?{POLL}#{exp}")
    expect(page.locator("#eliminations li .name")).to_have_text(["D"], timeout=WAIT)
    loadgen = page.locator("#loadgen")
    expect(loadgen).to_contain_text("Activations this run123,456")
    expect(loadgen).to_contain_text("Activations / s1,234.5")
    expect(page.locator("#loadgen-card")).to_contain_text("load generator")
    expect(page.locator("#facts")).to_contain_text("Messages this epoch4 of the bound M·K − 1 = 14")
    expect(page.locator("#experiments .exp-id")).to_have_count(2)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide on a 390 px screen"
    page.screenshot(path=str(screenshots / "dashboard-phone.png"), full_page=True)
    phone.assert_clean()


def test_lost_connection_is_shown_and_recovers(desktop: Watched, client: httpx.Client) -> None:
    """API calls aborted in the browser stand for a network loss; a hidden tab pauses polling."""
    from playwright.sync_api import expect

    page = desktop.page
    create_experiment(client, id="net", arms=["A", "B"], **M3)
    page.goto(f"/dashboard?{POLL}#net")
    state = page.locator("#conn-state")
    expect(state).to_have_text("Live", timeout=WAIT)
    page.route("**/v1/**", lambda route: route.abort())
    expect(state).to_have_text("Connection lost", timeout=WAIT)
    expect(page.locator("#conn-detail")).to_contain_text("last update")
    expect(page.locator("#exp-title")).to_have_text("net")  # the last view stays
    page.unroute("**/v1/**")
    expect(state).to_have_text("Live", timeout=WAIT)

    page.evaluate(
        """() => {
        Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "hidden"});
        document.dispatchEvent(new Event("visibilitychange"));
    }"""
    )
    expect(state).to_have_text("Paused")
    page.evaluate(
        """() => {
        delete document.visibilityState;
        document.dispatchEvent(new Event("visibilitychange"));
    }"""
    )
    expect(state).to_have_text("Live", timeout=WAIT)
    assert desktop.dialogs == [] and desktop.errors == []


def test_an_ldp_experiment_shows_its_estimates_allocation_and_lift(
    desktop: Watched, client: httpx.Client, screenshots: Path
) -> None:
    """LDP (private reports, no threshold): the estimates card shows each arm's mean with its
    interval and reports, the allocation, and the leader's lift over each arm with its interval,
    all as the document says; the votes table is gone, and the certified privacy is B x
    dp_epsilon with the document's sentence."""
    from playwright.sync_api import expect

    page = desktop.page
    arms = ["A", "B", "C"]
    create_experiment(
        client, id="crowd", arms=arms, algorithm="ldp", dp_epsilon=2.0, reports_per_agent=2
    )
    # A's bits mostly 1, B's half, C's mostly 0: A leads, C leaves
    bits = {0: [1, 1, 1, 1, 0, 1, 1, 1], 1: [1, 0, 1, 0, 1, 0, 0, 1], 2: [0, 0, 0, 1, 0, 0, 0, 0]}
    for i, agent in enumerate(enroll_agents(client, "crowd", 12)):
        for seq in (1, 2):
            arm = (2 * i + seq) % 3
            bit = bits[arm][(2 * i + seq) % 8]
            reply = client.post(
                "/v1/experiments/crowd/reports",
                json={"arm": arm, "bit": bit, "seq": seq},
                headers=agent.headers,
            )
            assert reply.status_code == 200, reply.text
    doc = client.get("/v1/experiments/crowd").json()
    assert doc["reports_total"] == 24
    page.goto(f"/dashboard?{POLL}#crowd")
    expect(page.locator("#crowd-card")).to_be_visible(timeout=WAIT)
    expect(page.locator("#arms-card")).to_be_hidden()
    expect(page.locator("#crowd-note")).to_contain_text(
        "24 reports published, each 2-locally private; at most 2 per device (ε = 4"
    )
    rows = page.locator("#estimates tr")
    expect(rows).to_have_count(3)
    for e in doc["estimates"]:
        low, high = e["ci"]
        mean = "–" if e["mean"] is None else f"{e['mean']:.3f}"
        row = page.locator(f'#estimates tr[data-arm="{e["index"]}"]')
        expect(row.locator(".ci-text")).to_have_text(
            f"{mean} [{low:.3f}, {high:.3f}] · {e['reports']} reports"
        )
        expect(row.locator(".alloc")).to_have_text(f"{doc['allocation'][e['index']]:.2f}")
    leader = next(e for e in doc["estimates"] if e["index"] not in {x["vs"] for x in doc["lift"]})
    expect(page.locator("#lift-caption")).to_contain_text(
        f"Lift of the leader {arms[leader['index']]}"
    )
    for lift in doc["lift"]:
        low, high = lift["ci"]
        expect(page.locator(f'#lift tr[data-vs="{lift["vs"]}"] .ci-text')).to_have_text(
            f"{lift['mean']:+.3f} [{low:+.3f}, {high:+.3f}]"
        )
    expect(page.locator("#certified-epsilon")).to_have_text("ε = 4")
    expect(page.locator("#privacy-odds")).to_have_text(doc["privacy_certificate"])
    params = page.locator("#params")
    expect(params).to_contain_text("DP ε2")
    expect(params).to_contain_text("B (reports per device, LDP)2")
    expect(params).not_to_contain_text("η (eta)")
    expect(page.locator("#facts")).not_to_contain_text("Threshold M")
    expect(page.locator("#experiments .exp-meta")).to_have_text("3 of 3 arms · 12 agents")
    page.screenshot(path=str(screenshots / "dashboard-ldp.png"), full_page=True)
    page.locator("#crowd-card").screenshot(path=str(screenshots / "dashboard-ldp-estimates.png"))
    desktop.assert_clean()


def test_an_ldp_experiment_fits_a_phone(
    phone: Watched, client: httpx.Client, screenshots: Path
) -> None:
    """The estimates and the lift, with a long arm name, wrap on a 390 px screen."""
    from playwright.sync_api import expect

    page = phone.page
    names = ["control", "Variant-with-an-unbroken-name-" + "x" * 30, "C"]
    create_experiment(client, id="crowd", arms=names, algorithm="ldp")
    for i, agent in enumerate(enroll_agents(client, "crowd", 6)):
        reply = client.post(
            "/v1/experiments/crowd/reports",
            json={"arm": i % 3, "bit": int(i % 3 == 0), "seq": 1},
            headers=agent.headers,
        )
        assert reply.status_code == 200, reply.text
    page.goto(f"/dashboard?{POLL}#crowd")
    expect(page.locator("#estimates tr")).to_have_count(3, timeout=WAIT)
    expect(page.locator("#lift tr")).to_have_count(2)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide on a 390 px screen"
    page.screenshot(path=str(screenshots / "dashboard-ldp-phone.png"), full_page=True)
    phone.assert_clean()


@pytest.fixture
def batched_page(
    browser: Browser, redis_url: str, clean_redis: str
) -> Iterator[tuple[Watched, str]]:
    """A desktop page of a coordinator that publishes as a default one does (batches of 10; the
    eliminations' tick an hour away, so that nothing publishes in the test), and its URL."""
    from .helpers import coordinator, coordinator_settings

    settings = coordinator_settings(
        redis_url, publish_batch=10, publish_cadence_seconds=3600, experiment=""
    )
    with coordinator(settings) as server:
        context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
        try:
            yield Watched(context.new_page()), server.url
        finally:
            context.close()


def test_votes_waiting_for_their_batch_are_shown_not_lost(
    batched_page: tuple[Watched, str], screenshots: Path
) -> None:
    """Issue 37: a device's votes, counted but not yet published, showed as 0 votes and 0
    messages with no word of them. The page says how many wait for the next publication."""
    from playwright.sync_api import expect

    watched, url = batched_page
    page = watched.page
    with httpx.Client(base_url=url, timeout=10, trust_env=False) as client:
        create_experiment(client, id="first", arms=["red", "green", "blue"], **M3)
        page.goto(f"/dashboard?{POLL}#first")
        expect(page.locator("#arms-waiting")).to_have_text(
            "0 messages waiting for the next publication: the counts move 10 counted messages "
            "at a time (an elimination at the next tick)",
            timeout=WAIT,
        )
        (agent,) = enroll_agents(client, "first", 1)
        for arm in (0, 2):
            vote(client, "first", agent, arm)
        expect(page.locator("#arms-waiting")).to_contain_text(
            "2 messages waiting for the next publication", timeout=WAIT
        )
        expect(page.locator("#facts")).to_contain_text("Waiting for publication2")
        expect(page.locator("#arms .count")).to_have_text(["0 / 3"] * 3)  # as published
    page.screenshot(path=str(screenshots / "dashboard-waiting.png"), full_page=True)
    watched.assert_clean()
