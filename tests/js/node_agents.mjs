// Runs dexp agents under Node with the built SDK (tests/services/test_js_sdk.py): reads a JSON job
// on stdin {sdk, coordinator, experiment, tickets (or null: resume from the state files), dir,
// agents, rates, seed, stopAfterVotes (votes and reports
// sent before closing, or null: until every agent is done)},
// activates the agents uniformly at random, draws Bernoulli rewards with the rates, and prints
// what each agent says of itself and what the shared follower did.
import { readFileSync } from "node:fs";
import { setTimeout as pause } from "node:timers/promises";
import { pathToFileURL } from "node:url";

const job = JSON.parse(readFileSync(0, "utf8"));

/** mulberry32: a seeded generator, so that a run's rewards and activations repeat. */
function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The SDK's Draws from a seeded generator (a page uses crypto: this is for a repeatable test). */
function seededDraws(seed) {
  const random = seeded(seed);
  return {
    random,
    randoms: (count) => Array.from({ length: count }, random),
    integer: (n) => Math.floor(random() * n),
    permutation(n) {
      const order = Array.from({ length: n }, (_, i) => i);
      for (let i = n - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [order[i], order[j]] = [order[j], order[i]];
      }
      return order;
    },
    laplace: (scale, count) =>
      Array.from({ length: count }, () => {
        const u = random() - 0.5;
        return -scale * Math.sign(u) * Math.log(1 - 2 * Math.abs(u));
      }),
  };
}

const world = seeded(job.seed);
const sdk = await import(pathToFileURL(job.sdk).href);
const agents = [];
for (let i = 0; i < job.agents; i++) {
  agents.push(
    await sdk.enroll({
      coordinator: job.coordinator,
      experiment: job.experiment,
      ticket: job.tickets ? job.tickets[i] : undefined,
      stateFile: `${job.dir}/agent-${i}.json`,
      pollMs: 500,
      draws: seededDraws(job.seed * 1000 + i),
    }),
  );
}
let activations = 0;
const enough = job.stopAfterVotes ?? Infinity;
const sent = () => agents.reduce((n, a) => n + a.votesSent + a.reportsSent, 0);
while (sent() < enough && !agents.every((a) => a.done)) {
  const agent = agents[Math.floor(world() * agents.length)];
  activations += 1;
  if (activations % 64 === 0) await pause(0); // let the event stream in
  if (agent.done) continue;
  const arms = agent.choose();
  if (arms.length === 0 || agent.settled) continue;
  await agent.observe(arms, arms.map((arm) => Number(world() < job.rates[arm])));
}
const report = agents.map((a) => ({
  agentId: a.agentId,
  resumed: a.resumed,
  status: a.status,
  bestArm: a.bestArm,
  votesSent: a.votesSent,
  votesResent: a.votesResent,
  reportsSent: a.reportsSent,
  settledSent: a.settledSent,
  epoch: a.epoch,
}));
const follower = sdk.shareFollower(job.coordinator, job.experiment);
const seen = { streams: follower.follower.streams, events: follower.follower.events, subscribers: follower.follower.subscribers };
follower.release();
await Promise.all(agents.map((a) => a.close()));
process.stdout.write(JSON.stringify({ version: sdk.VERSION, activations, agents: report, follower: seen }));
