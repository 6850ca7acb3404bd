// src/draws.ts
function platformCrypto() {
  const crypto = globalThis.crypto;
  if (crypto === void 0 || typeof crypto.getRandomValues !== "function") {
    throw new Error("@dexp/agent needs globalThis.crypto.getRandomValues (browsers, Node >= 19)");
  }
  return crypto;
}
function cryptoDraws() {
  const crypto = platformCrypto();
  const words = new Uint32Array(2);
  const uniform = () => {
    crypto.getRandomValues(words);
    return ((words[0] >>> 5) * 67108864 + (words[1] >>> 6)) / 9007199254740992;
  };
  const integer = (n) => {
    if (!(Number.isInteger(n) && n >= 1 && n <= 4294967296)) {
      throw new RangeError(`integer(n) needs an integer n in [1, 2^32], got ${n}`);
    }
    const limit = 4294967296 - 4294967296 % n;
    const word = new Uint32Array(1);
    for (; ; ) {
      crypto.getRandomValues(word);
      if (word[0] < limit) return word[0] % n;
    }
  };
  const draws = {
    random: uniform,
    randoms: (count) => Array.from({ length: count }, uniform),
    integer,
    permutation: (n) => {
      const out = Array.from({ length: n }, (_, i) => i);
      for (let i = n - 1; i > 0; i--) {
        const j = integer(i + 1);
        [out[i], out[j]] = [out[j], out[i]];
      }
      return out;
    },
    laplace: (scale, count) => Array.from({ length: count }, () => {
      let u = uniform() - 0.5;
      while (u === -0.5) u = uniform() - 0.5;
      return -scale * Math.sign(u) * Math.log(1 - 2 * Math.abs(u));
    })
  };
  return draws;
}
function replayDraws(records) {
  let next = 0;
  const take = (kind, what) => {
    const record = records[next];
    if (record === void 0 || record.kind !== kind) {
      throw new Error(`draw ${next}: asked ${what}, recorded ${JSON.stringify(record ?? null)}`);
    }
    next += 1;
    return record;
  };
  const sized = (n, got, what) => {
    if (n !== got) throw new Error(`draw ${next - 1}: asked ${what}, recorded size ${got}`);
  };
  return {
    random: () => take("random", "random()").value,
    randoms: (count) => {
      const r = take("randoms", `randoms(${count})`);
      sized(count, r.n, `randoms(${count})`);
      return r.values.slice();
    },
    integer: (n) => {
      const r = take("integer", `integer(${n})`);
      sized(n, r.n, `integer(${n})`);
      return r.value;
    },
    permutation: (n) => {
      const r = take("permutation", `permutation(${n})`);
      sized(n, r.n, `permutation(${n})`);
      return r.values.slice();
    },
    laplace: (scale, count) => {
      const r = take("laplace", `laplace(${scale}, ${count})`);
      sized(count, r.values.length, `laplace(${scale}, ${count})`);
      if (r.scale !== scale) throw new Error(`draw ${next - 1}: laplace scale ${scale} != ${r.scale}`);
      return r.values.slice();
    },
    remaining: () => records.length - next
  };
}
function inertDraws() {
  return {
    random: () => 0,
    randoms: (count) => new Array(count).fill(0),
    integer: () => 0,
    permutation: (n) => Array.from({ length: n }, (_, i) => i),
    laplace: (_scale, count) => new Array(count).fill(0)
  };
}

// src/radius.ts
function eliminationRadius(rounds, nArms, confidence, sigma) {
  const logTerm = Math.log(4 * nArms * rounds * rounds / confidence);
  if (sigma === null) return Math.sqrt(logTerm / (2 * rounds));
  return sigma * Math.sqrt(2 * logTerm / rounds);
}
var STITCH_SCALE = 1.7;
var STITCH_LOGLOG = 0.72;
var STITCH_ALPHA = 5.2;
function stitchedRadius(pulls, nArms, confidence, sigma) {
  const scale = sigma === null ? 0.5 : sigma;
  const alpha = confidence / (2 * nArms);
  const n = pulls;
  const inner = Math.log(Math.log(2 * n)) + STITCH_LOGLOG * Math.log(STITCH_ALPHA / alpha);
  return STITCH_SCALE * scale * Math.sqrt(inner / n);
}
function dpEpochLength(epoch, nArms, beta, dpEpsilon) {
  const epsE = 2 ** -epoch;
  const e2 = epoch * epoch;
  return Math.ceil(
    Math.max(
      32 * Math.log(8 * nArms * e2 / beta) / epsE ** 2,
      8 * Math.log(4 * nArms * e2 / beta) / (dpEpsilon * epsE)
    )
  );
}
function dpEliminationGap(epoch, rounds, nArms, beta, dpEpsilon) {
  const e2 = epoch * epoch;
  const h = Math.sqrt(Math.log(8 * nArms * e2 / beta) / (2 * rounds));
  const c = Math.log(4 * nArms * e2 / beta) / (dpEpsilon * rounds);
  return 2 * (h + c);
}
function samplesPerArm(epsilon, eta, nArms, sigma) {
  const scale = sigma === null ? 1 : 4 * sigma * sigma;
  return Math.max(1, Math.ceil(scale * Math.log((nArms - 1) / eta) / (epsilon * epsilon) - 1e-9));
}
function lucbRadius(pulls, time, nArms, confidence, sigma) {
  const logTerm = Math.log(5 * nArms * time ** 4 / (4 * confidence));
  if (sigma === null) return Math.sqrt(logTerm / (2 * pulls));
  return sigma * Math.sqrt(2 * logTerm / pulls);
}
var KL_ITERATIONS = 30;
var KL_TOLERANCE = 1e-9;
var KL_EDGE = 1e-12;
var KL_LUCB_ALPHA = 1.1;
var KL_LUCB_K1 = 11;
function klBernoulli(p, q) {
  let out = 0;
  if (p > 0) out += q > 0 ? p * Math.log(p / q) : Infinity;
  if (p < 1) out += q < 1 ? (1 - p) * Math.log((1 - p) / (1 - q)) : Infinity;
  return out;
}
function newton(mean, pulls, level, q) {
  for (let i = 0; i < KL_ITERATIONS; i++) {
    const g = pulls * klBernoulli(mean, q) - level;
    if (g <= KL_TOLERANCE) break;
    q -= g / (pulls * (q - mean) / (q * (1 - q)));
  }
  return q;
}
function klUpper(mean, pulls, level) {
  mean = Math.min(Math.max(mean, 0), 1);
  if (mean >= 1) return 1;
  if (mean <= 0) return -Math.expm1(-level / pulls);
  return newton(mean, pulls, level, Math.min(mean + Math.sqrt(level / (2 * pulls)), 1 - KL_EDGE));
}
function klLower(mean, pulls, level) {
  mean = Math.min(Math.max(mean, 0), 1);
  if (mean <= 0) return 0;
  if (mean >= 1) return Math.exp(-level / pulls);
  return newton(mean, pulls, level, Math.max(mean - Math.sqrt(level / (2 * pulls)), KL_EDGE));
}
function eliminationLevel(rounds, nArms, confidence) {
  return Math.log(4 * nArms * rounds * rounds / confidence);
}
function klLucbLevel(time, nArms, confidence) {
  return Math.log(KL_LUCB_K1 * nArms * time ** KL_LUCB_ALPHA / confidence);
}

