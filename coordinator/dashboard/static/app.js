// The dexp dashboard: polls the coordinator's public GET routes and draws them.
//
// Every piece of data (arm names, ids, warnings) reaches the page through textContent or a
// created element, never innerHTML: an arm may be named "<img src=x onerror=...>". The CSP
// (coordinator/dashboard/routes.py) forbids inline script as a second line of defence.
"use strict";

const API = "/v1/experiments";
const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const query = new URLSearchParams(window.location.search);
// ?interval=ms changes the polling period (250 ms to 60 s; default 1 s).
const INTERVAL = Math.min(60000, Math.max(250, Number(query.get("interval")) || 1000));
const LIST_EVERY = 3; // the experiment list is refreshed every third poll
const MAX_PAGES = 100; // 100 pages of 100 experiments
const REQUEST_TIMEOUT = Math.max(3000, 3 * INTERVAL);
const SVG = "http://www.w3.org/2000/svg";

const state = {
  experiments: null, // summaries, in id order
  listTruncated: false,
  listKey: "",
  detail: null,
  best: null,
  waiting: null, // GET .../waiting: counted messages not yet published
  missing: "", // the selected id answered 404
  renderedKey: "",
  statusText: "",
  polls: 0,
  timer: 0,
  inflight: false,
  again: false,
  lastOk: 0,
  failingSince: 0,
  key: "", // a key for the agents' panel (GET .../agents): in memory only, never stored
  agentsInflight: false,
};

const $ = (id) => document.getElementById(id);

// -- small DOM helpers ----------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function fill(parent, ...children) {
  parent.replaceChildren(...children.filter((c) => c !== null && c !== undefined && c !== false));
}

function fact(dl, term, ...value) {
  // a <div> per term and value: valid in a <dl>, and it lets a row wrap as one on a phone
  dl.append(el("div", { class: "row" }, el("dt", { text: term }), el("dd", {}, ...value)));
}

// -- formatting -----------------------------------------------------------------------------------
const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const decimal = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
// One 24-hour clock everywhere (a locale's timeStyle alone may be 12-hour: "3:04:05 PM" beside
// "15:04:05"); h23, not hour12: false, which some engines render as "24:00:00" at midnight.
const clock = new Intl.DateTimeFormat(undefined, {
  hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
});
const dateTime = new Intl.DateTimeFormat(undefined, {
  dateStyle: "medium", timeStyle: "medium", hourCycle: "h23",
});

function num(value) {
  return typeof value === "number" && Number.isFinite(value) ? integer.format(value) : "–";
}

function wallClock(ms) {
  return typeof ms === "number" ? clock.format(new Date(ms)) : "–";
}

