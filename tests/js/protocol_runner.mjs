// Replays tests/device_scenarios/*.json through the built SDK's DeviceProtocol (argv[2]:
// dist/agent.js), as tests/services/test_device_agreement.py does through agent/protocol.py: reads
// {scenarios: [scenario]} on stdin, prints per scenario the list of its steps' outcomes
// ({sent, returns, record, counters, view, lost}) on stdout.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const sdk = await import(pathToFileURL(process.argv[2]).href);
const { scenarios } = JSON.parse(readFileSync(0, "utf8"));
const RECONCILE_MS = 30_000;

/** Each exchange driven with the step's recorded replies; the messages it sent. */
function drive(exchange, replies, sent) {
  let step = exchange.next();
  while (!step.done) {
    const m = step.value;
    sent.push([m.method, m.path, m.body]);
    if (sent.length > replies.length) throw new Error(`no recorded reply for message ${sent.length}`);
    const reply = replies[sent.length - 1];
    if (reply !== null && typeof reply === "object" && "refused" in reply) {
      step = exchange.throw(new sdk.CoordinatorError(reply.refused, "recorded refusal"));
    } else {
      step = exchange.next(reply);
    }
  }
  return step.value;
}

async function replay(scenario) {
  const view = await sdk.GlobalView.fetch({ experiment: async () => scenario.state }, "x");
  const saved = { ...scenario.record, format: 1, experiment: "x", created_at: view.createdAt };
  const record = sdk.AgentRecord.fromSaved(saved);
  let lost = 0;
  const hooks = { persist: () => {}, lostEpoch: () => (lost += 1), jitter: () => 0.5 };
  const protocol = new sdk.DeviceProtocol(view, record, hooks, RECONCILE_MS, scenario.next_check * 1000);
  const outcomes = [];
  for (const step of scenario.steps) {
    const sent = [];
    let returns = null;
    try {
      const replies = step.replies ?? [];
      const exchanges = {
        resend_pending: () => protocol.resendPending(),
        deliver_decided: () => protocol.deliverDecided(),
        reconcile: () => protocol.reconcile(step.now * 1000),
        refresh: () => protocol.refresh(),
        settle: () => protocol.settle(step.done, step.local_epoch),
        reset: () => protocol.reset(),
      };
      if (step.do === "decide") protocol.decide(step.votes);
      else if (step.do === "forget_lost_epoch") returns = protocol.forgetLostEpoch();
      else if (step.do === "decided") returns = record.decided(view.epoch).sort((a, b) => a - b);
      else returns = drive(exchanges[step.do](), replies, sent) ?? null;
    } catch (err) {
      if (!(err instanceof sdk.CoordinatorError)) throw err;
      returns = { error: err.status };
    }
    const own = record.toSaved("x", view.createdAt, undefined);
    outcomes.push({
      sent,
      returns,
      record: { acknowledged: own.acknowledged, pending: own.pending, epoch_starts: own.epoch_starts, report: own.report ?? null },
      counters: {
        votes_sent: protocol.votesSent,
        votes_resent: protocol.votesResent,
        reports_sent: protocol.reportsSent,
        settled_sent: protocol.settledSent,
        resets_limited: protocol.resetsLimited,
        checks: protocol.checks,
      },
      view: { epoch: view.epoch, version: view.version, remaining: Array.from(view.remaining).sort((a, b) => a - b), replaced: view.replaced, losses: view.losses },
      lost,
    });
  }
  return outcomes;
}

const results = [];
for (const scenario of scenarios) results.push(await replay(scenario));
process.stdout.write(JSON.stringify(results));