// src/subroutines.ts
var DEFAULT_PARAMS = {
  epsilon: 0.25,
  confidence: 0.9,
  sigma: null,
  every_arm: false,
  phi: 0,
  dp_epsilon: 0.1
};
function checkParams(params) {
  const fail = (name, value, why) => {
    throw new RangeError(`${name}=${String(value)}: ${why}`);
  };
  if (!(params.epsilon > 0)) fail("epsilon", params.epsilon, "must be > 0");
  if (!(params.confidence > 0 && params.confidence < 1)) {
    fail("confidence", params.confidence, "must be in (0, 1)");
  }
  if (params.sigma !== null && !(params.sigma > 0)) fail("sigma", params.sigma, "must be > 0");
  if (!(params.phi >= 0 && params.phi < 1)) fail("phi", params.phi, "must be in [0, 1)");
  if (!(params.dp_epsilon > 0)) fail("dp_epsilon", params.dp_epsilon, "must be > 0");
  const pulls = params.pulls;
  if (pulls !== void 0 && pulls !== null && !(Number.isInteger(pulls) && pulls >= 1)) {
    fail("pulls", pulls, "must be an integer >= 1");
  }
  return params;
}
function sortedSet(arms) {
  return Array.from(new Set(arms)).sort((a, b) => a - b);
}
var ArmSelection = class {
  constructor(nArms, params, draws) {
    this.nArms = nArms;
    this.params = params;
    this.draws = draws;
    this.active = [];
    this.initialArms = 0;
    this.counts = [];
    this.sums = [];
    if (!(Number.isInteger(nArms) && nArms >= 2)) {
      throw new RangeError(`arms=${nArms}: need at least 2 arms`);
    }
    checkParams(params);
    this.restart(Array.from({ length: nArms }, (_, i) => i));
  }
  /** Drop arms that left the global set; the caller restarts instead if none would remain. */
  discard(arms) {
    const gone = new Set(arms);
    this.active = this.active.filter((a) => !gone.has(a));
    return this.afterDiscard();
  }
  afterDiscard() {
    return [];
  }
  /** Fresh statistics on `arms`. */
  restart(arms) {
    this.active = sortedSet(arms);
    if (this.active.length === 0) throw new RangeError("a local set needs at least one arm");
    this.initialArms = this.active.length;
    this.counts = new Array(this.nArms).fill(0);
    this.sums = new Array(this.nArms).fill(0);
    this.onRestart();
  }
  get done() {
    return this.active.length <= 1;
  }
  means() {
    return this.counts.map((c, a) => c > 0 ? this.sums[a] / Math.max(c, 1) : 0);
  }
  record(arms, rewards) {
    if (arms.length !== rewards.length) {
      throw new RangeError(`${arms.length} arms but ${rewards.length} rewards`);
    }
    arms.forEach((a, i) => {
      if (!(Number.isInteger(a) && a >= 0 && a < this.nArms)) {
        throw new RangeError(`arm ${a} is not in 0..${this.nArms - 1}`);
      }
      if (!Number.isFinite(rewards[i])) throw new RangeError(`reward ${rewards[i]} is not finite`);
    });
    arms.forEach((a, i) => {
      this.counts[a] += 1;
      this.sums[a] += rewards[i];
    });
  }
  eliminate(arms) {
    const active = new Set(this.active);
    const out = sortedSet(arms).filter((a) => active.has(a));
    const gone = new Set(out);
    this.active = this.active.filter((a) => !gone.has(a));
    return out;
  }
  keepOnly(arm) {
    return this.eliminate(this.active.filter((a) => a !== arm));
  }
  /** max over the local set by (mean, -arm): the lowest index among equal means. */
  empiricalBest() {
    const mu = this.means();
    let best = this.active[0];
    for (const a of this.active) if (mu[a] > mu[best]) best = a;
    return best;
  }
  toState() {
    return {
      name: this.name,
      n_arms: this.nArms,
      params: { ...this.params },
      active: this.active.slice(),
      initial_arms: this.initialArms,
      counts: this.counts.slice(),
      sums: this.sums.slice(),
      ...this.extraState()
    };
  }
  extraState() {
    return {};
  }
  /** Reads back `toState`'s fields (the subclass's own through `loadExtra`). */
  load(state) {
    this.active = state.active.slice();
    this.initialArms = state.initial_arms;
    this.counts = state.counts.slice();
    this.sums = state.sums.slice();
    this.loadExtra(state);
    return this;
  }
  loadExtra(_state) {
  }
};
var SuccessiveElimination = class extends ArmSelection {
  constructor() {
    super(...arguments);
    this.name = "se";
  }
  /** SER3's rule: a fresh random round-robin order every round (a getter: read in restart). */
  get shuffle() {
    return false;
  }
  onRestart() {
    this.checkedRound = 0;
    this.newOrder();
  }
  newOrder() {
    this.order = this.shuffle ? this.draws.permutation(this.nArms) : Array.from({ length: this.nArms }, (_, i) => i);
  }
  select() {
    if (this.done) return [];
    if (this.params.every_arm) return this.active.slice();
    const least = Math.min(...this.active.map((a) => this.counts[a]));
    let pick = -1;
    for (const a of this.active) {
      if (this.counts[a] === least && (pick < 0 || this.order[a] < this.order[pick])) pick = a;
    }
    return [pick];
  }
  observe(arms, rewards) {
    this.record(arms, rewards);
    const counts = new Set(this.active.map((a) => this.counts[a]));
    if (counts.size !== 1) return [];
    const rounds = counts.values().next().value;
    if (rounds <= this.checkedRound) return [];
    this.checkedRound = rounds;
    const out = this.check(rounds);
    this.newOrder();
    return out;
  }
  radius(rounds) {
    return eliminationRadius(rounds, this.initialArms, this.params.confidence, this.params.sigma);
  }
  check(rounds) {
    const radius = this.radius(rounds);
    const mu = this.means();
    const best = Math.max(...this.active.map((a) => mu[a]));
    const out = this.eliminate(this.active.filter((a) => best - mu[a] >= 2 * radius));
    if (radius <= this.params.epsilon / 2 && this.active.length > 1) {
      out.push(...this.keepOnly(this.empiricalBest()));
    }
    return out.sort((a, b) => a - b);
  }
  extraState() {
    return { checked_round: this.checkedRound, order: this.order.slice() };
  }
  loadExtra(state) {
    this.checkedRound = state.checked_round;
    this.order = state.order.slice();
  }
};
var SER3 = class extends SuccessiveElimination {
  constructor() {
    super(...arguments);
    this.name = "ser3";
  }
  get shuffle() {
    return true;
  }
};
var SER4 = class extends SuccessiveElimination {
  constructor() {
    super(...arguments);
    this.name = "ser4";
  }
  get shuffle() {
    return true;
  }
  wantsReset() {
    return this.params.phi > 0 && this.draws.random() < this.params.phi;
  }
};
var StitchedSuccessiveElimination = class extends SuccessiveElimination {
  constructor() {
    super(...arguments);
    this.name = "stitched-se";
  }
  get shuffle() {
    return true;
  }
  radius(rounds) {
    return stitchedRadius(rounds, this.initialArms, this.params.confidence, this.params.sigma);
  }
};
var KLSuccessiveElimination = class extends SuccessiveElimination {
  constructor() {
    super(...arguments);
    this.name = "kl-se";
  }
  get shuffle() {
    return true;
  }
  onRestart() {
    if (this.params.sigma !== null) throw new RangeError("kl-se's KL bounds need rewards in [0, 1]");
    super.onRestart();
  }
  check(rounds) {
    const level = eliminationLevel(rounds, this.initialArms, this.params.confidence);
    const mu = this.means();
    const bounds = new Map(
      this.active.map((a) => [a, [klLower(mu[a], rounds, level), klUpper(mu[a], rounds, level)]])
    );
    const topLower = Math.max(...Array.from(bounds.values(), ([low]) => low));
    const out = this.eliminate(this.active.filter((a) => bounds.get(a)[1] <= topLower));
    if (this.active.length > 1) {
      const best = this.empiricalBest();
      const challenger = Math.max(
        ...this.active.filter((a) => a !== best).map((a) => bounds.get(a)[1])
      );
      if (challenger - bounds.get(best)[0] < this.params.epsilon) out.push(...this.keepOnly(best));
    }
    return out.sort((a, b) => a - b);
  }
};
var LUCBShape = class extends ArmSelection {
  onRestart() {
    this.queue = [];
  }
  select() {
    if (this.done) return [];
    const unseen = this.active.filter((a) => this.counts[a] === 0);
    if (unseen.length > 0) return this.params.every_arm ? unseen : unseen.slice(0, 1);
    return this.params.every_arm ? this.queue.slice() : this.queue.slice(0, 1);
  }
  observe(arms, rewards) {
    this.record(arms, rewards);
    this.queue = this.queue.filter((a) => !arms.includes(a));
    return this.decide();
  }
  afterDiscard() {
    this.queue = this.queue.filter((a) => this.active.includes(a));
    return this.decide();
  }
  decide() {
    if (this.done || this.queue.length > 0 || this.active.some((a) => this.counts[a] === 0)) {
      return [];
    }
    const time = Math.max(1, this.counts.reduce((s, c) => s + c, 0));
    const bounds = new Map(this.active.map((a) => [a, this.interval(a, time)]));
    return this.rule(bounds);
  }
  /** LUCB1: h the empirical best, l the other arm of highest U; stop when U_l - L_h < eps. */
  rule(bounds) {
    const best = this.empiricalBest();
    let challenger = -1;
    for (const a of this.active) {
      if (a === best) continue;
      if (challenger < 0 || bounds.get(a)[1] > bounds.get(challenger)[1]) challenger = a;
    }
    if (bounds.get(challenger)[1] - bounds.get(best)[0] < this.params.epsilon) {
      return this.keepOnly(best);
    }
    this.queue = [best, challenger];
    return [];
  }
  extraState() {
    return { queue: this.queue.slice() };
  }
  loadExtra(state) {
    this.queue = state.queue.slice();
  }
};
var StitchedLUCB = class extends LUCBShape {
  constructor() {
    super(...arguments);
    this.name = "stitched-lucb";
  }
  interval(arm, _time) {
    const radius = stitchedRadius(
      this.counts[arm],
      this.initialArms,
      this.params.confidence,
      this.params.sigma
    );
    const mean = this.means()[arm];
    return [mean - radius, mean + radius];
  }
};
var LUCB = class extends LUCBShape {
  constructor() {
    super(...arguments);
    this.name = "lucb";
  }
  interval(arm, time) {
    const radius = lucbRadius(
      this.counts[arm],
      time,
      this.initialArms,
      this.params.confidence,
      this.params.sigma
    );
    const mean = this.means()[arm];
    return [mean - radius, mean + radius];
  }
};
var KLLUCB = class extends LUCBShape {
  constructor() {
    super(...arguments);
    this.name = "kl-lucb";
  }
  onRestart() {
    if (this.params.sigma !== null) throw new RangeError("kl-lucb's KL bounds need rewards in [0, 1]");
    super.onRestart();
  }
  interval(arm, time) {
    const level = klLucbLevel(time, this.initialArms, this.params.confidence);
    const mean = this.means()[arm];
    const pulls = this.counts[arm];
    return [klLower(mean, pulls, level), klUpper(mean, pulls, level)];
  }
};
var DPSuccessiveElimination = class extends ArmSelection {
  constructor() {
    super(...arguments);
    this.name = "dp-se";
  }
  onRestart() {
    if (this.params.sigma !== null) throw new RangeError("DP-MASE needs rewards in [0, 1]");
    this.epoch = 1;
    this.startEpoch();
  }
  startEpoch() {
    this.epochArms = this.active.length;
    this.epochRounds = dpEpochLength(
      this.epoch,
      this.epochArms,
      this.params.confidence,
      this.params.dp_epsilon
    );
    this.counts.fill(0);
    this.sums.fill(0);
  }
  select() {
    if (this.done) return [];
    if (this.params.every_arm) return this.active.slice();
    const least = Math.min(...this.active.map((a) => this.counts[a]));
    return [this.active.find((a) => this.counts[a] === least)];
  }
  observe(arms, rewards) {
    this.record(arms, rewards);
    return this.endEpochIfComplete();
  }
  afterDiscard() {
    return this.endEpochIfComplete();
  }
  noiseScale() {
    return 1 / (this.params.dp_epsilon * this.epochRounds);
  }
  endEpochIfComplete() {
    if (this.done || this.active.some((a) => this.counts[a] < this.epochRounds)) return [];
    const arms = this.active.slice();
    const noise = this.draws.laplace(this.noiseScale(), arms.length);
    const noisy = arms.map((a, i) => this.sums[a] / this.epochRounds + noise[i]);
    const gap = dpEliminationGap(
      this.epoch,
      this.epochRounds,
      this.epochArms,
      this.params.confidence,
      this.params.dp_epsilon
    );
    const top = Math.max(...noisy);
    const out = this.eliminate(arms.filter((_, i) => top - noisy[i] > gap));
    this.epoch += 1;
    this.startEpoch();
    return out;
  }
  extraState() {
    return { epoch: this.epoch, epoch_arms: this.epochArms, epoch_rounds: this.epochRounds };
  }
  loadExtra(state) {
    this.epoch = state.epoch;
    this.epochArms = state.epoch_arms;
    this.epochRounds = state.epoch_rounds;
  }
};
var FixedBudget = class extends ArmSelection {
  constructor() {
    super(...arguments);
    this.name = "fixed-budget";
  }
  /** T: the experiment's (params.pulls), else the sub-Gaussian one from the run's parameters. */
  get budget() {
    const pulls = this.params.pulls;
    if (pulls !== void 0 && pulls !== null) return pulls;
    return samplesPerArm(
      this.params.epsilon,
      this.params.confidence,
      this.initialArms,
      this.params.sigma
    );
  }
  onRestart() {
    this.next = 0;
  }
  select() {
    if (this.done) return [];
    if (this.params.every_arm) return this.active.slice();
    return [this.active[this.next % this.active.length]];
  }
  observe(arms, rewards) {
    this.record(arms, rewards);
    this.next += this.params.every_arm ? 0 : arms.length;
    if (this.done || Math.min(...this.active.map((a) => this.counts[a])) < this.budget) return [];
    const mu = this.means();
    const top = Math.max(...this.active.map((a) => mu[a]));
    const best = this.active.filter((a) => mu[a] === top);
    return this.keepOnly(best.length > 1 ? best[this.draws.integer(best.length)] : best[0]);
  }
  extraState() {
    return { next: this.next };
  }
  loadExtra(state) {
    this.next = state.next ?? 0;
  }
};
var SUBROUTINES = {
  se: SuccessiveElimination,
  ser3: SER3,
  ser4: SER4,
  "stitched-se": StitchedSuccessiveElimination,
  "kl-se": KLSuccessiveElimination,
  lucb: LUCB,
  "kl-lucb": KLLUCB,
  "stitched-lucb": StitchedLUCB,
  "dp-se": DPSuccessiveElimination,
  "fixed-budget": FixedBudget
};
function subroutineClass(name) {
  const cls = SUBROUTINES[name];
  if (cls === void 0) {
    throw new RangeError(
      `subroutine=${name}: this SDK runs ${Object.keys(SUBROUTINES).join(", ")}`
    );
  }
  return cls;
}

