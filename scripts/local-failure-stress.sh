#!/bin/bash
# docs/RESULTS.md section 8.6: each line prints "instance subroutine failures [95% Wilson] samples".
# local failure rate of one agent at confidence 0.9 (= eta), 1000 runs each
declare -A MEANS EPS
MEANS[two-edge]="0.5,0.24"; EPS[two-edge]=0.25
MEANS[k50-edge]="0.5$(printf ',0.24%.0s' $(seq 49))"; EPS[k50-edge]=0.25
MEANS[k10-close]="0.5$(printf ',0.44%.0s' $(seq 9))"; EPS[k10-close]=0.05
MEANS[k20-half]="0.55$(printf ',0.45%.0s' $(seq 19))"; EPS[k20-half]=0.09
cd "$(dirname "$0")/.." || exit 1
for inst in two-edge k50-edge k10-close k20-half; do
  for sub in ser3 lucb ugapec kl-se stitched-se kl-lucb stitched-lucb; do
    out=$(python3 -m dexp simulate --algorithm independent --agents 1 --delta 0.9 --epsilon ${EPS[$inst]} --means ${MEANS[$inst]} --subroutine $sub --trials 1000 --seed 5 --workers 2 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin)['summary']; print(d['failures'], d['failure_rate_ci95'], round(d['sample_complexity']['mean']))")
    echo "$inst $sub $out"
  done
done
