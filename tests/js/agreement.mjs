// Replays tests/test_js_agreement.py's traces through the built SDK (argv[2]: dist/agent.js):
// reads {cases: [{spec, draws, trace}]} on stdin, prints [{outputs, final, unused, error}] on
// stdout; or {calls: [[name, ...args]]}, prints each exported function's value on those args; or
// {draws: [[method, ...args]]}, prints what cryptoDraws()'s method returns (or the error it throws).
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const sdk = await import(pathToFileURL(process.argv[2]).href);
const { cases, calls, draws } = JSON.parse(readFileSync(0, "utf8"));

function run({ spec, draws: records, trace }) {
  const draws = sdk.replayDraws(records);
  let agent = new sdk.LocalAgent(spec, draws);
  const outputs = [];
  try {
    for (const step of trace) {
      if (step.op === "select") {
        outputs.push({ arms: agent.select() });
      } else if (step.op === "observe") {
        const votes = agent.observe(step.arms, step.rewards);
        outputs.push({ votes, local: agent.localArms, report: agent.report, done: agent.done });
      } else if (step.op === "sync") {
        const votes = agent.sync(step.remaining, step.epoch);
        outputs.push({ votes, local: agent.localArms, done: agent.done });
      } else if (step.op === "wants_reset") {
        outputs.push({ reset: agent.wantsReset() });
      } else if (step.op === "reload") {
        // the page reloads: the state it saved is the Python agent's, read back here
        const own = agent.toState();
        agent = sdk.LocalAgent.fromState(spec, JSON.parse(JSON.stringify(step.state)), draws);
        outputs.push({ state: own });
      } else {
        throw new Error(`unknown op ${step.op}`);
      }
    }
    return { outputs, final: agent.toState(), unused: draws.remaining(), error: null };
  } catch (err) {
    return { outputs, final: null, unused: draws.remaining(), error: String(err) };
  }
}

function draw(source, [method, ...args]) {
  try {
    return source[method](...args);
  } catch (err) {
    return { error: `${err.name}: ${err.message}` };
  }
}

const out = calls
  ? calls.map(([name, ...args]) => sdk[name](...args))
  : draws
    ? draws.map((call) => draw(sdk.cryptoDraws(), call))
    : cases.map(run);
process.stdout.write(JSON.stringify(out));
