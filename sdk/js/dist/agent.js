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
  get budget() {
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
export {
  ArmSelection,
  DEFAULT_PARAMS,
  DPSuccessiveElimination,
  FixedBudget,
  KLLUCB,
  KLSuccessiveElimination,
  LUCB,
  LocalAgent,
  SER3,
  SER4,
  SUBROUTINES,
  StitchedLUCB,
  StitchedSuccessiveElimination,
  SuccessiveElimination,
  checkParams,
  cryptoDraws,
  dpEliminationGap,
  dpEpochLength,
  eliminationLevel,
  eliminationRadius,
  inertDraws,
  klBernoulli,
  klLower,
  klLucbLevel,
  klUpper,
  lucbRadius,
  randomize,
  replayDraws,
  reportProbabilities,
  samplesPerArm,
  stitchedRadius,
  subroutineClass
};