// src/agent.ts
function reportProbabilities(privacy, nArms) {
  if (!(1 / nArms < privacy && privacy < 1)) {
    throw new RangeError(`privacy=${privacy}: must be in (1/K, 1) with ${nArms} arms`);
  }
  const odds = privacy * (nArms - 1) / (1 - privacy);
  const r = 1 / (odds + nArms - 1);
  return [odds * r, r];
}
function randomize(answer, nArms, privacy, draws) {
  const [p] = reportProbabilities(privacy, nArms);
  if (draws.random() < p) return answer;
  const other = draws.integer(nArms - 1);
  return other + (other >= answer ? 1 : 0);
}
var LocalAgent = class _LocalAgent {
  constructor(spec, draws) {
    this.spec = spec;
    this.draws = draws;
    /** Decided against, sent or dropped: never decided twice (per experiment epoch). */
    this.voted = /* @__PURE__ */ new Set();
    this.epoch = 0;
    /** CDE: the randomized report, once drawn. */
    this.report = null;
    /** CDE: the experiment accepted an arm; nothing more to do. */
    this.decided = false;
    const drop = spec.vote_drop ?? 0;
    if (!(drop >= 0 && drop < 1)) throw new RangeError(`vote_drop=${drop}: must be in [0, 1)`);
    if (this.reports) reportProbabilities(spec.report_privacy, spec.n_arms);
    this.sub = new (subroutineClass(spec.subroutine))(spec.n_arms, spec.params, draws);
  }
  get localArms() {
    return this.sub.active.slice();
  }
  get reports() {
    return this.spec.report_privacy !== void 0 && this.spec.report_privacy !== null;
  }
  get done() {
    return this.decided || this.sub.done;
  }
  /** K_n := K_n & K; an empty intersection restarts on K with fresh statistics; a new epoch (DSER4
   * reset) restarts everything, votes included. Returns votes to send (rarely any). CDE: arms
   * leave only when one is accepted, and then the agent stops. */
  sync(remaining, epoch = 0) {
    const global = new Set(remaining);
    if (this.reports) {
      if (global.size < this.spec.n_arms) this.decided = true;
      return [];
    }
    if (epoch !== this.epoch) {
      this.epoch = epoch;
      this.voted = /* @__PURE__ */ new Set();
      this.sub.restart(global);
      return [];
    }
    const gone = this.sub.active.filter((a) => !global.has(a));
    if (gone.length === 0) return [];
    if (gone.length === this.sub.active.length) {
      this.sub.restart(global);
      return [];
    }
    return this.votes(this.sub.discard(gone));
  }
  /** SER4's coin, drawn once per activation (always false for other subroutines). */
  wantsReset() {
    const sub = this.sub;
    return sub.wantsReset !== void 0 ? sub.wantsReset() : false;
  }
  /** SER4's local reset: statistics forgotten, K_n := K. */
  reset(remaining) {
    this.sub.restart(remaining);
  }
  select() {
    return this.sub.select();
  }
  observe(arms, rewards) {
    const eliminated = this.sub.observe(arms, rewards);
    if (!this.reports) return this.votes(eliminated);
    if (this.sub.done && this.report === null) {
      const answer = this.sub.active[0];
      this.report = randomize(answer, this.spec.n_arms, this.spec.report_privacy, this.draws);
    }
    return [];
  }
  votes(eliminated) {
    const fresh = eliminated.filter((a) => !this.voted.has(a));
    for (const a of fresh) this.voted.add(a);
    const drop = this.spec.vote_drop ?? 0;
    if (drop > 0) {
      const coins = this.draws.randoms(fresh.length);
      return fresh.filter((_, i) => coins[i] >= drop);
    }
    return fresh;
  }
  toState() {
    return {
      sub: this.sub.toState(),
      voted: Array.from(this.voted).sort((a, b) => a - b),
      epoch: this.epoch,
      report: this.report,
      decided: this.decided
    };
  }
  /** Rebuilt from `toState` (a reload): construction draws from a throwaway source, as in Python,
   * and the agent continues from `draws`. */
  static fromState(spec, state, draws) {
    const agent = new _LocalAgent(spec, inertDraws());
    agent.draws = draws;
    agent.sub.draws = draws;
    agent.sub.load(state.sub);
    agent.voted = new Set(state.voted);
    agent.epoch = state.epoch;
    agent.report = state.report ?? null;
    agent.decided = state.decided ?? false;
    return agent;
  }
};

// src/version.ts
var VERSION = "0.1.0";

// src/http.ts
var CoordinatorError = class extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
    this.name = "CoordinatorError";
  }
};
var ClientClosed = class extends Error {
  constructor() {
    super("the dexp client is closed");
    this.name = "ClientClosed";
  }
};
var FAILOVER = /* @__PURE__ */ new Set([502, 503, 504]);
function coordinatorUrls(value) {
  const urls = value.split(",").map((u) => u.trim().replace(/\/+$/, "")).filter((u) => u.length > 0);
  if (urls.length === 0) throw new TypeError("coordinator: no URL given");
  for (const url of urls) {
    if (!/^https?:\/\/[^/]+/.test(url)) throw new TypeError(`coordinator: ${url} is not an http(s) URL`);
  }
  return urls;
}
function jittered(ms) {
  return ms * (0.5 + Math.random());
}
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done);
  });
}
var CoordinatorClient = class {
  constructor(coordinator, options = {}) {
    this.stop = new AbortController();
    /** Requests sent again (failures and 429 waits), for the curious. */
    this.retries = 0;
    /** The last failure a retry waited out (a network error, a 5xx). */
    this.lastProblem = "";
    this.urls = coordinatorUrls(coordinator);
    this.current = Math.floor(Math.random() * this.urls.length);
    this.timeoutMs = options.timeoutMs ?? 1e4;
    this.retryMaxMs = options.retryMaxMs ?? 3e4;
  }
  get url() {
    return this.urls[this.current];
  }
  get closed() {
    return this.stop.signal.aborted;
  }
  /** Aborts what is in flight and every wait; later requests throw ClientClosed. */
  close() {
    this.stop.abort();
  }
  /** One request, retried until the coordinator answers below 400 (a 304 too), or refuses. */
  async send(method, path, options = {}) {
    const headers = { Accept: "application/json", ...options.headers ?? {} };
    if (options.token) headers.Authorization = `Bearer ${options.token}`;
    if (options.body !== void 0) headers["Content-Type"] = "application/json";
    const body = options.body === void 0 ? void 0 : JSON.stringify(options.body);
    let delay = 50;
    let round = 0;
    for (; ; ) {
      if (this.closed) throw new ClientClosed();
      let problem;
      let failover = true;
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort(), this.timeoutMs);
      const abort = () => timeout.abort();
      this.stop.signal.addEventListener("abort", abort);
      try {
        const keepalive = method !== "GET";
        const response = await fetch(this.url + path, { method, headers, body, keepalive, signal: timeout.signal });
        const text = await response.text();
        if (response.status < 400) {
          return {
            status: response.status,
            body: text ? JSON.parse(text) : null,
            etag: response.headers.get("ETag")
          };
        }
        const detail = detailOf(text);
        if (response.status < 500 && response.status !== 429) {
          throw new CoordinatorError(response.status, detail);
        }
        problem = `${response.status}: ${detail}`;
        if (response.status === 429) {
          const wait = retryAfterMs(response.headers.get("Retry-After"));
          if (options.waitRateLimit === false) throw new RateLimited(detail, wait);
          this.retries += 1;
          await sleep(Math.max(delay, wait), this.stop.signal);
          delay = Math.min(delay * 2, this.retryMaxMs);
          continue;
        }
        failover = FAILOVER.has(response.status);
      } catch (err) {
        if (err instanceof CoordinatorError) throw err;
        if (this.closed) throw new ClientClosed();
        problem = String(err);
      } finally {
        clearTimeout(timer);
        this.stop.signal.removeEventListener("abort", abort);
      }
      this.retries += 1;
      if (failover && this.urls.length > 1) {
        this.current = (this.current + 1) % this.urls.length;
        round += 1;
        if (round < this.urls.length) continue;
      }
      round = 0;
      this.lastProblem = problem;
      await sleep(jittered(delay), this.stop.signal);
      delay = Math.min(delay * 2, this.retryMaxMs);
    }
  }
  async json(method, path, token, body) {
    return (await this.send(method, path, { token, body })).body;
  }
  enroll(ticket, experiment) {
    return this.json("POST", "/v1/agents", ticket, { experiment });
  }
  experiment(experiment) {
    return this.json("GET", `/v1/experiments/${experiment}`);
  }
  /** The experiment's document, or null if it did not change since `etag` (a 304). */
  async experimentIfChanged(experiment, etag) {
    const headers = etag ? { "If-None-Match": etag } : {};
    return this.send("GET", `/v1/experiments/${experiment}`, { headers });
  }
  me(token) {
    return this.json("GET", "/v1/agents/me", token);
  }
  vote(experiment, token, arm, epoch, startedAt) {
    const body = { arm, epoch };
    if (startedAt !== null) body.epoch_started_at = startedAt;
    return this.json("POST", `/v1/experiments/${experiment}/votes`, token, body);
  }
  report(experiment, token, arm) {
    return this.json("POST", `/v1/experiments/${experiment}/report`, token, { arm });
  }
  /** LDP: report number `seq` (1..B), the arm played and its privatized bit. A retry is a
   * duplicate (nothing changes). */
  privateReport(experiment, token, arm, bit, seq) {
    return this.json("POST", `/v1/experiments/${experiment}/reports`, token, { arm, bit, seq });
  }
  settled(experiment, token, epoch) {
    return this.json("POST", `/v1/experiments/${experiment}/settled`, token, { epoch });
  }
  /** DSER4's reset; null if the coordinator rate-limits resets (429): not waited for. */
  async reset(experiment, token, epoch) {
    try {
      const reply = await this.send("POST", `/v1/experiments/${experiment}/reset`, {
        token,
        body: { epoch },
        waitRateLimit: false
      });
      return reply.body;
    } catch (err) {
      if (err instanceof RateLimited) return null;
      throw err;
    }
  }
};
var RateLimited = class extends CoordinatorError {
  constructor(detail, retryAfterMs2) {
    super(429, detail);
    this.retryAfterMs = retryAfterMs2;
    this.name = "RateLimited";
  }
};
function retryAfterMs(value) {
  const seconds = Number(value);
  return value !== null && Number.isFinite(seconds) && seconds >= 0 ? seconds * 1e3 : 0;
}
function detailOf(text) {
  try {
    const body = JSON.parse(text);
    if (body && typeof body === "object" && "detail" in body) {
      return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    }
  } catch {
  }
  return text.slice(0, 200);
}

