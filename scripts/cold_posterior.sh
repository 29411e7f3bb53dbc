#!/usr/bin/env bash
# The cold-posterior curve (Wenzel et al. 2020): SGHMC on Fashion-MNIST at temperatures from 1e-3
# to 1, then bdl-report's table of test accuracy, NLL and ECE against T (mean and standard error
# over the seeds).
#
#     OMP_NUM_THREADS=1 [SEEDS="0 1 2"] [TEMPS="0.1 1"] [SAMPLER=sghmc] [DATASET=fashion_mnist] \
#         bash scripts/cold_posterior.sh [OUT] [bdl-run overrides ...]
#
# Each run sets temperature=T alone: bdl's per-datum sampler.lr is the same step on U at every
# temperature and the injected noise's variance scales by T (Wenzel et al.'s tempered SGHMC,
# v <- (1 - a) v - eta grad U + N(0, 2 a eta T); bdl.potential). Runs go to OUT/T<T>/seed<S>; a
# run that has ended (its metrics.json) is not run again and one interrupted is resumed, so the curve can
# be run in parts (SEEDS=0, then SEEDS="1 2") and the report made from what has finished. A run
# that bdl stops (a chain judged diverged) is listed by bdl-report under its table, not averaged.
#
# DATASET= (empty) leaves the dataset to the overrides (an experiment preset's); SAMPLER=hmc
# TEMPS=1 makes the warm HMC runs that Izmailov et al. (2021) set against the cold SG-MCMC ones:
#
#     SEEDS="0 1 2" TEMPS="1 0.3 0.1" DATASET= bash scripts/cold_posterior.sh OUT/sghmc experiment=izmailov_mnist
#     SEEDS="0 1 2" TEMPS=1 SAMPLER=hmc DATASET= bash scripts/cold_posterior.sh OUT/hmc \
#         experiment=izmailov_mnist epochs=150 burn_in=30 thin=1 batch_size=5000
set -euo pipefail
out=${1:-multirun/cold_posterior}
shift || true
bin=$(dirname "$(command -v python)")
dataset=()
[[ -n "${DATASET-fashion_mnist}" ]] && dataset=(dataset="${DATASET-fashion_mnist}")
for t in ${TEMPS:-0.001 0.003 0.01 0.03 0.1 0.3 1}; do
  for seed in ${SEEDS:-0}; do
    dir="$out/T$t/seed$seed"
    if [[ -f "$dir/metrics.json" ]] && ! grep -q '"status": "interrupted"' "$dir/metrics.json"; then
      continue
    fi
    resume=()
    # a run killed before its first checkpoint left samples that only resume=true may replace
    [[ -d "$dir" ]] && resume=(resume=true)
    "$bin/bdl-run" "${dataset[@]}" sampler="${SAMPLER:-sghmc}" temperature="$t" seed="$seed" \
      "${resume[@]}" "$@" hydra.run.dir="$dir" ||
      echo "T=$t seed=$seed: the run stopped (its reason above); bdl-report lists it"
  done
done
"$bin/bdl-report" "$out" --by temperature --error sem --metrics test_accuracy test_nll test_ece
