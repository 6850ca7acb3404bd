"""The JavaScript SDK in a real browser: a plain page on another origin imports it from the real
coordinator (real Redis, real HTTP) in Debian's chromium, under CORS (DEXP_CORS_ORIGINS).

The pages are files of tests/services/sdk_pages, served by a tiny HTTP server on another port of
127.0.0.1 (another port, another origin), with __COORDINATOR__ (and __NAME__ for each query
parameter `name`) replaced in them. The coordinator allows that origin only; a second server, on
yet another port, is an origin it does not allow. Each test opens its own browser context (its own
localStorage), from `open_page`. A page reports through `window.imported` (what it got) or
`window.failed`. A page that runs agents goes the same way: a file in sdk_pages, an experiment and
tickets made on `sdk_coordinator` (helpers.create_experiment, admin_headers), the tickets in the
page's query (or `site.values`), `open_page(site, path, until=...)` for the page's own condition,
and `opened.page.reload()` keeps the context's localStorage (the same agents).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import pytest

from .browser import chromium
from .helpers import (
    ThreadedCoordinator,
    admin_headers,
    bearer,
    coordinator,
    coordinator_settings,
    create_experiment,
)
from .test_js_sdk import run_agents, tickets

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

PAGES = Path(__file__).resolve().parent / "sdk_pages"
SDK = Path(__file__).resolve().parents[2] / "sdk" / "js"
VERSION = json.loads((SDK / "package.json").read_text())["version"]
SERVED = (SDK / "dist" / "agent.min.js").read_bytes()
INTEGRITY = "sha384-" + base64.b64encode(hashlib.sha384(SERVED).digest()).decode()
WAIT = 10_000  # ms: a page on the loopback reports within this, or the test fails


class StaticSite:
    """A directory of pages over HTTP on 127.0.0.1, in a thread: another origin than the
    coordinator's. Placeholders in .html files are filled from `values` and the query string."""

    def __init__(self, directory: Path) -> None:
        self.values: dict[str, str] = {}
        self.pages: dict[str, str] = {}  # path -> the text of a page made by a test
        site = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(directory), **kwargs)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if not url.path.endswith(".html"):
                    return super().do_GET()
                page = directory / url.path.lstrip("/")
                if url.path in site.pages:
                    text = site.pages[url.path]
                elif page.parent != directory or not page.is_file():
                    return self.send_error(404)
                else:
                    text = page.read_text(encoding="utf-8")
                for name, value in [*parse_qsl(url.query), *site.values.items()]:  # the query first
                    text = text.replace(f"__{name.upper()}__", value)
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StaticSite:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def sites(redis_url: str) -> Iterator[tuple[StaticSite, StaticSite, ThreadedCoordinator]]:
    """The allowed site, a site of a stranger origin, and a coordinator that allows the first."""
    with StaticSite(PAGES) as allowed, StaticSite(PAGES) as stranger:
        settings = coordinator_settings(redis_url, cors_origins=allowed.origin)
        with coordinator(settings) as server:
            for site in (allowed, stranger):
                site.values["coordinator"] = server.url
            yield allowed, stranger, server


@pytest.fixture
def site(sites: tuple[StaticSite, StaticSite, ThreadedCoordinator], clean_redis: str) -> StaticSite:
    return sites[0]


@pytest.fixture
def stranger(sites: tuple[StaticSite, StaticSite, ThreadedCoordinator]) -> StaticSite:
    return sites[1]


@pytest.fixture
def sdk_coordinator(
    sites: tuple[StaticSite, StaticSite, ThreadedCoordinator], clean_redis: str
) -> ThreadedCoordinator:
    """The coordinator the allowed site's pages talk to, its Redis emptied before the test."""
    return sites[2]


@dataclass
class Opened:
    """A page that reported, with the errors its console showed (a CORS or integrity refusal)."""

    page: Page
    errors: list[str]

    def report(self, name: str) -> Any:
        """window.imported or window.failed (None when unset)."""
        return self.page.evaluate(f"window.{name}")