// src/follower.ts
var RETRY_MS = 2e3;
var STREAM_TIMEOUT_MS = 45e3;
var NO_STREAM_MS = 3e5;
var sequence = 0;
function nextSeq() {
  sequence += 1;
  return sequence;
}
var SSEParser = class {
  constructor(lastId = "") {
    this.lastId = lastId;
    this.retry = null;
    this.type = "";
    this.data = [];
  }
  feed(line) {
    if (line === "") {
      const data = this.data;
      const type = this.type || "message";
      this.data = [];
      this.type = "";
      return data.length ? { type, data: data.join("\n"), id: this.lastId } : null;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") this.type = value;
    else if (name === "data") this.data.push(value);
    else if (name === "id" && !value.includes("\0")) this.lastId = value;
    else if (name === "retry" && /^[0-9]+$/.test(value)) this.retry = Number(value);
    return null;
  }
};
var Deleted = class extends Error {
};
var NoStream = class extends Error {
};
var Failed = class extends Error {
};
var Silent = class extends Error {
};
var Refused = class extends Error {
  constructor(status, retryAfterMs2) {
    super(`${status}, Retry-After ${retryAfterMs2} ms`);
    this.status = status;
    this.retryAfterMs = retryAfterMs2;
  }
};
var GlobalSetFollower = class {
  constructor(coordinator, experiment, options = {}) {
    this.experiment = experiment;
    this.stop = new AbortController();
    this.listeners = /* @__PURE__ */ new Set();
    this.running = null;
    this.retryMs = RETRY_MS;
    this.lastEventId = "";
    this.etag = null;
    this.mode = "starting";
    this.streams = 0;
    this.events = 0;
    this.polls = 0;
    this.notModified = 0;
    this.refused = 0;
    this.failures = 0;
    /** The newest change, for a subscriber that comes later. */
    this.latest = null;
    this.pollMs = options.pollMs ?? 3e4;
    this.streamTimeoutMs = options.streamTimeoutMs ?? STREAM_TIMEOUT_MS;
    this.retryMaxMs = options.retryMaxMs ?? 6e4;
    this.client = new CoordinatorClient(coordinator, { timeoutMs: options.timeoutMs, retryMaxMs: this.retryMaxMs });
    this.index = this.client.current;
  }
  subscribe(listener) {
    this.listeners.add(listener);
    if (this.running === null) this.running = this.run();
    return () => {
      this.listeners.delete(listener);
    };
  }
  get subscribers() {
    return this.listeners.size;
  }
  get stopped() {
    return this.stop.signal.aborted;
  }
  close() {
    this.stop.abort();
    this.client.close();
    this.mode = "stopped";
  }
  keep(change) {
    this.latest = change;
    for (const listener of Array.from(this.listeners)) {
      try {
        listener(change);
      } catch (err) {
        console.error("dexp: a change listener failed", err);
      }
    }
  }
  async run() {
    let failures = 0;
    try {
      while (!this.stopped) {
        let received;
        try {
          received = await this.stream();
        } catch (err) {
          if (err instanceof Deleted || this.stopped || err instanceof ClientClosed) throw err;
          if (err instanceof Refused) {
            this.refused += 1;
            this.nextUrl();
            await this.fallback(err.retryAfterMs);
          } else if (err instanceof NoStream) {
            await this.fallback(NO_STREAM_MS);
          } else {
            failures += 1;
            this.failures += 1;
            if (!(err instanceof Silent)) this.nextUrl();
            await this.fallback(this.backoff(failures));
          }
          continue;
        }
        failures = received ? 0 : failures + 1;
        await sleep(this.backoff(Math.max(failures, 1)), this.stop.signal);
      }
    } catch (err) {
      if (err instanceof Deleted) this.keep({ state: null, seq: nextSeq(), via: "stream" });
      else if (!this.stopped && !(err instanceof ClientClosed)) console.error("dexp: following stopped", err);
    } finally {
      this.mode = "stopped";
    }
  }
  backoff(failures) {
    const base = this.retryMs * 2 ** Math.min(failures - 1, 16);
    return jittered(Math.min(base, this.retryMaxMs));
  }
  nextUrl() {
    this.index = (this.index + 1) % this.client.urls.length;
  }
  /** One stream, read until it ends: the number of state events it brought. */
  async stream() {
    const headers = { Accept: "text/event-stream" };
    if (this.lastEventId) headers["Last-Event-ID"] = this.lastEventId;
    const url = `${this.client.urls[this.index]}/v1/experiments/${this.experiment}/events`;
    const abort = new AbortController();
    const onStop = () => abort.abort();
    this.stop.signal.addEventListener("abort", onStop);
    let silent = false;
    let timer;
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        silent = true;
        abort.abort();
      }, this.streamTimeoutMs);
    };
    let received = 0;
    try {
      arm();
      let response;
      try {
        response = await fetch(url, { headers, signal: abort.signal, cache: "no-store" });
      } catch (err) {
        throw silent ? new Silent("no answer") : new Failed(String(err));
      }
      const kind = response.headers.get("Content-Type") ?? "";
      if (response.status !== 200 || !kind.startsWith("text/event-stream") || response.body === null) {
        await this.refusal(response);
      }
      this.mode = "stream";
      this.streams += 1;
      const parser = new SSEParser(this.lastEventId);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (; ; ) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (err) {
          if (this.stopped) return received;
          throw silent ? new Silent("silent stream") : new Failed(String(err));
        }
        if (chunk.done) return received;
        arm();
        let text = buffer + decoder.decode(chunk.value, { stream: true });
        const held = text.endsWith("\r") ? "\r" : "";
        if (held) text = text.slice(0, -1);
        const lines = text.split(/\r\n|\r|\n/);
        buffer = (lines.pop() ?? "") + held;
        for (const line of lines) {
          const event = parser.feed(line);
          if (parser.retry !== null) this.retryMs = parser.retry;
          if (event === null) continue;
          if (event.type === "deleted") {
            await reader.cancel().catch(() => void 0);
            await this.confirmDeletion();
            return received;
          }
          if (event.type !== "state") continue;
          const state = JSON.parse(event.data);
          if (state === null || typeof state !== "object" || !("remaining_arms" in state)) {
            throw new Failed(`not a state: ${event.data.slice(0, 200)}`);
          }
          this.lastEventId = event.id;
          this.events += 1;
          received += 1;
          this.keep({ state, seq: nextSeq(), via: "stream" });
        }
      }
    } finally {
      clearTimeout(timer);
      this.stop.signal.removeEventListener("abort", onStop);
      abort.abort();
    }
  }
  async refusal(response) {
    await response.text().catch(() => "");
    const status = response.status;
    if (status === 429 || status === 503) {
      throw new Refused(status, Math.max(1e3, retryAfterMs(response.headers.get("Retry-After")) || RETRY_MS));
    }
    if (status === 404) {
      await this.poll();
      throw new NoStream("404");
    }
    if (status >= 500) throw new Failed(String(status));
    throw new NoStream(`${status} ${response.headers.get("Content-Type") ?? ""}`);
  }
  /** `event: deleted`: gone if a read says 404; else another experiment under the same id. */
  async confirmDeletion() {
    const seq = nextSeq();
    let document;
    try {
      document = await this.client.experiment(this.experiment);
    } catch (err) {
      if (err instanceof CoordinatorError && err.status === 404) throw new Deleted();
      throw new Failed(`after deleted: ${err}`);
    }
    this.etag = null;
    this.keep({ state: document, seq, via: "poll" });
  }
  /** Poll now, then every pollMs (randomized), until `ms` have passed. */
  async fallback(ms) {
    this.mode = "poll";
    const end = Date.now() + ms;
    while (!this.stopped) {
      await this.poll();
      const left = end - Date.now();
      if (left <= 0) return;
      await sleep(Math.min(jittered(this.pollMs), left), this.stop.signal);
    }
  }
  async poll() {
    const seq = nextSeq();
    let reply;
    try {
      reply = await this.client.experimentIfChanged(this.experiment, this.etag);
    } catch (err) {
      if (err instanceof CoordinatorError && err.status === 404) throw new Deleted();
      if (err instanceof ClientClosed) throw err;
      return;
    }
    this.polls += 1;
    if (reply.status === 304 || reply.body === null) {
      this.notModified += 1;
      return;
    }
    this.etag = reply.etag;
    this.keep({ state: reply.body, seq, via: "poll" });
  }
};
var shared = /* @__PURE__ */ new Map();
function shareFollower(coordinator, experiment, options = {}) {
  const key = `${coordinator}
${experiment}`;
  let entry = shared.get(key);
  if (entry === void 0 || entry.follower.stopped) {
    entry = { follower: new GlobalSetFollower(coordinator, experiment, options), users: 0 };
    shared.set(key, entry);
  }
  const held = entry;
  held.users += 1;
  let released = false;
  return {
    follower: held.follower,
    release: () => {
      if (released) return;
      released = true;
      held.users -= 1;
      if (held.users === 0) {
        held.follower.close();
        if (shared.get(key) === held) shared.delete(key);
      }
    }
  };
}

// src/record.ts
var IN_VOTER_SET = /* @__PURE__ */ new Set(["counted", "eliminated", "duplicate"]);
var AgentRecord = class _AgentRecord {
  constructor(agentId, token) {
    this.agentId = agentId;
    this.token = token;
    this.acknowledged = [];
    this.pending = [];
    this.epochStarts = /* @__PURE__ */ new Map();
    this.report = null;
    this.reportOutcome = null;
    /** LDP (private.ts): reports sent and answered, and the one decided and not seen answered,
     * [arm, bit, seq]: saved before it is sent, so a reload sends that same report again. */
    this.privateSent = 0;
    this.privatePending = null;
  }
  static fromSaved(saved) {
    const record = new _AgentRecord(String(saved.agent_id), String(saved.token));
    record.acknowledged = (saved.acknowledged ?? []).map(([arm, epoch, outcome]) => ({ arm, epoch, outcome, seq: 0, votes: null }));
    record.pending = (saved.pending ?? []).map(([arm, epoch]) => [arm, epoch]);
    for (const [epoch, start] of Object.entries(saved.epoch_starts ?? {})) record.epochStarts.set(Number(epoch), start);
    if (saved.report) [record.report, record.reportOutcome] = saved.report;
    if (saved.private) {
      record.privateSent = Number(saved.private.sent ?? 0);
      const pending = saved.private.pending;
      record.privatePending = pending ? [Number(pending[0]), Number(pending[1]), Number(pending[2])] : null;
    }
    return record;
  }
  toSaved(experiment, createdAt, local) {
    const saved = {
      format: 1,
      experiment,
      created_at: createdAt,
      agent_id: this.agentId,
      token: this.token,
      acknowledged: this.acknowledged.map((v) => [v.arm, v.epoch, v.outcome]),
      pending: this.pending.map(([arm, epoch]) => [arm, epoch]),
      epoch_starts: Object.fromEntries(Array.from(this.epochStarts, ([e, s]) => [String(e), s]))
    };
    if (this.report !== null) saved.report = [this.report, this.reportOutcome];
    if (this.privateSent > 0 || this.privatePending !== null) {
      saved.private = { sent: this.privateSent, pending: this.privatePending === null ? null : [...this.privatePending] };
    }
    if (local !== void 0) saved.local = local;
    return saved;
  }
  /** The votes of an epoch a failover lost (same number, another start) are forgotten. */
  forgetLostEpoch(epoch, started) {
    if (started === null) return false;
    const known = this.epochStarts.get(epoch);
    for (const e of Array.from(this.epochStarts.keys())) if (e < epoch - 1 || e === epoch) this.epochStarts.delete(e);
    this.epochStarts.set(epoch, started);
    if (known === void 0 || known === started) return false;
    this.acknowledged = this.acknowledged.filter((v) => v.epoch !== epoch);
    this.pending = this.pending.filter(([, e]) => e !== epoch);
    return true;
  }
  decided(epoch) {
    return [...this.acknowledged.filter((v) => v.epoch === epoch).map((v) => v.arm), ...this.pending.filter(([, e]) => e === epoch).map(([a]) => a)];
  }
};

