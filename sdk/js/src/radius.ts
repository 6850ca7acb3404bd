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