OpenPage = Callable[..., Opened]  # (site, path, until=READY) -> Opened
READY = "window.imported || window.failed"


@pytest.fixture
def open_page(browser: Browser) -> Iterator[OpenPage]:
    """Opens `site`'s page `path` (with its query) in a fresh context (its own localStorage),
    records the console's errors, and waits until the page's expression `until` is true (by
    default: it reported window.imported or window.failed)."""
    contexts = []

    def open_(site: StaticSite, path: str, until: str = READY, timeout: float = WAIT) -> Opened:
        context = browser.new_context()
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{site.origin}/{path}")
        page.wait_for_function(until, timeout=timeout)
        return Opened(page, errors)

    try:
        yield open_
    finally:
        for context in contexts:
            context.close()


def test_a_page_on_an_allowed_origin_imports_the_sdk(
    open_page: OpenPage, site: StaticSite, sdk_coordinator: ThreadedCoordinator
) -> None:
    opened = open_page(site, "import.html")
    assert opened.report("failed") is None, opened.errors
    exports = opened.report("imported")["exports"]
    assert "LocalAgent" in exports and "cryptoDraws" in exports
    assert urlsplit(opened.page.url).port != urlsplit(sdk_coordinator.url).port  # another origin
    # the version the coordinator serves is readable across origins too (an exposed header)
    version = opened.page.evaluate(
        "async url => (await fetch(url)).headers.get('X-Dexp-Sdk-Version')",
        f"{sdk_coordinator.url}/sdk/agent.js",
    )
    assert version == VERSION


def test_a_page_on_another_origin_cannot_import_it(
    open_page: OpenPage, stranger: StaticSite
) -> None:
    opened = open_page(stranger, "import.html")
    assert opened.report("imported") is None
    assert opened.report("failed") == "error"
    errors = " ".join(opened.errors)
    assert "CORS policy" in errors and "/sdk/agent.js" in errors, errors


@pytest.mark.parametrize("page_name", ["pinned.html", "preload.html"])
def test_a_pinned_import_checks_its_integrity(
    open_page: OpenPage, site: StaticSite, page_name: str
) -> None:
    """What docs/DEVICES.md says of pinning, verified: the versioned URL with its sha384 loads, a
    wrong hash is refused (import map integrity; modulepreload integrity)."""
    query = {"version": VERSION, "integrity": INTEGRITY}
    good = open_page(site, f"{page_name}?{urlencode(query)}")
    assert good.report("failed") is None, good.errors
    assert "LocalAgent" in good.report("imported")["exports"]
    wrong = "sha384-" + base64.b64encode(hashlib.sha384(b"another build").digest()).decode()
    bad = open_page(site, f"{page_name}?{urlencode({**query, 'integrity': wrong})}")
    assert bad.report("imported") is None
    assert bad.report("failed") == "error"
    assert "integrity" in " ".join(bad.errors)


AGENTS = 32
RATES = [0.3, 0.5, 0.7]  # Bernoulli means, drawn in the page: arm 2 is the best