// src/protocol.ts
var ROUTES = {
  state: ["GET", ""],
  vote: ["POST", "/votes"],
  report: ["POST", "/report"],
  private_report: ["POST", "/reports"],
  // LDP (private.ts)
  settled: ["POST", "/settled"],
  reset: ["POST", "/reset"],
  me: ["GET", "/v1/agents/me"]
};
async function run(exchange, transport) {
  let step = exchange.next();
  while (!step.done) {
    let reply;
    try {
      reply = await transport(step.value);
    } catch (err) {
      if (!(err instanceof CoordinatorError)) throw err;
      step = exchange.throw(err);
      continue;
    }
    step = exchange.next(reply);
  }
  return step.value;
}
function clientTransport(client) {
  return (m) => {
    const body = m.body ?? {};
    const token = String(m.token);
    switch (m.kind) {
      case "state":
        return client.experiment(m.experiment);
      case "me":
        return client.me(token);
      case "vote":
        return client.vote(m.experiment, token, body.arm, body.epoch, body.epoch_started_at ?? null);
      case "report":
        return client.report(m.experiment, token, body.arm);
      case "private_report":
        return client.privateReport(m.experiment, token, body.arm, body.bit, body.seq);
      case "settled":
        return client.settled(m.experiment, token, body.epoch);
      case "reset":
        return client.reset(m.experiment, token, body.epoch);
    }
  };
}
function message(kind, experiment, token, body = null) {
  const [method, tail] = ROUTES[kind];
  const path = kind === "me" ? tail : `/v1/experiments/${experiment}${tail}`;
  return { kind, experiment, method, path, body, token };
}
var DeviceProtocol = class {
  constructor(view, record, hooks, reconcileMs, nextCheck) {
    this.view = view;
    this.record = record;
    this.hooks = hooks;
    this.reconcileMs = reconcileMs;
    this.nextCheck = nextCheck;
    this.votesSent = 0;
    this.votesResent = 0;
    this.reportsSent = 0;
    this.settledSent = 0;
    this.resetsLimited = 0;
    this.checks = 0;
    this.checkedSeq = 0;
    /** CE: the global set when the coordinator took the settled message, and its epoch. */
    this.settledWith = null;
    this.settledEpoch = -1;
    this.settleRefused = false;
  }
  /** The message of `kind` (see ROUTES), with this agent's token but for a state read. */
  message(kind, body = null) {
    return message(kind, this.view.experiment, kind === "state" ? null : this.record.token, body);
  }
  /** Read the global state again; true if the global set changed. */
  *refresh() {
    const seq = nextSeq();
    const state = yield this.message("state");
    return this.view.update(state, seq);
  }
  /** Votes of an epoch a failover lost, whose number the current epoch took again, forgotten;
   * the local agent restarts, as the reset that began the current epoch asks. */
  forgetLostEpoch() {
    if (!this.record.forgetLostEpoch(this.view.epoch, this.view.epochStartedAt)) return false;
    this.hooks.lostEpoch();
    this.hooks.persist();
    return true;
  }
  /** Votes decided: on record as pending (and saved) before they are sent. */
  decide(votes) {
    const epoch = this.view.epoch;
    for (const arm of votes) {
      if (this.view.epochStartedAt !== null && !this.record.epochStarts.has(epoch)) {
        this.record.epochStarts.set(epoch, this.view.epochStartedAt);
      }
      this.record.pending.push([arm, epoch]);
    }
    if (votes.length > 0) this.hooks.persist();
  }
  /** Send the pending votes of the current epoch, in order; another epoch's are dropped. */
  *deliverDecided() {
    let sent = 0;
    if (this.record.pending.some(([, e]) => e !== this.view.epoch)) {
      this.record.pending = this.record.pending.filter(([, e]) => e === this.view.epoch);
      this.hooks.persist();
    }
    for (let next = this.record.pending[0]; next !== void 0; next = this.record.pending[0]) {
      yield* this.deliver(next[0], next[1]);
      this.votesSent += 1;
      sent += 1;
    }
    return sent;
  }
  /** Send one vote and record its acknowledgement. */
  *deliver(arm, epoch) {
    const started = this.record.epochStarts.get(epoch);
    const body = { arm, epoch };
    if (started !== void 0) body.epoch_started_at = started;
    const reply = yield this.message("vote", body);
    const outcome = String(reply.outcome);
    const record = this.record;
    record.pending = record.pending.filter(([a, e]) => a !== arm || e !== epoch);
    record.acknowledged = record.acknowledged.filter((v) => (v.arm !== arm || v.epoch !== epoch) && v.epoch >= epoch - 1);
    const votes = reply.votes === void 0 || reply.votes === null ? null : Number(reply.votes);
    record.acknowledged.push({ arm, epoch, outcome, seq: nextSeq(), votes });
    this.hooks.persist();
    if (reply.votes !== void 0) this.view.observeCount(arm, Number(reply.epoch), Number(reply.votes));
    if (this.view.stale(Number(reply.version), Number(reply.epoch))) yield* this.refresh();
  }
  /** CDE: send the report on record (a second copy is a duplicate) and record the answer. */
  *deliverReport() {
    const reply = yield this.message("report", { arm: this.record.report });
    this.record.reportOutcome = String(reply.outcome);
    this.reportsSent += 1;
    this.hooks.persist();
  }
  /** DSER4: ask for a new epoch; true if it began (the caller reads the state and syncs).
   * Waiting for more agents, or refused (429, not waited for): false, a local reset only. */
  *reset() {
    let reply;
    try {
      reply = yield this.message("reset", { epoch: this.view.epoch });
    } catch (err) {
      if (!(err instanceof CoordinatorError) || err.status !== 429) throw err;
      reply = null;
    }
    if (reply === null || reply === void 0) {
      this.resetsLimited += 1;
      return false;
    }
    return !reply.pending;
  }
  /** CE only: tell the coordinator this agent settled (`done`), once per settle, again when it
   * forgot (an arm it is not counted against left, or a reset). */
  *settle(done, localEpoch) {
    const view = this.view;
    if (view.params.algorithm !== "ce" || this.settleRefused) return;
    if (!done || localEpoch !== view.epoch) {
      this.settledWith = null;
      return;
    }
    if (view.remaining.size < 2) return;
    if (this.settledWith !== null) {
      const counted = new Set(
        this.record.acknowledged.filter((v) => v.epoch === view.epoch && IN_VOTER_SET.has(v.outcome)).map((v) => v.arm)
      );
      const gone = Array.from(this.settledWith).filter((a) => !view.remaining.has(a));
      if (this.settledEpoch === view.epoch && gone.every((a) => counted.has(a))) return;
      this.settledWith = null;
    }
    let reply;
    try {
      reply = yield this.message("settled", { epoch: view.epoch });
    } catch (err) {
      if (!(err instanceof CoordinatorError) || err.status === 404) throw err;
      this.settleRefused = true;
      return;
    }
    this.settledSent += 1;
    if (reply.outcome === "settled") {
      this.settledWith = new Set(reply.remaining_arms.map(Number));
      this.settledEpoch = Number(reply.epoch);
    }
    if (view.stale(Number(reply.version), Number(reply.epoch))) yield* this.refresh();
  }
  /** After a restart: the votes decided and not seen acknowledged, and CDE's unanswered report,
   * sent again (a second copy is a duplicate); pending votes of another epoch dropped. */
  *resendPending() {
    this.forgetLostEpoch();
    let sent = 0;
    if (this.record.report !== null && this.record.reportOutcome === null) yield* this.deliverReport();
    for (const [arm, epoch] of this.record.pending.slice()) {
      if (epoch === this.view.epoch) {
        yield* this.deliver(arm, epoch);
        sent += 1;
      } else {
        this.record.pending = this.record.pending.filter(([a, e]) => a !== arm || e !== epoch);
        this.hooks.persist();
      }
    }
    this.votesResent += sent;
    return sent;
  }
  /** Why to ask the coordinator for this agent's votes now (agent/protocol.py check_reason);
   * `now` null: the slow check is not considered. */
  checkReason(now) {
    const view = this.view;
    const acknowledged = this.record.acknowledged.filter((v) => v.epoch === view.epoch);
    if (acknowledged.length === 0) return null;
    if (view.lostAt > this.checkedSeq) return view.regressedAt > this.checkedSeq ? "regression" : "loss";
    for (const v of acknowledged) {
      if (v.votes !== null && (IN_VOTER_SET.has(v.outcome) || v.outcome === "arm_out") && v.seq < view.snapshotSeq && view.remaining.has(v.arm) && v.arm < view.votes.length && view.votes[v.arm] < v.votes) {
        return "count";
      }
    }
    return now !== null && now >= this.nextCheck ? "period" : null;
  }
  /** Arms of acknowledged votes the coordinator lacks (agent/protocol.py missing_votes). */
  missingVotes(votedAgainst, beforeSeq) {
    const view = this.view;
    return this.record.acknowledged.filter(
      (v) => v.epoch === view.epoch && v.seq < beforeSeq && (IN_VOTER_SET.has(v.outcome) || view.remaining.has(v.arm)) && !votedAgainst.has(v.arm)
    ).map((v) => v.arm);
  }
  /** If checkReason says so: GET /v1/agents/me, and the acknowledged votes it lacks sent again. */
  *reconcile(now) {
    const reason = this.checkReason(now);
    if (reason === null) return 0;
    const view = this.view;
    const seq = nextSeq();
    this.checkedSeq = seq;
    this.nextCheck = now + this.reconcileMs * (0.5 + this.hooks.jitter());
    let me;
    try {
      me = yield this.message("me");
    } catch (err) {
      if (err instanceof CoordinatorError && err.status !== 404) return 0;
      throw err;
    }
    this.checks += 1;
    const started = me.epoch_started_at ?? null;
    const sameStart = started === null || Number(started) === view.epochStartedAt;
    if (Number(me.epoch) !== view.epoch || Number(me.version) !== view.version || !sameStart) {
      yield* this.refresh();
      if (view.epoch !== Number(me.epoch)) return 0;
      if (started !== null && Number(started) !== view.epochStartedAt) return 0;
    }
    this.forgetLostEpoch();
    const votedAgainst = new Set(me.voted_against.map(Number));
    for (const v of this.record.acknowledged) {
      if (v.epoch === view.epoch && votedAgainst.has(v.arm) && v.arm < view.votes.length && v.votes !== null) {
        v.votes = Math.min(v.votes, view.votes[v.arm]);
      }
    }
    const missing = this.missingVotes(votedAgainst, seq);
    if (missing.length > 0 && (reason === "count" || reason === "period")) {
      view.noteLoss();
      this.checkedSeq = view.lostAt;
    }
    for (const arm of missing) yield* this.deliver(arm, view.epoch);
    this.votesResent += missing.length;
    return missing.length;
  }
};