function duration(ms) {
  const s = Math.max(0, ms) / 1000;
  if (s < 10) return `${s.toFixed(2)} s`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function ago(ms) {
  const s = (Date.now() - ms) / 1000;
  return s < 60 ? `${Math.max(0, Math.round(s))} s ago` : `${duration(Date.now() - ms)} ago`;
}

function upperText(x) {
  // a bound (a probability, or e.g. CDE's e0) rounded up to 3 significant digits (it stays a
  // bound), as the CLI prints it
  if (typeof x !== "number" || !Number.isFinite(x)) return "–";
  if (x <= 0 || x === 1) return String(x);
  const exponent = Math.floor(Math.log10(x)) - 2;
  const scaled = x / 10 ** exponent;
  const nearest = Math.round(scaled);
  const digits = Math.abs(scaled - nearest) < 1e-9 ? nearest : Math.ceil(scaled);
  return String(Number((digits * 10 ** exponent).toPrecision(3)));
}

function paramValue(value) {
  if (typeof value === "number") return String(value);
  if (typeof value === "boolean") return value ? "yes" : "no";
  return value === null || value === undefined ? "–" : String(value);
}

// -- fetching -------------------------------------------------------------------------------------
class HttpError extends Error {
  constructor(status, path) {
    super(`HTTP ${status} from ${path}`);
    this.status = status;
  }
}

async function getJSON(path) {
  const response = await fetch(path, {
    headers: { Accept: "application/json" },
    cache: "no-store",
    credentials: "omit",
    signal: AbortSignal.timeout(REQUEST_TIMEOUT),
  });
  if (!response.ok) throw new HttpError(response.status, path);
  return response.json();
}

async function listAll() {
  const all = [];
  let after = "";
  for (let page = 0; page < MAX_PAGES; page++) {
    const body = await getJSON(`${API}?limit=100&after=${encodeURIComponent(after)}`);
    all.push(...(body.experiments || []));
    if (!body.next || body.next === after) return { all, truncated: false };
    after = body.next;
  }
  return { all, truncated: true };
}

function hashId() {
  let raw = window.location.hash.slice(1);
  try {
    raw = decodeURIComponent(raw);
  } catch {
    return "";
  }
  return ID_PATTERN.test(raw) ? raw : "";
}

// The list as shown, and the experiment picked without a hash: the running ones (exploring)
// first, then the most recently created; the id breaks ties so the order is stable.
function ordered(list) {
  const running = (e) => (e.status === "exploring" ? 0 : 1);
  return [...list].sort((a, b) =>
    running(a) - running(b) || (b.created_at || 0) - (a.created_at || 0) || (a.id < b.id ? -1 : 1));
}

function selectedId() {
  const wanted = hashId();
  if (wanted) return wanted;
  return state.experiments && state.experiments.length ? ordered(state.experiments)[0].id : "";
}

// -- polling --------------------------------------------------------------------------------------
async function poll() {
  clearTimeout(state.timer);
  state.timer = 0;
  if (document.visibilityState === "hidden") {
    showConnection("paused");
    return;
  }
  if (state.inflight) {
    state.again = true;
    return;
  }
  state.inflight = true;
  try {
    if (state.experiments === null || state.polls % LIST_EVERY === 0) {
      const { all, truncated } = await listAll();
      state.experiments = all;
      state.listTruncated = truncated;
    }
    state.polls += 1;
    const id = selectedId();
    let detail = null;
    let best = null;
    let waiting = null;
    state.missing = "";
    if (id) {
      try {
        detail = await getJSON(`${API}/${encodeURIComponent(id)}`);
        if (detail.status !== "exploring") {
          best = await getJSON(`${API}/${encodeURIComponent(id)}/best-arm`);
        }
        // the counted messages the published counts lack yet (an older coordinator: none known)
        waiting = await getJSON(`${API}/${encodeURIComponent(id)}/waiting`).catch(() => null);
      } catch (error) {
        if (!(error instanceof HttpError && error.status === 404)) throw error;
        state.missing = id;
        detail = null;
      }
    }
    if (id !== selectedId()) {
      state.again = true; // the hash changed while we fetched: this answer is for another page
      return;
    }
    state.detail = detail;
    state.best = best;
    state.waiting = waiting;
    if (detail) freshenSummary(detail);
    if (detail && state.key) loadAgents(id); // not awaited: the public view never waits for it
    state.lastOk = Date.now();
    state.failingSince = 0;
    showConnection("live");
    render();
  } catch (error) {
    if (!state.failingSince) state.failingSince = Date.now();
    showConnection("lost", error);
    renderTicking(); // keep relative times moving while we wait
  } finally {
    state.inflight = false;
    if (state.again) {
      state.again = false;
      queueMicrotask(poll);
    } else if (document.visibilityState !== "hidden") {
      state.timer = setTimeout(poll, INTERVAL);
    }
  }
}

// The list is refreshed less often than the selected experiment: keep its entry in step.
function freshenSummary(d) {
  const entry = (state.experiments || []).find((e) => e.id === d.id);
  if (!entry) return;
  entry.status = d.status;
  entry.remaining = (d.remaining_arms || []).length;
  entry.agents = d.agents;
  entry.threshold = d.threshold;
  entry.version = d.version;
  entry.epoch = d.epoch;
  entry.result = d.result;
}

function showConnection(kind, error) {
  const box = $("conn");
  box.dataset.state = kind;
  let text = "Live";
  let detail = state.lastOk ? `updated ${wallClock(state.lastOk)}` : "";
  if (kind === "lost") {
    text = "Connection lost";
    const why = error instanceof HttpError
      ? `the coordinator answered ${error.status}`
      : "the coordinator does not answer";
    const last = state.lastOk ? `last update ${wallClock(state.lastOk)} (${ago(state.lastOk)})` : "no update yet";
    detail = `${why}; ${last}; retrying`;
  } else if (kind === "paused") {
    text = "Paused";
    detail = "tab hidden" + (state.lastOk ? `; last update ${wallClock(state.lastOk)}` : "");
  }
  // the status region is announced: change its text only when the state changes
  if ($("conn-state").textContent !== text) $("conn-state").textContent = text;
  $("conn-detail").textContent = detail;
}

// -- rendering ------------------------------------------------------------------------------------
function render() {
  renderList();
  const d = state.detail;
  const placeholder = $("placeholder");
  if (!d) {
    $("experiment").hidden = true;
    placeholder.hidden = false;
    placeholder.textContent = state.missing
      ? `No experiment "${state.missing}" on this coordinator (it may have been deleted).`
      : "No experiment yet. Create one with POST /v1/experiments (admin token).";
    document.title = "dexp dashboard";
    state.renderedKey = "";
    return;
  }
  placeholder.hidden = true;
  $("experiment").hidden = false;
  const key = JSON.stringify([d, state.best, state.waiting]);
  if (key !== state.renderedKey) {
    state.renderedKey = key;
    renderExperiment(d, state.best);
  }
  renderTicking();
}

function renderList() {
  const list = ordered(state.experiments || []);
  const current = selectedId();
  const key = JSON.stringify([list, current, state.listTruncated]);
  if (key === state.listKey) return;
  state.listKey = key;
  $("list-count").textContent = list.length ? `(${list.length}${state.listTruncated ? "+" : ""})` : "";
  $("list-note").textContent = list.length
    ? state.listTruncated ? `Showing the first ${list.length}.` : ""
    : "None yet.";
  fill(
    $("experiments"),
    ...list.map((e) => {
      const link = el(
        "a",
        { href: `#${encodeURIComponent(e.id)}`, "aria-current": e.id === current ? "page" : null },
        el("span", { class: "exp-id", text: e.id }),
        el("span", { class: `badge small ${statusClass(e.status)}`, text: e.status }),
        el("span", {
          class: "exp-meta",
          // LDP has no threshold (0): no M
          text: `${num(e.remaining)} of ${num(e.n_arms)} arms · ${e.threshold ? `M ${num(e.threshold)} · ` : ""}${num(e.agents)} agents`,
        }),
        e.result ? el("span", { class: "exp-meta exp-result", text: resultLine(e.result) }) : null,
      );
      return el("li", {}, link);
    }),
  );
}

function resultLine(r) {
  // a decided experiment's kept result, in the list: its outcome and how long it took
  const names = (r.candidates || []).map((c) => c.name).join(", ");
  const outcome = r.status === "identified" && r.best_arm ? `best arm ${r.best_arm.name}` : `tied: ${names}`;
  // duration_ms counts from the creation: after a reset, the decision's time instead (the list's
  // summaries do not say when the epoch began)
  if (typeof r.epoch === "number" && r.epoch > 0) {
    return typeof r.decided_at === "number" ? `${outcome} · epoch ${r.epoch}, at ${wallClock(r.decided_at)}` : outcome;
  }
  return typeof r.duration_ms === "number" ? `${outcome} · in ${duration(r.duration_ms)}` : outcome;
}

function statusClass(status) {
  return ["exploring", "identified", "tied"].includes(status) ? `st-${status}` : "st-unknown";
}

function renderExperiment(d, best) {
  const arms = d.arms || [];
  const remaining = new Set(d.remaining_arms || []);
  const eliminations = [...(d.eliminations || [])].sort((a, b) => a.order - b.order);
  const outBy = new Map(eliminations.map((e) => [e.arm, e]));
  const candidates = new Set((best && best.status === "tied" ? best.candidates : []).map((c) => c.index));
  const bestIndex = d.status === "identified" && remaining.size === 1 ? [...remaining][0] : null;
  const M = d.threshold;

  $("exp-title").textContent = d.id;
  const badge = $("exp-badge");
  badge.className = `badge ${statusClass(d.status)}`;
  badge.textContent = d.status;
  document.title = `${d.id} · ${d.status} · dexp dashboard`;

  renderStatus(d, best, arms, remaining);

  // arms: a bar per arm from 0 to the threshold M, which the mark at its end shows
  // (CDE: the agents that reported each arm; the first at M is accepted, the others leave)
  const reporting = Array.isArray(d.reports);
  const counts = (reporting ? d.reports : d.votes) || [];
  const widest = Math.max(...arms.map((_, i) => `${counts[i] || 0} / ${M}`.length), 1);
  $("arms").style.setProperty("--count-chars", String(widest));
  $("arms-counted").textContent = reporting ? "Reports / M" : "Votes against / M";
  $("arms-caption").textContent =
    (reporting
      ? `Agents that reported each arm, one report per agent; the first arm at M = ${M} is accepted and the others leave`
      : `Distinct agents that voted against each arm this epoch; an arm leaves at M = ${M}`) +
    (d.params && d.params.tolerance
      ? (reporting ? ` (f = ${d.params.tolerance} may lie)` : ` (M + f, f = ${d.params.tolerance})`)
      : "") +
    ", the mark at the end of each bar.";
  fill(
    $("arms"),
    ...arms.map((name, index) => {
      const votes = ((reporting ? d.reports : d.votes) || [])[index] || 0;
      const out = outBy.get(index);
      let stateText = "in";
      let rowClass = "arm-in";
      if (!remaining.has(index)) {
        stateText = out ? `out #${out.order}` : "out";
        rowClass = "arm-out";
      } else if (index === bestIndex) {
        stateText = "best arm";
        rowClass = "arm-best";
      } else if (candidates.has(index)) {
        stateText = "candidate";
        rowClass = "arm-candidate";
      }
      const bar = el("div", { class: "track", "aria-hidden": "true" }, el("div", { class: "fill" }));
      bar.firstChild.style.setProperty("--frac", String(M > 0 ? Math.min(1, votes / M) : 0));
      return el(
        "tr",
        { class: rowClass, "data-arm": index },
        el("th", { scope: "row", class: "arm-name" }, el("span", { class: "arm-index", text: `${index}` }), el("span", { class: "name", text: name })),
        el("td", { class: "votes" }, el("div", { class: "votes-cell" }, bar, el("span", { class: "count", text: `${votes} / ${M}` }))),
        el("td", { class: "state" }, el("span", { class: "pill", text: stateText })),
      );
    }),
  );

  // eliminations, in order, with the time after the first one and the wall clock
  $("elim-empty").hidden = eliminations.length > 0;
  const first = eliminations.length ? eliminations[0].time : 0;
  fill(
    $("eliminations"),
    ...eliminations.map((e) =>
      el(
        "li",
        { "data-order": e.order },
        el("span", { class: "order", text: `#${e.order}` }),
        el("span", { class: "name", text: arms[e.arm] !== undefined ? arms[e.arm] : e.name }),
        el(
          "span",
          { class: "when" },
          `${e.votes} ${Array.isArray(d.reports) ? "reports" : "votes"} · `,
          e.order === 1 ? "first" : `+${duration(e.time - first)}`,
          " · ",
          el("time", { datetime: new Date(e.time).toISOString(), text: wallClock(e.time) }),
        ),
      ),
    ),
  );

  const crowd = Array.isArray(d.estimates);
  $("arms-card").hidden = crowd;
  renderCrowd(d, remaining, bestIndex);

  renderWaiting(state.waiting, crowd);
  renderFacts(d, M, arms.length);
  renderParams(d);
  renderCertificate(d);
  renderResult(d);

  const warnings = d.warnings || [];
  $("warnings-card").hidden = warnings.length === 0;
  fill($("warnings"), ...warnings.map((w) => el("li", { text: w })));
}

// LDP (d.estimates): each arm's mean and interval, the allocation, the leader's lift with its
// interval; every figure is the coordinator's, from the last publication of the reports
function fixed(x, signed) {
  if (typeof x !== "number" || !Number.isFinite(x)) return "–";
  return signed && x >= 0 ? `+${x.toFixed(3)}` : x.toFixed(3);
}

function rangeBar(lo, hi, at, scaleLo, zero) {
  // an interval [lo, hi] and a tick at `at`, on the scale [scaleLo, scaleLo + span]
  const span = scaleLo < 0 ? 2 : 1;
  const frac = (v) => String(Math.min(1, Math.max(0, (v - scaleLo) / span)));
  const bar = el("div", { class: "range", "aria-hidden": "true" }, el("div", { class: "span" }));
  bar.firstChild.style.setProperty("--lo", frac(lo));
  bar.firstChild.style.setProperty("--hi", frac(hi));
  if (zero) bar.append(el("div", { class: "zero" }));
  if (typeof at === "number") {
    const tick = el("div", { class: "tick" });
    tick.style.setProperty("--at", frac(at));
    bar.append(tick);
  }
  return bar;
}

function renderCrowd(d, remaining, bestIndex) {
  const card = $("crowd-card");
  card.hidden = !Array.isArray(d.estimates);
  if (card.hidden) return;
  const arms = d.arms || [];
  const allocation = d.allocation || [];
  $("crowd-note").textContent =
    `${num(d.reports_total)} reports published, each ${paramValue(d.dp_epsilon)}-locally private; ` +
    `at most ${num(d.reports_per_agent)} per device (ε = ${paramValue(d.user_privacy)} over everything it sends). ` +
    `The intervals hold together and at all times with probability at least 1 − δ.`;
  fill(
    $("estimates"),
    ...d.estimates.map((e) => {
      const [lo, hi] = e.ci;
      const out = !remaining.has(e.index);
      const rowClass = out ? "arm-out" : e.index === bestIndex ? "arm-best" : "arm-in";
      const weight = typeof allocation[e.index] === "number" ? allocation[e.index].toFixed(2) : "–";
      return el(
        "tr",
        { class: rowClass, "data-arm": e.index },
        el("th", { scope: "row", class: "arm-name" }, el("span", { class: "arm-index", text: `${e.index}` }), el("span", { class: "name", text: arms[e.index] !== undefined ? arms[e.index] : e.name })),
        el("td", { class: "ci" }, el("div", { class: "ci-cell" },
          rangeBar(lo, hi, e.mean, 0, false),
          el("span", { class: "ci-text" }, `${fixed(e.mean)} [${fixed(lo)}, ${fixed(hi)}]`,
            el("span", { class: "muted", text: ` · ${num(e.reports)} reports` })))),
        el("td", { class: "alloc", text: weight }),
        el("td", { class: "state" }, el("span", { class: "pill", text: out ? "out" : e.index === bestIndex ? "best arm" : "in" })),
      );
    }),
  );
  const lift = d.lift || [];
  const others = new Set(lift.map((l) => l.vs));
  const leader = d.estimates.find((e) => !others.has(e.index));
  const leaderName = leader ? (arms[leader.index] !== undefined ? arms[leader.index] : leader.name) : "–";
  $("lift-caption").textContent =
    `Lift of the leader ${leaderName}: its mean minus each other arm's, with the interval (the bar, on −1 to 1; the line is 0).`;
  fill(
    $("lift"),
    ...lift.map((l) => {
      const [lo, hi] = l.ci;
      return el(
        "tr",
        { "data-vs": l.vs },
        el("th", { scope: "row", class: "arm-name" }, el("span", { class: "arm-index", text: `${l.vs}` }), el("span", { class: "name", text: arms[l.vs] !== undefined ? arms[l.vs] : l.name })),
        el("td", { class: "ci" }, el("div", { class: "ci-cell" },
          rangeBar(lo, hi, l.mean, -1, true),
          el("span", { class: "ci-text", text: `${fixed(l.mean, true)} [${fixed(lo, true)}, ${fixed(hi, true)}]` }))),
      );
    }),
  );
}

function renderStatus(d, best, arms, remaining) {
  const box = $("status");
  let headline;
  const parts = [];
  if (d.status === "identified") {
    const arm = best && best.best_arm ? best.best_arm.name : arms[[...remaining][0]];
    headline = ["Identified: the best arm is ", el("strong", { class: "arm-ref", text: arm })];
  } else if (d.status === "tied") {
    const names = (best && best.candidates && best.candidates.length
      ? best.candidates.map((c) => c.name)
      : [...remaining].map((i) => arms[i]));
    headline = ["Tied between ", ...joinNames(names)];
    parts.push(el("p", { class: "explain", text: "No remaining arm can reach the threshold with the agents enrolled; more agents can reopen it." }));
    if (best && best.certified) parts.push(el("p", { class: "certified" }, el("span", { class: "label", text: "Certified: " }), best.certified));
  } else {
    headline = [`Exploring: ${remaining.size} of ${arms.length} arms remain`];
  }
  const text = [d.status, ...headline.map((h) => (h instanceof Node ? h.textContent : h)), ...parts.map((p) => p.textContent)].join("|");
  if (text === state.statusText) return; // announce changes only
  state.statusText = text;
  box.className = `status ${statusClass(d.status)}`;
  fill(box, el("p", { class: "headline" }, ...headline), ...parts);
}

function renderCertificate(d) {
  // what the experiment certifies with the agents enrolled (GET /v1/experiments/{id})
  const card = $("certificate-card");
  card.hidden = typeof d.certified_failure !== "number";
  if (card.hidden) return;
  const delta = d.params ? d.params.delta : undefined;
  const certifies = typeof delta === "number" && d.certified_failure <= delta;
  $("certified-failure").textContent = `≤ ${upperText(d.certified_failure)}`;
  const verdict = $("certified-verdict");
  verdict.textContent = typeof delta === "number" ? `${certifies ? "within" : "above"} δ = ${delta}` : "";
  verdict.className = `badge small ${certifies ? "st-identified" : "st-tied"}`;
  card.classList.toggle("uncertified", !certifies);
  const cap = d.certified_failure_at_max_agents;
  $("certified-scope").textContent =
    `with the ${num(d.certified_agents)} agents enrolled` +
    (typeof cap === "number" ? `; ≤ ${upperText(cap)} if as many agents enroll as the coordinator admits` : "");
  fill(
    $("certificate"),
    el("strong", { class: "cert-inline", text: `≤ ${upperText(d.certified_failure)}` }),
    ": ",
    d.certificate || "",
  );
  // CDE: e0, what holds for every prior, then its hit rate under a uniform prior, beside the
  // bound on a wrong answer
  const privacy = $("privacy");
  const e0 = d.certified_epsilon;
  privacy.hidden = typeof e0 !== "number";
  if (privacy.hidden) return;
  if (Array.isArray(d.estimates)) {
    // LDP: each device's local privacy over everything it sends, B x dp_epsilon, whatever the prior
    $("certified-epsilon").textContent = `ε = ${upperText(e0)}`;
    $("privacy-odds").textContent = d.privacy_certificate || "";
    $("privacy-uniform").textContent = "";
    return;
  }
  $("certified-epsilon").textContent = `ε₀ = ${upperText(e0)}`;
  $("privacy-odds").textContent =
    "Whatever it believed before, any adversary's odds about one agent's answer, hence its " +
    `rewards, are multiplied by at most e^ε₀ = ${upperText(Math.exp(e0))} by its report.`;
  const hit = d.hit_rate_uniform_prior;
  $("privacy-uniform").textContent = typeof hit === "number"
    ? `Hit rate under a uniform prior over which arm is best: ≤ ${upperText(hit)} (one ε-optimal ` +
      "arm), how often such an adversary names the agent's arm. Another prior gives another hit " +
      "rate (0.5 on one arm: 0.5 without any report), its odds still multiplied by at most e^ε₀."
    : "";
}

function joinNames(names) {
  const out = [];
  names.forEach((name, i) => {
    if (i > 0) out.push(i === names.length - 1 ? " and " : ", ");
    out.push(el("strong", { class: "arm-ref", text: name }));
  });
  return out;
}

// The counts shown are the last publication's: say how many counted messages the next one adds,
// so that a device's votes, counted but not yet published, do not look lost (0 votes).
function waitingText(w) {
  if (!w || typeof w.waiting !== "number") return "";
  const n = w.waiting;
  const batch = typeof w.publish_batch === "number" ? w.publish_batch : 0;
  const what = `${num(n)} ${n === 1 ? "message" : "messages"} waiting for the next publication`;
  if (batch <= 1) return what;
  return `${what}: the counts move ${num(batch)} counted messages at a time ` +
    "(an elimination at the next tick)";
}

function renderWaiting(w, crowd) {
  const text = waitingText(w);
  const note = $("arms-waiting");
  note.hidden = !text || crowd;
  note.textContent = text;
  $("crowd-waiting").hidden = !text || !crowd;
  $("crowd-waiting").textContent = text;
}

function renderFacts(d, M, K) {
  const dl = $("facts");
  dl.replaceChildren();
  fact(dl, "Agents enrolled", num(d.agents));
  if ((d.params && d.params.algorithm === "ce") || d.settled_agents) {
    fact(dl, "Settled agents (CE)", num(d.settled_agents));
  }
  fact(dl, "Messages (all epochs)", `${num(d.messages)}`, el("span", { class: "muted", text: ` · ${num(d.ignored_messages)} ignored` }));
  if (state.waiting && typeof state.waiting.waiting === "number") {
    fact(dl, "Waiting for publication", num(state.waiting.waiting));
  }
  const crowd = Array.isArray(d.estimates);
  if (crowd) {
    fact(dl, "Reports published", num(d.reports_total));
    fact(dl, "Reports per device (B)", num(d.reports_per_agent));
  }
  if (typeof d.epoch_messages === "number" && !crowd) {
    const bound = M * K - 1;
    fact(
      dl,
      "Messages this epoch",
      `${num(d.epoch_messages)} `,
      el("span", { class: "muted", text: `of the bound M·K − 1 = ${num(bound)}` }),
    );
  }
  fact(dl, "Epoch", num(d.epoch));
  fact(dl, "Version", num(d.version));
  if (!crowd) fact(dl, "Threshold M", num(M));
  fact(dl, "Created", typeof d.created_at === "number" ? dateTime.format(new Date(d.created_at)) : "–");
}

const PARAM_LABELS = {
  algorithm: "Algorithm",
  subroutine: "Subroutine",
  epsilon: "ε (epsilon)",
  delta: "δ (delta)",
  eta: "η (eta)",
  xi: "ξ (xi, CE vote drop)",
  dp_epsilon: "DP ε",
  beta: "β (beta, DP-MASE)",
  phi: "φ (phi, SER4 reset)",
  every_arm: "Every arm per activation",
  tolerance: "f (tolerance)",
  privacy: "P (privacy, CDE)",
  reports_per_agent: "B (reports per device, LDP)",
};

// Which parameters apply: xi to CE, the DP budget to DP-MASE and LDP, beta to DP-MASE, B to LDP,
// phi to SER4, P to CDE.
const APPLIES = {
  xi: (p) => p.algorithm === "ce",
  dp_epsilon: (p) => p.algorithm === "dp-mase" || p.algorithm === "ldp",
  reports_per_agent: (p) => p.algorithm === "ldp",
  eta: (p) => p.algorithm !== "ldp", // LDP: no agent learns, so no local run, no vote
  subroutine: (p) => p.algorithm !== "ldp",
  every_arm: (p) => p.algorithm !== "ldp",
  beta: (p) => p.algorithm === "dp-mase",
  phi: (p) => p.subroutine === "ser4",
  privacy: (p) => p.algorithm === "cde",
};

function renderParams(d) {
  const dl = $("params");
  dl.replaceChildren();
  const all = d.params || {};
  const params = Object.fromEntries(
    Object.entries(all).filter(([k]) => !APPLIES[k] || APPLIES[k](all)));
  const keys = Object.keys(PARAM_LABELS).filter((k) => k in params)
    .concat(Object.keys(params).filter((k) => !(k in PARAM_LABELS)).sort());
  for (const key of keys) fact(dl, PARAM_LABELS[key] || key, paramValue(params[key]));
  fact(dl, "σ (sigma)", d.sigma === null || d.sigma === undefined ? "rewards in [0, 1]" : String(d.sigma));
}

// The result the coordinator kept at the decision: it stays after the load generator stops.
function renderResult(d) {
  const r = d.result;
  const card = $("result-card");
  card.hidden = !r || typeof r !== "object";
  if (card.hidden) return;
  const dl = $("result");
  dl.replaceChildren();
  const names = (refs) => (refs || []).map((c) => c.name).join(", ");
  if (r.status === "identified") fact(dl, "Best arm", r.best_arm ? r.best_arm.name : "–");
  else fact(dl, "Tied between", names(r.candidates));
  fact(dl, "Decided", typeof r.decided_at === "number" ? dateTime.format(new Date(r.decided_at)) : "–");
  // timed from the start of the epoch that decided (a reset starts the run again), not from the
  // creation, which the result's duration_ms counts from
  const reset = typeof r.epoch === "number" && r.epoch > 0 && typeof d.epoch_started_at === "number";
  const took = reset && typeof r.decided_at === "number" ? r.decided_at - d.epoch_started_at : r.duration_ms;
  fact(dl, "After", typeof took === "number" ? duration(took) : "–",
    el("span", { class: "muted", text: reset ? ` since epoch ${r.epoch} began` : " since the creation" }));
  fact(dl, "Agents", num(r.agents));
  fact(dl, "Messages", num(r.messages));
  const counted = Array.isArray(r.reports) ? r.reports : r.votes || [];
  fact(dl, Array.isArray(r.reports) ? "Reports" : "Votes", num(counted.reduce((a, b) => a + b, 0)));
  const lg = r.load_generator;
  if (lg && typeof lg === "object") {
    fact(dl, "Activations", num(lg.activations), el("span", { class: "muted", text: " (load generator)" }));
    const rate = typeof lg.activations_per_second === "number" ? decimal.format(lg.activations_per_second) : "–";
    fact(dl, "Activations / s", rate);
  }
}

// what changes with the clock alone: the charts, the load generator's age
function renderTicking() {
  const d = state.detail;
  if (!d) return;
  renderLoadGenerator(d.load_generator);
  renderCharts(d);
}

function renderLoadGenerator(lg) {
  const card = $("loadgen-card");
  if (!lg || typeof lg !== "object") {
    card.hidden = true;
    return;
  }
  card.hidden = false;
  const dl = $("loadgen");
  dl.replaceChildren();
  const rate = typeof lg.activations_per_second === "number" && Number.isFinite(lg.activations_per_second)
    ? decimal.format(lg.activations_per_second) : "–";
  fact(dl, "Activations this run", num(lg.activations));
  fact(dl, "Activations / s", rate);
  fact(dl, "Delivered", num(lg.delivered));
  fact(dl, "Backlog", num(lg.backlog));
  fact(dl, "Epoch", num(lg.epoch));
  fact(dl, "Run", paramValue(lg.run));
  fact(dl, "Host", paramValue(lg.host));
  if (typeof lg.started_at === "number") fact(dl, "Started", wallClock(lg.started_at));
  if (typeof lg.updated_at === "number") {
    const stale = Date.now() - lg.updated_at > 15000;
    fact(dl, "Updated", `${wallClock(lg.updated_at)} (${ago(lg.updated_at)})`,
      stale ? el("span", { class: "stale", text: " · not updating" }) : null);
  }
}

// -- charts ---------------------------------------------------------------------------------------
const W = 360;
const H = 150;
const PAD = { left: 34, right: 10, top: 10, bottom: 24 };

function frame(title, description, x0, x1) {
  const root = svg("svg", {
    viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": description, preserveAspectRatio: "xMidYMid meet",
    "data-x0": Math.round(x0), "data-x1": Math.round(x1), // the time axis, unix ms
  });
  root.append(svg("title", {}, title));
  root.append(svg("rect", {
    x: PAD.left, y: PAD.top, width: W - PAD.left - PAD.right, height: H - PAD.top - PAD.bottom, class: "plot",
  }));
  return root;
}

function axes(root, x0, x1, yMax, yLabel) {
  const bottom = H - PAD.bottom;
  const y = (v) => bottom - (v / yMax) * (bottom - PAD.top);
  const ticks = yMax <= 6
    ? Array.from({ length: yMax + 1 }, (_, i) => i)
    : [0, Math.round(yMax / 2), yMax];
  for (const v of ticks) {
    root.append(svg("line", { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: "grid" }));
    root.append(svg("text", { x: PAD.left - 5, y: y(v) + 3.5, class: "tick", "text-anchor": "end" }, String(v)));
  }
  root.append(svg("text", { x: PAD.left, y: H - 6, class: "tick", "text-anchor": "start" }, wallClock(x0)));
  root.append(svg("text", { x: W - PAD.right, y: H - 6, class: "tick", "text-anchor": "end" }, wallClock(x1)));
  root.append(svg("text", { x: (PAD.left + W - PAD.right) / 2, y: H - 6, class: "tick", "text-anchor": "middle" }, yLabel));
  return y;
}

function xScale(x0, x1) {
  const span = Math.max(1, x1 - x0);
  return (t) => PAD.left + ((t - x0) / span) * (W - PAD.left - PAD.right);
}

function renderCharts(d) {
  const now = Date.now();
  const K = (d.arms || []).length;
  const eliminations = [...(d.eliminations || [])].sort((a, b) => a.order - b.order);
  const ended = d.status !== "exploring";

  // remaining arms: a step down at each elimination, from the epoch's start to the decision
  // (a tie's is the publication that showed it, after the last elimination), or to now
  const decided = ended && d.result && typeof d.result.decided_at === "number" ? d.result.decided_at : null;
  const start = typeof d.epoch_started_at === "number" ? d.epoch_started_at : d.created_at;
  let x0 = Math.min(start || now, eliminations.length ? eliminations[0].time : now);
  let x1 = decided !== null ? decided
    : ended && eliminations.length ? eliminations[eliminations.length - 1].time : now;
  if (x1 - x0 < 1000) {
    if (decided !== null) x0 = x1 - 1000; // a second at least, ending at the decision
    else x1 = x0 + 1000;
  }
  x0 -= (x1 - x0) * 0.04;
  if (decided === null) x1 += (x1 - x0) * 0.04; // a decided experiment's axis ends at it
  const remainingNow = (d.remaining_arms || []).length;
  const chart1 = frame(
    "Arms remaining over time",
    `Arms remaining: ${K} at the start of the epoch, ${remainingNow} now, after ${eliminations.length} eliminations.`,
    x0, x1,
  );
  const y1 = axes(chart1, x0, x1, Math.max(1, K), "arms remaining");
  const x = xScale(x0, x1);
  let level = K;
  let path = `M${x(x0).toFixed(1)},${y1(level).toFixed(1)}`;
  for (const e of eliminations) {
    path += ` H${x(e.time).toFixed(1)} V${y1(level - 1).toFixed(1)}`;
    level -= 1;
  }
  path += ` H${x(x1).toFixed(1)}`;
  chart1.append(svg("path", { d: path, class: "line step" }));
  for (const e of eliminations) {
    chart1.append(svg("circle", { cx: x(e.time).toFixed(1), cy: y1(K - e.order).toFixed(1), r: 2.5, class: "dot" }));
  }
  fill($("chart-remaining"), chart1);

  // total distinct votes (CDE: reports) over this epoch, as the coordinator published them
  const samples = (d.votes_history || []).map(([t, votes]) => ({ t, votes }));
  const maxVotes = Math.max(1, ...samples.map((s) => s.votes));
  const last = samples.length ? samples[samples.length - 1].votes : 0;
  const what = Array.isArray(d.reports) ? "reports" : "votes";
  const s0 = samples.length ? Math.min(samples[0].t, x0) : x0;
  const s1 = decided !== null ? decided : Math.max(now, s0 + 1000);
  const chart2 = frame(
    `Distinct ${what} over time`,
    `Distinct ${what}, all arms, as the coordinator published them this epoch: ${last} at the last.`,
    s0, s1,
  );
  const y2 = axes(chart2, s0, s1, niceCeil(maxVotes), what);
  const x2 = xScale(s0, s1);
  if (samples.length) {
    let p = "";
    samples.forEach((s, i) => {
      p += `${i ? " H" + x2(s.t).toFixed(1) + " V" : "M" + x2(s.t).toFixed(1) + ","}${y2(s.votes).toFixed(1)}`;
    });
    p += ` H${x2(s1).toFixed(1)}`;
    chart2.append(svg("path", { d: p, class: "line votes" }));
  }
  fill($("chart-votes"), chart2);
}

function niceCeil(v) {
  if (v <= 4) return Math.max(1, Math.ceil(v));
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// -- the agents' panel: the one view that needs a key (viewer or above) --------------------------
async function loadAgents(id) {
  if (state.agentsInflight || !state.key) return;
  state.agentsInflight = true;
  const path = `${API}/${encodeURIComponent(id)}/agents?limit=100`;
  try {
    const response = await fetch(path, {
      headers: { Accept: "application/json", Authorization: `Bearer ${state.key}` },
      cache: "no-store",
      credentials: "omit",
      signal: AbortSignal.timeout(REQUEST_TIMEOUT),
    });
    const body = await response.json().catch(() => ({}));
    if (id !== selectedId()) return;
    if (!response.ok) {
      // 401: no such key (or revoked); 403: its role is below viewer. The coordinator says which.
      renderAgents(null, `${response.status}: ${body.detail || response.statusText}`);
      if (response.status === 401) forgetKey(false);
      return;
    }
    renderAgents(body.agents || [], "");
  } catch (error) {
    renderAgents(null, `agents not read: ${error.message || error}`);
  } finally {
    state.agentsInflight = false;
  }
}

function renderAgents(agents, problem) {
  const table = $("agents-table");
  if (agents === null) {
    $("admin-status").textContent = problem;
    table.hidden = true;
    return;
  }
  const arms = state.detail ? state.detail.arms : [];
  $("admin-status").textContent = `${agents.length} agent(s) shown.`;
  fill($("agents"), ...agents.map((a) => el("tr", {},
    el("td", { text: a.agent_id }),
    el("td", { text: a.voted_against.map((i) => arms[i] ?? i).join(", ") || "–" }),
    el("td", { text: num(a.resets) }),
    el("td", { text: a.revoked_at ? wallClock(a.revoked_at) : "–" }))));
  table.hidden = false;
}

function forgetKey(clearStatus) {
  state.key = "";
  $("key-input").value = "";
  $("key-forget").hidden = true;
  $("agents-table").hidden = true;
  fill($("agents"));
  if (clearStatus) $("admin-status").textContent = "";
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault(); // nothing is sent anywhere but the coordinator's API, by fetch
  state.key = $("key-input").value.trim();
  $("key-input").value = "";
  $("key-forget").hidden = !state.key;
  const id = selectedId();
  if (state.key && id) loadAgents(id);
});

$("key-forget").addEventListener("click", () => forgetKey(true));

// -- wiring ---------------------------------------------------------------------------------------
window.addEventListener("hashchange", () => {
  $("agents-table").hidden = true; // another experiment's agents: read again at the next poll
  $("admin-status").textContent = "";
  state.detail = null;
  state.best = null;
  state.renderedKey = "";
  state.statusText = "";
  state.listKey = "";
  $("experiment").hidden = true;
  $("placeholder").hidden = false;
  $("placeholder").textContent = "Loading…";
  poll();
});

document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "hidden") {
    clearTimeout(state.timer);
    state.timer = 0;
    showConnection("paused");
  } else {
    poll();
  }
});

poll();