def test_32_agents_in_a_page_identify_the_best_arm_and_a_reload_resumes_them(
    open_page: OpenPage, site: StaticSite, sdk_coordinator: ThreadedCoordinator
) -> None:
    """A plain page on another origin imports /sdk/agent.js and runs 32 agents, each enrolled with
    its own ticket and kept in localStorage, on Bernoulli rewards drawn in the page. Reloaded once
    votes have been sent (the run under way), it resumes the same 32 agents: no ticket is used
    again, the coordinator counts 32 agents, and the run ends identified on arm 2, which every
    agent of the page learnt from the coordinator's event stream.

    The page draws from Math.random and crypto, unseeded: a wrong answer needs M = 7 of the 32
    agents to vote arm 2 out, and a lone SER3 agent on these means (eta 1/2, eps 0.1) did so in
    none of 3,000 simulated runs (common.agent.LocalAgent, numpy seed 7): with a chance below
    1e-3 each (the 95 % upper bound of 0 in 3,000), below 1e-14 for seven of them."""
    client = httpx.Client(base_url=sdk_coordinator.url)
    try:
        experiment = "page"
        body = {"id": experiment, "arms": ["low", "mid", "high"], "eta": 0.5, "delta": 0.01}
        created = create_experiment(client, **body, epsilon=0.1)
        assert created["threshold"] == 7
        issued = client.post(
            f"/v1/experiments/{experiment}/tickets",
            json={"count": AGENTS},
            headers=admin_headers(),
        )
        assert issued.status_code == 201, issued.text
        site.values |= {
            "tickets": json.dumps(issued.json()["tickets"]),
            "rates": json.dumps(RATES),
            "experiment": experiment,
        }
        opened = open_page(
            site,
            "agents.html",
            until="window.failed || window.progress?.votes >= 4",
            timeout=60_000,
        )
        assert opened.report("failed") is None, opened.errors
        first = opened.page.evaluate("window.progress")
        assert (first["enrolled"], first["resumed"]) == (AGENTS, 0)
        middle = client.get(f"/v1/experiments/{experiment}").json()
        assert (middle["agents"], middle["status"]) == (AGENTS, "exploring")

        opened.page.reload()
        opened.page.wait_for_function("window.failed || window.finished", timeout=120_000)
        assert opened.page.evaluate("window.failed") is None, opened.errors
        again = opened.page.evaluate("window.progress")
        assert (again["enrolled"], again["resumed"]) == (AGENTS, AGENTS)
        assert again["ids"] == first["ids"]  # the same agents, from localStorage
        finished = opened.page.evaluate("window.finished")
        assert {(agent["status"], agent["best"]) for agent in finished} == {("identified", 2)}
        state = client.get(f"/v1/experiments/{experiment}").json()
        assert state["agents"] == AGENTS  # no new enrollment
        assert (state["status"], state["remaining_arms"]) == ("identified", [2])
        assert not [e for e in opened.errors if "dexp" in e or "CORS" in e], opened.errors
    finally:
        client.close()


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "DEVICES.md"


def quickstart_page() -> str:
    """The browser quickstart's page, as docs/DEVICES.md gives it."""
    text = GUIDE.read_text()
    section = text[text.index("### Quickstart: a page that is one agent") :]
    page = re.search(r"^```html\n(.*?)^```$", section, flags=re.M | re.S)
    assert page is not None
    return page.group(1)


