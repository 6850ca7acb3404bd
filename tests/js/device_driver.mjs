// Drives agents of the built SDK (argv[2]: dist/agent.js) under Node, one JSON command per line
// on stdin, one JSON answer per line on stdout, so that a test can act on the coordinator and
// Redis between two steps of an agent (tests/services/test_js_sdk.py). Commands:
//   {op: "enroll", name, options}          -> the agent's view of itself, or {error, message}
//   {op: "play", name, rewards, activations, until}  rewards: one per arm (deterministic); stops
//        after `activations` (an activation of a settled agent waits 50 ms for a change instead
//        of playing), or once `until` holds ("settled", or {votesSent: n}: n votes decided)
//   {op: "lose", name}                      -> LDP: the next report's reply is lost (it counted)
//   {op: "wait", name, timeoutMs}           -> waitForChange's answer and the agent's view
//   {op: "choose", name}                    -> the arms, or {error, message}
//   {op: "refresh", name}                   -> reads the experiment's state now
//   {op: "watch", name}                     -> counts its onChange calls (and the statuses seen)
//   {op: "watched", name}                   -> those counts
//   {op: "flush", name}                     -> once its work is answered and saved: its view
//   {op: "close", name}
//   {op: "follower", coordinator, experiment}  -> the shared follower's counters
//   {op: "parse", lines}                    -> SSEParser's events and retry
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const sdk = await import(pathToFileURL(process.argv[2]).href);
const agents = new Map();
const watching = new Map();

function view(agent) {
  return {
    agentId: agent.agentId,
    resumed: agent.resumed,
    status: agent.status,
    remaining: agent.remaining,
    epoch: agent.epoch,
    settled: agent.settled,
    votesSent: agent.votesSent,
    votesResent: agent.votesResent,
    reportsSent: agent.reportsSent,
    checks: agent.checks,
    sent: agent.sent, // LDP (PrivateAgent): reports sent, those left, the replies' outcomes
    reportsLeft: agent.reportsLeft,
    outcomes: agent.protocol?.outcomes,
  };
}

function failure(err) {
  return { error: err.name, message: err.message, status: err.status ?? null };
}

const commands = {
  async enroll({ name, options }) {
    const agent = await sdk.enroll(options);
    agents.set(name, agent);
    return view(agent);
  },
  async play({ name, rewards, activations, until }) {
    const agent = agents.get(name);
    let played = 0;
    for (let step = 0; step < (activations ?? Infinity); step++) {
      if (until === "settled" && agent.settled) break;
      if (until?.votesSent !== undefined && agent.votesSent >= until.votesSent) break;
      const arms = agent.choose();
      if (arms.length === 0 || agent.settled) {
        if (until === "settled") break;
        await agent.waitForChange(50); // an activation with nothing to learn
        continue;
      }
      await agent.observe(arms, arms.map((arm) => rewards[arm]));
      played += 1;
      if (played % 64 === 0) await new Promise((resolve) => setTimeout(resolve, 0));
    }
    return { played, ...view(agent) };
  },
  async lose({ name }) {
    // LDP: the next report reaches the coordinator, its reply is lost on the way back
    const agent = agents.get(name);
    const inner = agent.transport;
    agent.transport = async (message) => {
      await inner(message);
      agent.transport = inner;
      throw new Error("the reply was lost");
    };
    return {};
  },
  async wait({ name, timeoutMs }) {
    const agent = agents.get(name);
    const changed = await agent.waitForChange(timeoutMs);
    return { changed, ...view(agent) };
  },
  async refresh({ name }) {
    await agents.get(name).refresh();
    return view(agents.get(name));
  },
  async choose({ name }) {
    return { arms: agents.get(name).choose() };
  },
  async watch({ name }) {
    const seen = [];
    watching.set(name, seen);
    agents.get(name).onChange((agent) => seen.push(agent.status));
    return {};
  },
  async watched({ name }) {
    return { statuses: watching.get(name) };
  },
  async flush({ name }) {
    await agents.get(name).flush();
    return view(agents.get(name));
  },
  async close({ name }) {
    await agents.get(name).close();
    agents.delete(name);
    return {};
  },
  async follower({ coordinator, experiment }) {
    const { follower, release } = sdk.shareFollower(coordinator, experiment);
    const counters = {
      mode: follower.mode,
      streams: follower.streams,
      events: follower.events,
      polls: follower.polls,
      notModified: follower.notModified,
      refused: follower.refused,
      failures: follower.failures,
      subscribers: follower.subscribers,
    };
    release();
    return counters;
  },
  async parse({ lines }) {
    const parser = new sdk.SSEParser();
    const events = lines.map((line) => parser.feed(line)).filter((event) => event !== null);
    return { events, retry: parser.retry };
  },
};

for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line);
  let answer;
  try {
    answer = await commands[command.op](command);
  } catch (err) {
    answer = failure(err);
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
for (const agent of agents.values()) await agent.close();
