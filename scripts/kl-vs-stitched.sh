#!/bin/bash
# docs/SUBROUTINES.md section 4 (which to pick): DE's activations with kl-lucb and stitched-lucb,
# at the papers' delta = 0.05 and eta = 0.9, 100 trials, seed 0, on arms near 0, near 1 and near
# 1/2. Each line: "instance eps N subroutine activations [95% CI] failures ratio", ratio = the
# stitched-lucb mean over the kl-lucb mean (above 1: kl-lucb needs fewer activations).
declare -A MEANS EPS
MEANS[problem-1]="0.7,0.5,0.3$(printf ',0.1%.0s' $(seq 7))"; EPS[problem-1]=0.25
MEANS[low-all-eps]="0.15$(printf ',0.05%.0s' $(seq 9))"; EPS[low-all-eps]=0.25
MEANS[low]="0.15$(printf ',0.05%.0s' $(seq 9))"; EPS[low]=0.05
MEANS[high]="0.95$(printf ',0.85%.0s' $(seq 9))"; EPS[high]=0.05
MEANS[mid]="0.55$(printf ',0.45%.0s' $(seq 9))"; EPS[mid]=0.05
MEANS[mid-best-low-rest]="0.5$(printf ',0.05%.0s' $(seq 9))"; EPS[mid-best-low-rest]=0.25
cd "$(dirname "$0")/.." || exit 1
for inst in problem-1 low-all-eps low high mid mid-best-low-rest; do
  for n in 32 256; do
    kl=""
    for sub in kl-lucb stitched-lucb; do
      read -r mean low high fails < <(python3 -m dexp simulate --means "${MEANS[$inst]}" --epsilon "${EPS[$inst]}" --agents "$n" --subroutine "$sub" --trials 100 --seed 0 --workers 2 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin)['summary']; c=d['sample_complexity']; print(round(c['mean']), round(c['ci95'][0]), round(c['ci95'][1]), d['failures'])")
      ratio=""
      if [ -z "$kl" ]; then kl=$mean; else ratio=$(python3 -c "print(f'{$mean / $kl:.2f}')"); fi
      echo "$inst ${EPS[$inst]} $n $sub $mean [$low, $high] $fails/100 $ratio"
    done
  done
done
