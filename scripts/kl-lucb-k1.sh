#!/bin/bash
# docs/SUBROUTINES.md (KL-LUCB's k1) and docs/RESULTS.md section 8.6: one agent's local failure
# rate with kl-lucb at k1 = 11 (the code's) and at k1 = 405.5 (before). The level is
# log(k1 K t^1.1 / eta): k1 = 405.5 at eta = 0.9 is k1 = 11 at eta = 0.9 * 11 / 405.5, which is
# how the second is run. Each line: "instance k1 failures/runs [95% Wilson] mean samples".
# One agent's confidence is delta / N = delta (--algorithm independent --agents 1).
declare -A MEANS EPS RUNS SEED
MEANS[problem-1]="0.7,0.5,0.3$(printf ',0.1%.0s' $(seq 7))"; EPS[problem-1]=0.25; RUNS[problem-1]=100000; SEED[problem-1]=7
MEANS[two-arms]="0.7,0.3"; EPS[two-arms]=0.39; RUNS[two-arms]=10000; SEED[two-arms]=5
MEANS[two-edge]="0.5,0.24"; EPS[two-edge]=0.25; RUNS[two-edge]=10000; SEED[two-edge]=5
MEANS[k50-edge]="0.5$(printf ',0.24%.0s' $(seq 49))"; EPS[k50-edge]=0.25; RUNS[k50-edge]=10000; SEED[k50-edge]=5
MEANS[k10-close]="0.5$(printf ',0.44%.0s' $(seq 9))"; EPS[k10-close]=0.05; RUNS[k10-close]=10000; SEED[k10-close]=5
MEANS[k20-half]="0.55$(printf ',0.45%.0s' $(seq 19))"; EPS[k20-half]=0.09; RUNS[k20-half]=10000; SEED[k20-half]=5
cd "$(dirname "$0")/.." || exit 1
for inst in problem-1 two-arms two-edge k50-edge k10-close k20-half; do
  for k1 in 11 405.5; do
    eta=$(python3 -c "print(0.9 * 11 / $k1)")
    out=$(python3 -m dexp simulate --algorithm independent --agents 1 --delta "$eta" --epsilon "${EPS[$inst]}" --means "${MEANS[$inst]}" --subroutine kl-lucb --trials "${RUNS[$inst]}" --seed "${SEED[$inst]}" --workers 2 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin)['summary']; print(f\"{d['failures']}/${RUNS[$inst]}\", d['failure_rate_ci95'], round(d['sample_complexity']['mean']))")
    echo "$inst k1=$k1 $out"
  done
done
