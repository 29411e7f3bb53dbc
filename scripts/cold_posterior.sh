#!/usr/bin/env bash
# The cold-posterior curve (Wenzel et al. 2020): SGHMC on Fashion-MNIST at temperatures from 1e-3
# to 1, then bdl-report's table of test accuracy, NLL and ECE against T.
#
#     OMP_NUM_THREADS=1 bash scripts/cold_posterior.sh [OUT] [bdl-run overrides ...]
#
# Each run sets temperature=T alone: bdl's per-datum sampler.lr is the same step on U at every
# temperature and the injected noise's variance scales by T (Wenzel et al.'s tempered SGHMC,
# v <- (1 - a) v - eta grad U + N(0, 2 a eta T); bdl.potential). A run that bdl stops (a chain
# judged diverged) is listed by bdl-report under its table, not averaged.
set -euo pipefail
out=${1:-multirun/cold_posterior}
shift || true
bin=$(dirname "$(command -v python)")
for t in 0.001 0.003 0.01 0.03 0.1 0.3 1; do
  "$bin/bdl-run" dataset=fashion_mnist sampler=sghmc temperature="$t" "$@" \
    hydra.run.dir="$out/T$t" || echo "T=$t: the run stopped (its reason above); bdl-report lists it"
done
"$bin/bdl-report" "$out" --by temperature --metrics test_accuracy test_nll test_ece