// src/private.ts
var MAX_DP_EPSILON = 10;
function keepProbability(dpEpsilon) {
  if (!(typeof dpEpsilon === "number" && dpEpsilon > 0 && dpEpsilon <= MAX_DP_EPSILON)) {
    throw new RangeError(`dp_epsilon=${dpEpsilon}: must be in (0, ${MAX_DP_EPSILON}]`);
  }
  return 1 / (1 + Math.exp(-dpEpsilon));
}
function privatize(dpEpsilon, reward, uRound, uFlip) {
  const keep = keepProbability(dpEpsilon);
  if (!(reward >= 0 && reward <= 1)) throw new RangeError(`reward=${reward}: must be in [0, 1]`);
  const bit = uRound < reward ? 1 : 0;
  return uFlip < keep ? bit : 1 - bit;
}
function unitReward(reward, low, high) {
  return (Math.min(Math.max(reward, low), high) - low) / (high - low);
}
function reportReward(reward, rewards, range) {
  if (typeof reward !== "number" || Number.isNaN(reward)) throw new RangeError(`reward ${reward} is not a number`);
  if (range !== null) return unitReward(reward, range[0], range[1]);
  if (rewards === "bernoulli" && reward !== 0 && reward !== 1) {
    throw new RangeError(`reward ${reward} refused: this experiment's rewards are Bernoulli, 0 or 1; nothing was sent`);
  }
  if (!(reward >= 0 && reward <= 1)) {
    throw new RangeError(`reward ${reward} refused: must be in [0, 1] (the experiment declares no range); nothing was sent`);
  }
  return reward;
}
function drawArm(allocation, u) {
  let total = 0;
  for (const w of allocation) if (w > 0) total += w;
  if (!(total > 0)) throw new RangeError("the allocation needs a positive weight");
  const target = u * total;
  let acc = 0;
  let last = -1;
  for (let arm = 0; arm < allocation.length; arm++) {
    const w = allocation[arm];
    if (w > 0) {
      acc += w;
      last = arm;
      if (target < acc) return arm;
    }
  }
  return last;
}
var PrivateProtocol = class {
  constructor(experiment, record, persist, document) {
    this.experiment = experiment;
    this.record = record;
    this.persist = persist;
    this.allocation = [];
    this.remaining = /* @__PURE__ */ new Set();
    this.status = "exploring";
    this.estimates = null;
    this.lift = null;
    /** A report was refused as decided: the coordinator counts no more. */
    this.closed = false;
    this.outcomes = {};
    this.dpEpsilon = Number(document.dp_epsilon);
    keepProbability(this.dpEpsilon);
    this.budget = Number(document.reports_per_agent);
    this.nArms = document.arms.length;
    this.rewards = String(document.rewards ?? "bounded");
    const range = document.reward_range;
    this.rewardRange = range === void 0 || range === null ? null : [Number(range[0]), Number(range[1])];
    this.update(document);
  }
  /** Take what a read of the experiment document published. */
  update(document) {
    this.allocation = (document.allocation ?? []).map(Number);
    this.remaining = new Set(document.remaining_arms.map(Number));
    this.status = this.remaining.size === 1 ? "identified" : String(document.status);
    this.estimates = document.estimates ?? null;
    this.lift = document.lift ?? null;
  }
  get sent() {
    return this.record.privateSent;
  }
  get reportsLeft() {
    return Math.max(this.budget - this.sent - (this.record.privatePending === null ? 0 : 1), 0);
  }
  get identified() {
    return this.remaining.size === 1;
  }
  get decided() {
    return this.identified || this.closed || this.status !== "exploring";
  }
  get spent() {
    return this.sent >= this.budget && this.record.privatePending === null;
  }
  /** The identified arm, else one drawn from the allocation over the arms in play at u. */
  choose(u) {
    if (this.identified) return Array.from(this.remaining)[0];
    let weights = this.allocation.map((w, arm) => this.remaining.has(arm) ? w : 0);
    if (!weights.some((w) => w > 0)) weights = Array.from({ length: this.nArms }, (_, arm) => this.remaining.has(arm) ? 1 : 0);
    return drawArm(weights, u);
  }
  /** The reward the mechanism takes; refuses a bad arm or reward (nothing recorded). */
  check(arm, reward) {
    if (!Number.isInteger(arm) || arm < 0 || arm >= this.nArms) throw new RangeError(`arm ${arm}: must be in [0, ${this.nArms - 1}]`);
    return reportReward(reward, this.rewards, this.rewardRange);
  }
  /** The report of this activation, on record and saved before it is sent; null when none is
   * to be sent (B sent, one pending, or the experiment decided). */
  decide(arm, reward, uRound, uFlip) {
    const unit = this.check(arm, reward);
    if (this.record.privatePending !== null || this.sent >= this.budget || this.decided) return null;
    const report = { arm, bit: privatize(this.dpEpsilon, unit, uRound, uFlip), seq: this.sent + 1 };
    this.record.privatePending = [report.arm, report.bit, report.seq];
    this.persist();
    return report;
  }
  /** Send the pending report and record the answer (counted, duplicate, or a 409: dropped, its
   * number used); the outcome, null if none was pending. */
  *deliver() {
    const pending = this.record.privatePending;
    if (pending === null) return null;
    const [arm, bit, seq] = pending;
    let outcome;
    try {
      const reply = yield message("private_report", this.experiment, this.record.token, { arm, bit, seq });
      outcome = String(reply.outcome);
      this.record.privateSent = Math.max(this.sent, Number(reply.sent));
    } catch (err) {
      if (!(err instanceof CoordinatorError) || err.status !== 409) throw err;
      outcome = "refused";
      if (err.detail.includes("decided")) this.closed = true;
    }
    this.record.privateSent = Math.max(this.sent, seq);
    this.record.privatePending = null;
    this.persist();
    this.outcomes[outcome] = (this.outcomes[outcome] ?? 0) + 1;
    return outcome;
  }
};
var PrivateAgent = class _PrivateAgent {
  constructor(client, view, record, store, document, etag, draws) {
    this.client = client;
    this.view = view;
    this.record = record;
    this.store = store;
    this.draws = draws;
    this.resumed = false;
    this.gone = false;
    this.closed = false;
    this.queue = Promise.resolve();
    this.change = null;
    this.waiters = [];
    this.listeners = /* @__PURE__ */ new Set();
    this.unsubscribe = null;
    this.releaseFollower = null;
    this.etag = etag;
    this.protocol = new PrivateProtocol(view.experiment, record, () => this.persist(), document);
    this.transport = clientTransport(client);
  }
  /** Called by `enroll` for an LDP experiment (its document just read, the agent restored or
   * enrolled); a report pending from the last run is sent again. */
  static async open(options, client, view, record, store, resumed, document, etag, draws = cryptoDraws()) {
    const agent = new _PrivateAgent(client, view, record, store, document, etag, draws);
    agent.resumed = resumed;
    if (options.follow ?? true) {
      const { follower, release } = shareFollower(options.coordinator, options.experiment, {
        pollMs: options.pollMs,
        timeoutMs: options.timeoutMs,
        retryMaxMs: Math.max(options.retryMaxMs ?? 3e4, 6e4)
      });
      agent.follow(follower, release);
    }
    if (resumed) await agent.resendPending();
    return agent;
  }
  // -- what the application calls -----------------------------------------------------------
  /** One arm: the identified one, else drawn from the allocation as last read, with the
   * device's own uniform. Throws ExperimentGone if the experiment was deleted. */
  choose() {
    this.check();
    this.catchUp();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    return [this.protocol.choose(this.draws.random())];
  }
  /** The reward of the arm `choose` gave: privatized and reported while reports are left; the
   * arms reported now ([arm], or [] once spent or decided; a report an earlier call could not
   * deliver is sent first, in its place). A reward the experiment does not
   * take is refused (RangeError), nothing sent. Afterwards the allocation is read again (while
   * reports are left), so that the next `choose` draws from the current one. */
  async observe(arms, rewards) {
    if (!Array.isArray(arms) || !Array.isArray(rewards) || arms.length !== 1 || rewards.length !== 1) {
      throw new TypeError("observe(arms, rewards): the one arm choose() gave, and its reward");
    }
    this.check();
    const [arm] = arms;
    const [reward] = rewards;
    this.protocol.check(arm, reward);
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    this.protocol.decide(arm, reward, this.draws.random(), this.draws.random());
    const pending = this.record.privatePending;
    if (pending === null) return [];
    const outcome = await this.run(() => run(this.protocol.deliver(), this.transport));
    if (!this.protocol.spent && !this.protocol.decided) await this.refresh();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    return outcome === "counted" || outcome === "duplicate" ? [pending[0]] : [];
  }
  /** Read the experiment document now (If-None-Match); true if it changed. */
  refresh() {
    return this.run(() => this.read());
  }
  /** What the coordinator counted of this device's own reports (GET /v1/agents/me, its own
   * token): `reports_sent`, `reports_left`, and `waiting`, the experiment's counted messages not
   * yet in the public counts (published `publish_batch` at a time). */
  me() {
    return this.run(() => this.client.me(this.record.token));
  }
  /** Resolves once every report decided so far is answered and saved. */
  async flush() {
    await this.queue;
    await this.store.flush();
  }
  /** Resolves true at the next change the follower learns of, false after `timeoutMs`. */
  waitForChange(timeoutMs = 3e4) {
    if (this.change !== null) return Promise.resolve(true);
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== wake);
        resolve(false);
      }, timeoutMs);
      this.waiters.push(wake);
    });
  }
  /** Calls `listener(agent)` at each change the follower learns of; returns what stops it. */
  onChange(listener) {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }
  async close() {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe?.();
    this.releaseFollower?.();
    for (const wake of this.waiters.splice(0)) wake();
    this.client.close();
    await this.queue.catch(() => void 0);
    this.persist();
    await this.store.flush().catch(() => void 0);
    await this.store.release();
  }
  // -- what the application may read --------------------------------------------------------
  get experiment() {
    return this.view.experiment;
  }
  get agentId() {
    return this.record.agentId;
  }
  get arms() {
    return this.view.arms.slice();
  }
  get remaining() {
    this.catchUp();
    return Array.from(this.protocol.remaining).sort((a, b) => a - b);
  }
  /** exploring, identified, or deleted (as far as this device read). */
  get status() {
    this.catchUp();
    return this.gone ? "deleted" : this.protocol.status;
  }
  get bestArm() {
    const remaining = this.remaining;
    return remaining.length === 1 ? remaining[0] : null;
  }
  /** Nothing more to send: decided (or deleted), or every report sent. */
  get done() {
    this.catchUp();
    return this.gone || this.protocol.decided || this.protocol.spent;
  }
  /** Every report sent: choose still gives an arm, nothing more leaves. */
  get settled() {
    return this.protocol.spent;
  }
  get reported() {
    return this.protocol.sent > 0 || this.record.privatePending !== null;
  }
  /** Reports sent and answered (counted, or refused: each a release). */
  get sent() {
    return this.protocol.sent;
  }
  /** Reports it may still send: B less those sent and the one pending. */
  get reportsLeft() {
    return this.protocol.reportsLeft;
  }
  get allocation() {
    return this.protocol.allocation.slice();
  }
  /** Every arm's estimate (reports, mean, ci) as last read. */
  get estimates() {
    this.catchUp();
    return this.protocol.estimates;
  }
  get lift() {
    return this.protocol.lift;
  }
  // -- inside -------------------------------------------------------------------------------
  check() {
    if (this.closed) throw new Error("this agent is closed");
  }
  run(work) {
    const next = this.queue.then(work).catch((err) => {
      if (err instanceof CoordinatorError && err.status === 404) {
        this.gone = true;
        return void 0;
      }
      throw err;
    });
    this.queue = next.catch(() => void 0);
    return next;
  }
  resendPending() {
    return this.run(() => run(this.protocol.deliver(), this.transport));
  }
  async read() {
    const seq = nextSeq();
    const reply = await this.client.experimentIfChanged(this.view.experiment, this.etag);
    if (reply.status === 304 || reply.body === null) return false;
    this.etag = reply.etag;
    this.view.update(reply.body, seq);
    if (this.view.replaced) {
      this.gone = true;
      return false;
    }
    this.protocol.update(reply.body);
    return true;
  }
  follow(follower, release) {
    this.releaseFollower = release;
    if (follower.latest !== null) this.change = follower.latest;
    this.unsubscribe = follower.subscribe((change) => {
      this.change = change;
      for (const wake of this.waiters.splice(0)) wake();
      this.catchUp();
    });
  }
  /** A change the follower saw: the deletion, or the document read again (its allocation,
   * estimates), then the listeners called. */
  catchUp() {
    if (this.closed) return;
    const change = this.change;
    this.change = null;
    if (change === null || this.gone) return;
    if (change.state === null) {
      this.gone = true;
      this.notify();
      return;
    }
    this.run(() => this.read()).then(() => this.notify()).catch(() => void 0);
  }
  notify() {
    for (const listener of Array.from(this.listeners)) {
      try {
        listener(this);
      } catch (err) {
        console.error("dexp: an onChange listener failed", err);
      }
    }
  }
  /** Save the record (credentials, reports sent, the pending report). */
  persist() {
    this.store.save(this.record.toSaved(this.view.experiment, this.view.createdAt, void 0));
  }
};

// src/storage.ts
var AgentLocked = class extends Error {
  constructor(where) {
    super(`${where} is held by another tab or process running the same agent: close it first`);
    this.name = "AgentLocked";
  }
};
var LOCK_WAIT_MS = 1e4;
var BrowserStore = class {
  constructor(key, storage, lockWaitMs = LOCK_WAIT_MS) {
    this.key = key;
    this.storage = storage;
    this.lockWaitMs = lockWaitMs;
    this.unlock = null;
  }
  get where() {
    return `localStorage[${JSON.stringify(this.key)}]`;
  }
  async lock() {
    const locks = globalThis.navigator?.locks;
    if (locks === void 0) return;
    const signal = AbortSignal.timeout(this.lockWaitMs);
    await new Promise((granted, refused) => {
      locks.request(`dexp:${this.key}`, { signal }, () => {
        granted();
        return new Promise((resolve) => {
          this.unlock = resolve;
        });
      }).catch(() => refused(new AgentLocked(this.where)));
    });
  }
  async load() {
    const text = this.storage.getItem(this.key);
    return text === null ? null : JSON.parse(text);
  }
  save(state) {
    this.storage.setItem(this.key, JSON.stringify(state));
  }
  async flush() {
  }
  async release() {
    this.unlock?.();
    this.unlock = null;
  }
};
var FileStore = class _FileStore {
  constructor(path) {
    this.path = path;
    this.writing = Promise.resolve();
    this.next = null;
    this.locked = false;
  }
  get where() {
    return this.path;
  }
  static fs() {
    const name = "node:fs/promises";
    return import(name);
  }
  async lock() {
    const fs = await _FileStore.fs();
    const lockPath = `${this.path}.lock`;
    const pid = globalThis.process;
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        await fs.writeFile(lockPath, String(pid?.pid ?? 0), { flag: "wx", mode: 384 });
        this.locked = true;
        return;
      } catch (err) {
        if (err.code !== "EEXIST") throw err;
        const holder = Number(await fs.readFile(lockPath, "utf8").catch(() => "0"));
        if (holder > 0 && alive(holder, pid)) throw new AgentLocked(this.path);
        await fs.rm(lockPath, { force: true });
      }
    }
    throw new AgentLocked(this.path);
  }
  async load() {
    const fs = await _FileStore.fs();
    try {
      return JSON.parse(await fs.readFile(this.path, "utf8"));
    } catch (err) {
      if (err.code === "ENOENT") return null;
      throw err;
    }
  }
  save(state) {
    const first = this.next === null;
    this.next = state;
    if (!first) return;
    this.writing = this.writing.then(async () => {
      const text = JSON.stringify(this.next);
      this.next = null;
      const fs = await _FileStore.fs();
      const temporary = `${this.path}.tmp`;
      const file = await fs.open(temporary, "w", 384);
      try {
        await file.writeFile(text);
        await file.sync();
      } finally {
        await file.close();
      }
      await fs.rename(temporary, this.path);
    });
    this.writing.catch((err) => console.error(`dexp: could not write ${this.path}`, err));
  }
  async flush() {
    await this.writing;
  }
  async release() {
    if (!this.locked) return;
    this.locked = false;
    await this.flush().catch(() => void 0);
    await (await _FileStore.fs()).rm(`${this.path}.lock`, { force: true });
  }
};
var MemoryStore = class {
  constructor() {
    this.state = null;
    this.where = "memory";
  }
  async lock() {
  }
  async load() {
    return this.state;
  }
  save(state) {
    this.state = JSON.parse(JSON.stringify(state));
  }
  async flush() {
  }
  async release() {
  }
};
function alive(pid, process) {
  try {
    process?.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === "EPERM";
  }
}
function defaultStore(storageKey, stateFile, lockWaitMs = LOCK_WAIT_MS) {
  const storage = globalThis.localStorage;
  if (stateFile === void 0 && storage !== void 0) return new BrowserStore(storageKey, storage, lockWaitMs);
  const isNode = typeof globalThis.process?.versions?.node === "string";
  if (!isNode) throw new Error("no localStorage here, and not Node: pass `storage`");
  return new FileStore(stateFile ?? `${storageKey}.json`);
}

