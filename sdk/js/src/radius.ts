/** Confidence radii, written in the same order of operations as common/subroutines/radius.py and
 * bounds.py so that both languages compute the same IEEE doubles. */

/** sqrt(log(4 K r^2 / conf) / (2 r)); sub-Gaussian: sigma sqrt(2 log(.) / r). */
export function eliminationRadius(
  rounds: number,
  nArms: number,
  confidence: number,
  sigma: number | null,
): number {
  const logTerm = Math.log((4.0 * nArms * rounds * rounds) / confidence);
  if (sigma === null) return Math.sqrt(logTerm / (2.0 * rounds));
  return sigma * Math.sqrt((2.0 * logTerm) / rounds);
}

export const STITCH_SCALE = 1.7;
export const STITCH_LOGLOG = 0.72;
export const STITCH_ALPHA = 5.2;

/** Howard et al.'s stitched radius at alpha = conf / (2 K) per side and arm. */
export function stitchedRadius(
  pulls: number,
  nArms: number,
  confidence: number,
  sigma: number | null,
): number {
  const scale = sigma === null ? 0.5 : sigma;
  const alpha = confidence / (2.0 * nArms);
  const n = pulls;
  const inner = Math.log(Math.log(2.0 * n)) + STITCH_LOGLOG * Math.log(STITCH_ALPHA / alpha);
  return STITCH_SCALE * scale * Math.sqrt(inner / n);
}

/** R(e) = max(32 log(8 K e^2 / beta) / eps_e^2, 8 log(4 K e^2 / beta) / (eps_dp eps_e)). */
export function dpEpochLength(epoch: number, nArms: number, beta: number, dpEpsilon: number): number {
  const epsE = 2.0 ** -epoch;
  const e2 = epoch * epoch;
  return Math.ceil(
    Math.max(
      (32.0 * Math.log((8.0 * nArms * e2) / beta)) / epsE ** 2,
      (8.0 * Math.log((4.0 * nArms * e2) / beta)) / (dpEpsilon * epsE),
    ),
  );
}

/** 2 (h + c): h = sqrt(log(8 K e^2 / beta) / (2 R)), c = log(4 K e^2 / beta) / (eps_dp R). */
export function dpEliminationGap(
  epoch: number,
  rounds: number,
  nArms: number,
  beta: number,
  dpEpsilon: number,
): number {
  const e2 = epoch * epoch;
  const h = Math.sqrt(Math.log((8.0 * nArms * e2) / beta) / (2.0 * rounds));
  const c = Math.log((4.0 * nArms * e2) / beta) / (dpEpsilon * rounds);
  return 2.0 * (h + c);
}

/** T, CDE's pulls per arm (common/subroutines/fixed_budget.samples_per_arm). */
export function samplesPerArm(epsilon: number, eta: number, nArms: number, sigma: number | null): number {
  const scale = sigma === null ? 1.0 : 4.0 * sigma * sigma;
  return Math.max(1, Math.ceil((scale * Math.log((nArms - 1) / eta)) / (epsilon * epsilon) - 1e-9));
}

/** LUCB1's beta(u, t) = sqrt(log(5 K t^4 / (4 conf)) / (2 u)) (Kalyanakrishnan et al. 2012). */
export function lucbRadius(
  pulls: number,
  time: number,
  nArms: number,
  confidence: number,
  sigma: number | null,
): number {
  const logTerm = Math.log((5.0 * nArms * time ** 4) / (4.0 * confidence));
  if (sigma === null) return Math.sqrt(logTerm / (2.0 * pulls));
  return sigma * Math.sqrt((2.0 * logTerm) / pulls);
}

export const KL_ITERATIONS = 30;
export const KL_TOLERANCE = 1e-9;
export const KL_EDGE = 1e-12;
export const KL_LUCB_ALPHA = 1.1;
export const KL_LUCB_K1 = 11.0;

/** kl(p, q), the Bernoulli relative entropy, with 0 log 0 = 0. */
export function klBernoulli(p: number, q: number): number {
  let out = 0.0;
  if (p > 0.0) out += q > 0.0 ? p * Math.log(p / q) : Infinity;
  if (p < 1.0) out += q < 1.0 ? (1.0 - p) * Math.log((1.0 - p) / (1.0 - q)) : Infinity;
  return out;
}

function newton(mean: number, pulls: number, level: number, q: number): number {
  for (let i = 0; i < KL_ITERATIONS; i++) {
    const g = pulls * klBernoulli(mean, q) - level;
    if (g <= KL_TOLERANCE) break;
    q -= g / ((pulls * (q - mean)) / (q * (1.0 - q)));
  }
  return q;
}

/** The largest q in [mean, 1] with pulls kl(mean, q) <= level (Newton from above). */
export function klUpper(mean: number, pulls: number, level: number): number {
  mean = Math.min(Math.max(mean, 0.0), 1.0);
  if (mean >= 1.0) return 1.0;
  if (mean <= 0.0) return -Math.expm1(-level / pulls);
  return newton(mean, pulls, level, Math.min(mean + Math.sqrt(level / (2.0 * pulls)), 1.0 - KL_EDGE));
}

/** The smallest q in [0, mean] with pulls kl(mean, q) <= level (Newton from below). */
export function klLower(mean: number, pulls: number, level: number): number {
  mean = Math.min(Math.max(mean, 0.0), 1.0);
  if (mean <= 0.0) return 0.0;
  if (mean >= 1.0) return Math.exp(-level / pulls);
  return newton(mean, pulls, level, Math.max(mean - Math.sqrt(level / (2.0 * pulls)), KL_EDGE));
}

/** log(4 K r^2 / conf), SE's level. */
export function eliminationLevel(rounds: number, nArms: number, confidence: number): number {
  return Math.log((4.0 * nArms * rounds * rounds) / confidence);
}

/** beta(t, conf) = log(k1 K t^alpha / conf), KL-LUCB's exploration rate. */
export function klLucbLevel(time: number, nArms: number, confidence: number): number {
  return Math.log((KL_LUCB_K1 * nArms * time ** KL_LUCB_ALPHA) / confidence);
}
