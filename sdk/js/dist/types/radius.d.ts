/** Confidence radii, written in the same order of operations as common/subroutines/radius.py and
 * bounds.py so that both languages compute the same IEEE doubles. */
/** sqrt(log(4 K r^2 / conf) / (2 r)); sub-Gaussian: sigma sqrt(2 log(.) / r). */
export declare function eliminationRadius(rounds: number, nArms: number, confidence: number, sigma: number | null): number;
export declare const STITCH_SCALE = 1.7;
export declare const STITCH_LOGLOG = 0.72;
export declare const STITCH_ALPHA = 5.2;
/** Howard et al.'s stitched radius at alpha = conf / (2 K) per side and arm. */
export declare function stitchedRadius(pulls: number, nArms: number, confidence: number, sigma: number | null): number;
/** R(e) = max(32 log(8 K e^2 / beta) / eps_e^2, 8 log(4 K e^2 / beta) / (eps_dp eps_e)). */
export declare function dpEpochLength(epoch: number, nArms: number, beta: number, dpEpsilon: number): number;
/** 2 (h + c): h = sqrt(log(8 K e^2 / beta) / (2 R)), c = log(4 K e^2 / beta) / (eps_dp R). */
export declare function dpEliminationGap(epoch: number, rounds: number, nArms: number, beta: number, dpEpsilon: number): number;
/** T, CDE's pulls per arm (common/subroutines/fixed_budget.samples_per_arm). */
export declare function samplesPerArm(epsilon: number, eta: number, nArms: number, sigma: number | null): number;
/** LUCB1's beta(u, t) = sqrt(log(5 K t^4 / (4 conf)) / (2 u)) (Kalyanakrishnan et al. 2012). */
export declare function lucbRadius(pulls: number, time: number, nArms: number, confidence: number, sigma: number | null): number;
export declare const KL_ITERATIONS = 30;
export declare const KL_TOLERANCE = 1e-9;
export declare const KL_EDGE = 1e-12;
export declare const KL_LUCB_ALPHA = 1.1;
export declare const KL_LUCB_K1 = 11;
/** kl(p, q), the Bernoulli relative entropy, with 0 log 0 = 0. */
export declare function klBernoulli(p: number, q: number): number;
/** The largest q in [mean, 1] with pulls kl(mean, q) <= level (Newton from above). */
export declare function klUpper(mean: number, pulls: number, level: number): number;
/** The smallest q in [0, mean] with pulls kl(mean, q) <= level (Newton from below). */
export declare function klLower(mean: number, pulls: number, level: number): number;
/** log(4 K r^2 / conf), SE's level. */
export declare function eliminationLevel(rounds: number, nArms: number, confidence: number): number;
/** beta(t, conf) = log(k1 K t^alpha / conf), KL-LUCB's exploration rate. */
export declare function klLucbLevel(time: number, nArms: number, confidence: number): number;