// src/view.ts
function corruptedLocalConfidence(eta, xi, nArms) {
  if (xi === 0) return eta;
  const etaXi = 1 - (1 - eta) / (1 - xi) ** (nArms - 1);
  if (!(etaXi > 0)) throw new RangeError(`xi=${xi}: eta_xi = ${etaXi} <= 0 with eta=${eta}, K=${nArms}`);
  return etaXi;
}
function agentSpec(params, nArms, sigma, pullsPerArm = null) {
  const algorithm = String(params.algorithm);
  const subroutine = algorithm === "cde" ? "fixed-budget" : algorithm === "dp-mase" ? "dp-se" : String(params.subroutine);
  const confidence = {
    de: () => params.eta,
    cde: () => params.eta,
    ce: () => corruptedLocalConfidence(params.eta, params.xi, nArms),
    "dp-mase": () => params.beta
  };
  const local = confidence[algorithm];
  if (local === void 0) {
    throw new RangeError(`algorithm ${algorithm}: not an agent's (de, ce, dp-mase or cde)`);
  }
  return {
    n_arms: nArms,
    subroutine,
    params: {
      epsilon: params.epsilon,
      confidence: local(),
      sigma,
      every_arm: Boolean(params.every_arm),
      phi: params.phi ?? 0,
      dp_epsilon: params.dp_epsilon ?? 0.1,
      pulls: algorithm === "cde" ? pullsPerArm : null
    },
    vote_drop: algorithm === "ce" ? params.xi : 0,
    report_privacy: algorithm === "cde" ? params.privacy : null
  };
}
var GlobalView = class _GlobalView {
  constructor(experiment, arms, params, sigma, createdAt, rewards = "bounded", pullsPerArm = null) {
    this.experiment = experiment;
    this.arms = arms;
    this.params = params;
    this.sigma = sigma;
    this.createdAt = createdAt;
    this.rewards = rewards;
    this.pullsPerArm = pullsPerArm;
    this.remaining = /* @__PURE__ */ new Set();
    this.version = -1;
    this.epoch = 0;
    this.epochStartedAt = null;
    this.status = "exploring";
    this.votes = [];
    this.snapshotSeq = 0;
    this.regressedAt = -1;
    this.losses = 0;
    this.lostAt = -1;
    this.counts = /* @__PURE__ */ new Map();
    /** A read showed another `created_at`: deleted and created again; this agent is not in it. */
    this.replaced = false;
  }
  static async fetch(client, experiment) {
    const seq = nextSeq();
    return _GlobalView.of(experiment, await client.experiment(experiment), seq);
  }
  /** The view of a document read (GET /v1/experiments/{id}) after sequence number `seq`. */
  static of(experiment, state, seq) {
    const view = new _GlobalView(
      experiment,
      state.arms.map(String),
      state.params,
      state.sigma ?? null,
      Number(state.created_at ?? 0),
      String(state.rewards ?? "bounded"),
      state.pulls_per_arm === void 0 || state.pulls_per_arm === null ? null : Number(state.pulls_per_arm)
    );
    view.update(state, seq);
    return view;
  }
  get spec() {
    return agentSpec(this.params, this.arms.length, this.sigma, this.pullsPerArm);
  }
  get bernoulli() {
    return this.rewards === "bernoulli";
  }
  get globalReset() {
    return this.params.algorithm !== "cde" && this.params.subroutine === "ser4";
  }
  get identified() {
    return this.remaining.size === 1;
  }
  /** Take a state read (GET of the experiment); true if the global set changed. */
  update(state, seq) {
    const createdAt = Number(state.created_at ?? this.createdAt);
    if (this.createdAt && createdAt !== this.createdAt) {
      this.replaced = true;
      return false;
    }
    const epoch = Number(state.epoch);
    const version = Number(state.version);
    const remaining = new Set(state.remaining_arms.map(Number));
    this.snapshotSeq = seq ?? nextSeq();
    this.votes = (state.votes ?? []).map(Number);
    if (epoch < this.epoch || epoch === this.epoch && version < this.version) {
      this.regressedAt = this.snapshotSeq;
      this.noteLoss();
    }
    const changed = epoch !== this.epoch || version !== this.version || !sameSet(remaining, this.remaining);
    if (epoch !== this.epoch) this.counts = /* @__PURE__ */ new Map();
    const started = state.epoch_started_at === void 0 || state.epoch_started_at === null ? null : Number(state.epoch_started_at);
    if (epoch === this.epoch && started !== null && this.epochStartedAt !== null && started !== this.epochStartedAt) {
      this.counts = /* @__PURE__ */ new Map();
      this.noteLoss();
    }
    if (started !== null || epoch !== this.epoch) this.epochStartedAt = started;
    this.epoch = epoch;
    this.version = version;
    this.remaining = remaining;
    this.status = remaining.size === 1 ? "identified" : state.status ?? "exploring";
    this.votes.forEach((count, arm) => this.observeCount(arm, epoch, count));
    return changed;
  }
  observeCount(arm, epoch, votes) {
    if (epoch !== this.epoch) return;
    if (votes < (this.counts.get(arm) ?? 0)) this.noteLoss();
    this.counts.set(arm, votes);
  }
  noteLoss() {
    this.losses += 1;
    this.lostAt = nextSeq();
  }
  stale(version, epoch) {
    return epoch !== this.epoch || version !== this.version;
  }
  async refresh(client) {
    const seq = nextSeq();
    return this.update(await client.experiment(this.experiment), seq);
  }
  /** A state the follower got (another connection: not ordered with the agent's own requests).
   * Older than the view's last read: dropped; behind its (epoch, version): read again (the
   * read tells a loss from a late event); newer: taken as it is. Returns "refresh" when the
   * caller must read the state again, else whether the global set changed. */
  follow(state, seq) {
    if (seq <= this.snapshotSeq) return false;
    const epoch = Number(state.epoch);
    const version = Number(state.version);
    if (epoch < this.epoch || epoch === this.epoch && version < this.version) return "refresh";
    const started = state.epoch_started_at;
    const same = sameSet(new Set(state.remaining_arms.map(Number)), this.remaining) && (started === void 0 || started === null || Number(started) === this.epochStartedAt);
    if (epoch === this.epoch && version === this.version && same && !("created_at" in state)) return false;
    return this.update(state, seq);
  }
};
function sameSet(a, b) {
  if (a.size !== b.size) return false;
  for (const x of a) if (!b.has(x)) return false;
  return true;
}