def test_the_browser_quickstart_is_one_agent_across_visits(
    browser: Browser, site: StaticSite, sdk_coordinator: ThreadedCoordinator
) -> None:
    """The guide's page, as written (the coordinator's URL and a ticket put in), visited again and
    again by one visitor who clicks the green banner only: the first visit enrolls, every later
    one resumes from localStorage, and the observations handed over at `pagehide` add up until
    the page shows what one visitor reaches (issue 37: it showed nothing of it), its own answer
    and its votes against red and blue counted (GET /v1/agents/me). Three other agents vote the
    same way: every arm but green is out, and the next visit shows green. One enrollment from the
    page, whatever the number of visits."""
    code = quickstart_page()
    assert len([line for line in code.splitlines() if line.strip()]) <= 17
    client = httpx.Client(base_url=sdk_coordinator.url)
    context = browser.new_context()
    try:
        body = {"id": "banners", "arms": ["red", "green", "blue"], "eta": 0.5, "delta": 0.1}
        assert create_experiment(client, **body, epsilon=0.1)["threshold"] == 4
        issued = client.post(
            "/v1/experiments/banners/tickets", json={"count": 4}, headers=admin_headers()
        )
        ticket, *others = issued.json()["tickets"]
        url = "https://coordinator.example"
        site.pages["/quickstart.html"] = code.replace(url, sdk_coordinator.url).replace(
            '"TICKET"', json.dumps(ticket)
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        shown = "document.getElementById('banner').textContent"
        counted = "document.getElementById('counted').textContent"
        visits, deadline = 0, time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline and visits < 300, (visits, errors)
            page.goto(f"{site.origin}/quickstart.html")
            page.wait_for_function(f"{shown} && {counted}", timeout=WAIT)
            if page.evaluate(counted) == "settled; votes counted: red, blue":
                break  # what one visitor reaches, as the coordinator counted it
            if page.evaluate(shown) == "green":
                page.click("#banner")
            visits += 1  # the next visit's page replaces it: pagehide hands the reward over
        assert not errors, errors
        assert client.get("/v1/experiments/banners").json()["votes"] == [1, 0, 1]
        assert client.get("/v1/experiments/banners").json()["agents"] == 1  # one enrollment
        for other in others:
            agent = client.post(
                "/v1/agents", json={"experiment": "banners"}, headers=bearer(other)
            ).json()
            for arm in (0, 2):
                vote = {"arm": arm, "epoch": 0}
                reply = client.post(
                    "/v1/experiments/banners/votes", json=vote, headers=bearer(agent["token"])
                )
                assert reply.status_code == 200, reply.text
        assert client.get("/v1/experiments/banners").json()["remaining_arms"] == [1]
        page.goto(f"{site.origin}/quickstart.html")
        page.wait_for_function(shown, timeout=WAIT)
        assert page.evaluate(shown) == "green"  # the identified arm, from now on
        print(f"quickstart: {visits} visits until its two votes")
    finally:
        context.close()
        client.close()


def test_the_same_sdk_under_node_against_the_same_coordinator(
    sdk_coordinator: ThreadedCoordinator, tmp_path: Path
) -> None:
    """The module the pages import, run by Node against the coordinator the pages use: eight
    agents with Bernoulli rewards, each kept in a file, identify the best arm
    (tests/services/test_js_sdk.py has the Node tests in full)."""
    client = httpx.Client(base_url=sdk_coordinator.url)
    try:
        body = {"id": "node", "arms": ["low", "mid", "high"], "eta": 0.5, "delta": 0.1}
        create_experiment(client, **body, epsilon=0.1)
        job = {"coordinator": sdk_coordinator.url, "experiment": "node", "dir": str(tmp_path)}
        job |= {"agents": 8, "rates": RATES, "seed": 26, "stopAfterVotes": None}
        report = run_agents(job | {"tickets": tickets(client, "node", 8)})
        assert {(a["status"], a["bestArm"]) for a in report["agents"]} == {("identified", 2)}
        assert client.get("/v1/experiments/node").json()["remaining_arms"] == [2]
    finally:
        client.close()


def test_a_second_tab_on_the_same_key_is_refused_until_the_first_lets_go(
    browser: Browser, site: StaticSite, sdk_coordinator: ThreadedCoordinator
) -> None:
    """One agent, one holder: a second tab of the same origin on the same storage key waits for
    the first (Web Locks) and, the first still running, fails with AgentLocked, enrolling nobody;
    once the first tab is closed, a third one resumes the same agent."""
    client = httpx.Client(base_url=sdk_coordinator.url)
    context = browser.new_context()
    try:
        create_experiment(client, id="tabs", arms=["a", "b"], eta=0.5, delta=0.1, epsilon=0.1)
        ticket, spare = tickets(client, "tabs", 2)
        path = "one_agent.html?" + urlencode({"experiment": "tabs", "key": "dexp-tabs"})

        def tab(ticket: str) -> Page:
            page = context.new_page()
            page.goto(f"{site.origin}/{path}&{urlencode({'ticket': ticket, 'wait': 300})}")
            page.wait_for_function(READY, timeout=WAIT)
            return page

        first = tab(ticket)
        agent = first.evaluate("window.imported")
        assert agent["resumed"] is False, first.evaluate("window.failed")
        second = tab(spare)
        assert second.evaluate("window.failed") == "AgentLocked"
        assert client.get("/v1/experiments/tabs").json()["agents"] == 1
        first.close()
        third = tab(spare)
        assert third.evaluate("window.imported") == {"id": agent["id"], "resumed": True}
        assert client.get("/v1/experiments/tabs").json()["agents"] == 1
    finally:
        context.close()
        client.close()