// src/device.ts
var EnrollmentRefused = class extends Error {
  constructor(message2) {
    super(message2);
    this.name = "EnrollmentRefused";
  }
};
var ExperimentGone = class extends Error {
  constructor(experiment) {
    super(`experiment ${experiment} was deleted`);
    this.name = "ExperimentGone";
  }
};
var DeviceAgent = class _DeviceAgent {
  constructor(client, view, record, local, store, reconcileMs) {
    this.client = client;
    this.view = view;
    this.record = record;
    this.local = local;
    this.store = store;
    this.reconcileMs = reconcileMs;
    /** Restored from storage: no new enrollment. */
    this.resumed = false;
    /** The experiment was deleted (or deleted and created again). */
    this.gone = false;
    this.closed = false;
    this.queue = Promise.resolve();
    this.failure = null;
    this.change = null;
    this.waiters = [];
    this.unsubscribe = null;
    this.releaseFollower = null;
    this.onPageHide = null;
    this.listeners = /* @__PURE__ */ new Set();
    this.reconciling = false;
    const hooks = { persist: () => this.persist(), lostEpoch: () => this.restartLocal(), jitter: Math.random };
    this.protocol = new DeviceProtocol(view, record, hooks, reconcileMs, Date.now() + reconcileMs * (1 + Math.random()));
    this.transport = clientTransport(client);
  }
  get votesSent() {
    return this.protocol.votesSent;
  }
  get votesResent() {
    return this.protocol.votesResent;
  }
  get reportsSent() {
    return this.protocol.reportsSent;
  }
  get settledSent() {
    return this.protocol.settledSent;
  }
  get resetsLimited() {
    return this.protocol.resetsLimited;
  }
  get checks() {
    return this.protocol.checks;
  }
  /** See the module's doc and `enroll`. */
  static async start(options) {
    const client = new CoordinatorClient(options.coordinator, { timeoutMs: options.timeoutMs, retryMaxMs: options.retryMaxMs });
    const store = options.storage ?? (options.storageKey || options.stateFile ? defaultStore(options.storageKey ?? "dexp-agent", options.stateFile, options.lockWaitMs) : new MemoryStore());
    const draws = options.draws ?? cryptoDraws();
    let locked = false;
    try {
      await store.lock();
      locked = true;
      const seq = nextSeq();
      const read = await client.experimentIfChanged(options.experiment, null);
      const view = GlobalView.of(options.experiment, read.body, seq);
      if (view.params.algorithm === "ldp") {
        const { saved: saved2, record: record2 } = await restoreOrEnroll(client, view, store, options.ticket);
        return await PrivateAgent.open(options, client, view, record2, store, saved2 !== null, read.body, read.etag, draws);
      }
      const spec = view.spec;
      subroutineClass(spec.subroutine);
      const { saved, record } = await restoreOrEnroll(client, view, store, options.ticket);
      const local = saved?.local !== void 0 ? LocalAgent.fromState(spec, saved.local, draws) : new LocalAgent(spec, draws);
      if (saved?.local === void 0) local.epoch = view.epoch;
      for (const arm of record.decided(local.epoch)) local.voted.add(arm);
      const agent = new _DeviceAgent(client, view, record, local, store, options.reconcileMs ?? 3e5);
      agent.resumed = saved !== null;
      if (options.follow ?? true) {
        const { follower, release } = shareFollower(options.coordinator, options.experiment, {
          pollMs: options.pollMs,
          timeoutMs: options.timeoutMs,
          retryMaxMs: Math.max(options.retryMaxMs ?? 3e4, 6e4)
        });
        agent.follow(follower, release);
      }
      const page = globalThis;
      if (typeof page.addEventListener === "function") {
        agent.onPageHide = () => agent.persist();
        page.addEventListener("pagehide", agent.onPageHide);
      }
      if (agent.resumed) {
        await agent.resendPending();
        agent.protocol.nextCheck = 0;
      }
      return agent;
    } catch (err) {
      client.close();
      if (locked) await store.release();
      throw err;
    }
  }
  follow(follower, release) {
    this.releaseFollower = release;
    if (follower.latest !== null) this.change = follower.latest;
    this.unsubscribe = follower.subscribe((change) => {
      this.change = change;
      const waiters = this.waiters;
      this.waiters = [];
      for (const wake of waiters) wake();
      if (this.listeners.size === 0) return;
      this.catchUp();
      for (const listener of Array.from(this.listeners)) {
        try {
          listener(this);
        } catch (err) {
          console.error("dexp: an onChange listener failed", err);
        }
      }
    });
  }
  /** Calls `listener(agent)` at each change of the global set the follower learns of (an arm
   * out, a reset, the identification, a tie, the deletion): read `status`, `remaining`... in it.
   * Returns the function that stops it. */
  onChange(listener) {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }
  /** Resolves once every vote, report or message decided so far is answered and saved (a page
   * may await it before navigating away; `observe` already saved what it decided). */
  async flush() {
    await this.queue;
    this.check();
    await this.store.flush();
  }
  // -- what the application calls -----------------------------------------------------------
  /** The arms to play now (indices into `arms`): usually one. Once identified, that arm; settled
   * (one arm left locally), that arm (its rewards teach nothing more); under CDE, none between
   * its report and the answer. Throws ExperimentGone if the experiment was deleted. */
  choose() {
    this.check();
    this.catchUp();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    this.syncLocal();
    this.reconcileSoon();
    if (this.view.identified) return Array.from(this.view.remaining);
    if (this.local.reports) return this.reported || this.local.done ? [] : this.local.select();
    return this.local.done ? this.local.localArms : this.local.select();
  }
  /** The rewards of the arms `choose` gave, in the same order: the arms it voted against
   * (usually none). The rewards stay on the device. */
  async observe(arms, rewards) {
    if (!Array.isArray(arms) || !Array.isArray(rewards) || arms.length !== rewards.length) {
      throw new TypeError("observe(arms, rewards): two arrays of the same length (the arms choose() gave)");
    }
    for (const reward of rewards) {
      if (typeof reward !== "number" || !Number.isFinite(reward)) throw new TypeError(`observe: reward ${reward} is not a finite number`);
      if (this.view.bernoulli && reward !== 0 && reward !== 1) {
        throw new RangeError(
          `observe: reward ${reward} refused: this experiment's rewards are declared Bernoulli, every reward must be 0 or 1 (its budget is certified for those only); nothing was recorded`
        );
      }
    }
    this.check();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    let votes = [];
    if (!this.local.reports) {
      if (!this.local.done) votes = this.local.observe(arms, rewards);
      this.decide(votes);
    } else if (!this.reported && !this.local.done) {
      this.local.observe(arms, rewards);
      if (this.local.report !== null) this.record.report = this.local.report;
    }
    this.persist();
    await this.run(async () => {
      if (this.local.reports) {
        if (this.reported && this.record.reportOutcome === null) await this.deliverReport();
      } else {
        await this.deliverDecided();
        if (this.local.wantsReset()) await this.reset();
        await this.settle();
      }
      await this.reconcile(Date.now());
    });
    this.catchUp();
    if (this.gone) throw new ExperimentGone(this.view.experiment);
    return votes;
  }
  /** Resolves true at the next change of the global set the follower learns of, false after
   * `timeoutMs`: what an agent with nothing to play (settled, or reported) does meanwhile. */
  waitForChange(timeoutMs = 3e4) {
    if (this.change !== null) return Promise.resolve(true);
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== wake);
        resolve(false);
      }, timeoutMs);
      this.waiters.push(wake);
    });
  }
  /** Read the experiment's state now; true if the global set changed. */
  refresh() {
    return this.run(() => this.view.refresh(this.client));
  }
  /** What the coordinator counted of this agent's own messages (GET /v1/agents/me, its own
   * token): `votes` (this epoch's, each `counted` or `arm_out`), `reported` (CDE), `reports_sent`
   * and `reports_left` (LDP), and `waiting`, the experiment's counted messages not yet in the
   * public counts (published `publish_batch` at a time): those may not show this agent's
   * messages yet, this does. Queued after what the agent is sending (`flush` first). */
  me() {
    return this.run(() => this.client.me(this.record.token));
  }
  /** Stop following, save the local statistics, release the storage key. Votes decided and not
   * yet acknowledged are on record: the next start sends them. */
  async close() {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe?.();
    this.releaseFollower?.();
    for (const wake of this.waiters.splice(0)) wake();
    const page = globalThis;
    if (this.onPageHide !== null) page.removeEventListener?.("pagehide", this.onPageHide);
    this.client.close();
    await this.queue.catch(() => void 0);
    this.persist();
    await this.store.flush().catch(() => void 0);
    await this.store.release();
  }
  // -- what the application may read --------------------------------------------------------
  get experiment() {
    return this.view.experiment;
  }
  get agentId() {
    return this.record.agentId;
  }
  /** The arms' names, by index. */
  get arms() {
    return this.view.arms.slice();
  }
  /** The global set, as far as this agent knows. */
  get remaining() {
    this.catchUp();
    return Array.from(this.view.remaining).sort((a, b) => a - b);
  }
  get epoch() {
    this.catchUp();
    return this.view.epoch;
  }
  /** exploring, identified (one arm left), tied (several left, none can reach the threshold
   * with the agents enrolled), or deleted. */
  get status() {
    this.catchUp();
    return this.gone ? "deleted" : this.view.status;
  }
  /** The identified arm's index (null until then). */
  get bestArm() {
    const remaining = this.remaining;
    return remaining.length === 1 ? remaining[0] : null;
  }
  /** The experiment ended (identified, tied or deleted). A tie reopens if agents enroll. */
  get done() {
    return this.status !== "exploring";
  }
  /** Its local set holds one arm (no vote until the global set changes), or under CDE its
   * report is drawn: `waitForChange` rather than play. */
  get settled() {
    return this.local.done || this.reported;
  }
  /** CDE: its one report is drawn (sent, or to be sent again at the next start). */
  get reported() {
    return this.record.report !== null;
  }
  // -- inside -------------------------------------------------------------------------------
  /** A request failure of the queued work (not a 404: that is `gone`) is thrown at the next call. */
  check() {
    if (this.closed) throw new Error("this agent is closed");
    if (this.failure !== null) {
      const failure = this.failure;
      this.failure = null;
      throw failure;
    }
  }
  /** `work` after what is queued; a 404 marks the experiment gone. */
  run(work) {
    const next = this.queue.then(work).catch((err) => {
      if (err instanceof CoordinatorError && err.status === 404) {
        this.gone = true;
        return void 0;
      }
      throw err;
    });
    this.queue = next.catch(() => void 0);
    return next;
  }
  /** Queued work whose failure is thrown at the next call (choose has no promise to reject). */
  background(work) {
    this.run(work).catch((err) => {
      if (!this.closed) this.failure = err;
    });
  }
  catchUp() {
    if (this.closed) return;
    const change = this.change;
    this.change = null;
    if (change !== null && !this.gone) {
      if (change.state === null) {
        this.gone = true;
      } else if (this.view.follow(change.state, change.seq) === "refresh") {
        this.background(async () => {
          await this.view.refresh(this.client);
        });
      }
    }
    if (this.view.replaced) this.gone = true;
  }
  syncLocal() {
    this.forgetLostEpoch();
    const epoch = this.local.epoch;
    const votes = this.local.sync(this.view.remaining, this.view.epoch);
    if (this.local.epoch !== epoch) for (const arm of this.record.decided(this.local.epoch)) this.local.voted.add(arm);
    this.decide(votes);
    if (votes.length > 0 || this.view.params.algorithm === "ce" && this.local.done) {
      this.background(async () => {
        await this.deliverDecided();
        await this.settle();
      });
    }
  }
  /** Votes of an epoch a failover lost forgotten (the protocol's), the local agent restarted. */
  forgetLostEpoch() {
    this.protocol.forgetLostEpoch();
  }
  /** The current epoch began with a reset this agent did not see as one: restart as it asks. */
  restartLocal() {
    this.local.voted = new Set(this.record.decided(this.view.epoch));
    if (!this.local.reports) this.local.reset(this.view.remaining);
  }
  /** One exchange of the protocol through the coordinator client. */
  exchange(exchange) {
    return run(exchange, this.transport);
  }
  /** Save the record and the local statistics (the whole state: one small JSON document). */
  persist() {
    this.store.save(this.record.toSaved(this.view.experiment, this.view.createdAt, this.local.toState()));
  }
  /** Votes decided: on record as pending (and saved) before they are sent. */
  decide(votes) {
    this.protocol.decide(votes);
  }
  /** Send the pending votes of the current epoch, in order. */
  async deliverDecided() {
    await this.exchange(this.protocol.deliverDecided());
  }
  async deliverReport() {
    await this.exchange(this.protocol.deliverReport());
  }
  /** DSER4: ask for a new epoch; refused (429) or waiting for more agents, reset locally only. */
  async reset() {
    if (this.view.globalReset && await this.exchange(this.protocol.reset())) {
      await this.exchange(this.protocol.refresh());
      this.syncLocal();
      return;
    }
    this.local.reset(this.view.remaining);
  }
  /** CE only: tell the coordinator this agent settled, once per settle, again when it forgot. */
  async settle() {
    await this.exchange(this.protocol.settle(this.local.done, this.local.epoch));
  }
  /** After a restart: the votes decided and not seen acknowledged, and CDE's unanswered report,
   * sent again (a second copy is a duplicate, harmless). Pending votes of another epoch dropped. */
  resendPending() {
    return this.run(() => this.exchange(this.protocol.resendPending()));
  }
  /** Why to ask the coordinator for this agent's votes now (protocol.ts checkReason). */
  checkReason(now) {
    return this.protocol.checkReason(now);
  }
  /** The check of its own votes, queued if due (choose is where a settled agent still comes). */
  reconcileSoon() {
    if (this.reconciling || this.checkReason(Date.now()) === null) return;
    this.reconciling = true;
    this.background(async () => {
      try {
        await this.reconcile(Date.now());
      } finally {
        this.reconciling = false;
      }
    });
  }
  /** If checkReason says so: GET /v1/agents/me, and the acknowledged votes it lacks sent again. */
  async reconcile(now) {
    await this.exchange(this.protocol.reconcile(now));
  }
};
async function restoreOrEnroll(client, view, store, ticket) {
  let saved = await store.load();
  if (saved !== null && saved.experiment !== view.experiment) {
    throw new EnrollmentRefused(
      `${store.where} holds an agent of experiment ${saved.experiment}, not ${view.experiment}: give each experiment its own storageKey`
    );
  }
  if (saved !== null && saved.created_at !== view.createdAt) saved = null;
  if (saved !== null) {
    try {
      await client.me(saved.token);
    } catch (err) {
      if (!(err instanceof CoordinatorError) || err.status !== 401) throw err;
      if (!ticket) {
        throw new EnrollmentRefused(
          `the coordinator no longer knows agent ${saved.agent_id} (401: its data was lost): enroll a new agent with a new ticket`
        );
      }
      saved = null;
    }
  }
  if (saved !== null) return { saved, record: AgentRecord.fromSaved(saved) };
  const record = new AgentRecord(...await enrollWith(client, view, ticket, store.where));
  store.save(record.toSaved(view.experiment, view.createdAt, void 0));
  await store.flush();
  return { saved: null, record };
}
async function enrollWith(client, view, ticket, where) {
  if (!ticket) {
    throw new EnrollmentRefused(
      `no agent of experiment ${view.experiment} is saved in ${where}: a ticket is needed to enroll one (\`dexp tickets issue ${view.experiment} --count 1\`)`
    );
  }
  try {
    const reply = await client.enroll(ticket, view.experiment);
    return [String(reply.agent_id), String(reply.token)];
  } catch (err) {
    const why = {
      401: "the ticket is unknown, used, expired or another experiment's: ask for a new ticket",
      403: "the experiment has its maximum of agents: try later"
    };
    if (err instanceof CoordinatorError && why[err.status] !== void 0) {
      throw new EnrollmentRefused(`enrollment refused (${err.message}): ${why[err.status]}`);
    }
    throw err;
  }
}
function enroll(options) {
  return DeviceAgent.start(options);
}
export {
  AgentLocked,
  AgentRecord,
  ArmSelection,
  BrowserStore,
  ClientClosed,
  CoordinatorClient,
  CoordinatorError,
  DEFAULT_PARAMS,
  DPSuccessiveElimination,
  DeviceAgent,
  DeviceProtocol,
  EnrollmentRefused,
  ExperimentGone,
  FileStore,
  FixedBudget,
  GlobalSetFollower,
  GlobalView,
  KLLUCB,
  KLSuccessiveElimination,
  LUCB,
  LocalAgent,
  MemoryStore,
  PrivateAgent,
  PrivateProtocol,
  RateLimited,
  SER3,
  SER4,
  SSEParser,
  SUBROUTINES,
  StitchedLUCB,
  StitchedSuccessiveElimination,
  SuccessiveElimination,
  VERSION,
  agentSpec,
  checkParams,
  clientTransport,
  coordinatorUrls,
  corruptedLocalConfidence,
  cryptoDraws,
  defaultStore,
  dpEliminationGap,
  dpEpochLength,
  drawArm,
  eliminationLevel,
  eliminationRadius,
  enroll,
  inertDraws,
  keepProbability,
  klBernoulli,
  klLower,
  klLucbLevel,
  klUpper,
  lucbRadius,
  message,
  privatize,
  randomize,
  replayDraws,
  reportProbabilities,
  reportReward,
  restoreOrEnroll,
  run,
  samplesPerArm,
  shareFollower,
  stitchedRadius,
  subroutineClass,
  unitReward
};
