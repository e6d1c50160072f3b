#!/usr/bin/env bash
# The six losses on SmolLM2-135M-Instruct (+experiment=smollm2_addition), each as its paper defines it (the
# settings of conf/experiment/<loss>_paper.yaml: GSPO at 3e-4 / 4e-4, SAPO tau_neg 1.05, Dr.GRPO with
# unscaled advantages), into multirun/smollm2_six_losses/<timestamp>/, then its report (--group-by loss).
#   bash sweeps/smollm2_six_losses.sh                 # seeds 0-4, two runs at a time, one thread each
#   SEEDS=0,1,2 bash sweeps/smollm2_six_losses.sh     # other seeds
# Two streams of three losses each run side by side, seed by seed, so every finished seed holds all six
# losses: a sweep stopped early still gives a paired comparison over the seeds it finished.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" WANDB_MODE="${WANDB_MODE:-offline}"
SEEDS="${SEEDS:-0,1,2,3,4}"
[[ "$SEEDS" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "smollm2_six_losses.sh: SEEDS must be a comma-separated list of seeds, got $SEEDS" >&2; exit 2; }
declare -A LOSS=(
  [grpo]="loss=grpo advantage=group"
  [gspo]="loss=gspo loss.clip_range=3e-4 loss.clip_range_high=4e-4"
  [sapo]="loss=sapo loss.tau_pos=1.0 loss.tau_neg=1.05"
  [cispo]="loss=cispo advantage=group"
  [bnpo]="loss=bnpo advantage=group"
  [drgrpo]="loss=drgrpo advantage=unscaled"
)
out="multirun/smollm2_six_losses/$(date +%Y-%m-%d_%H-%M-%S)"
mkdir -p "$out"
stream() {  # the losses named, seed by seed, one run at a time
  local seed loss
  for seed in ${SEEDS//,/ }; do
    for loss in "$@"; do
      # shellcheck disable=SC2086
      python -m twinkle_exp +experiment=smollm2_addition ${LOSS[$loss]} seed="$seed" \
        logger=csv trainer.save_checkpoint=false trainer.enable_progress_bar=false \
        sweep_name=smollm2_six_losses hydra.run.dir="$out/${loss}_seed$seed" ${OVERRIDES:-} \
        > "$out/${loss}_seed$seed.log" 2>&1
    done
  done
}
start=$(date +%s)
stream grpo gspo sapo & first=$!
stream cispo bnpo drgrpo & second=$!
wait "$first" && wait "$second"
echo "smollm2_six_losses.sh: $out took $(( $(date +%s) - start )) s"
python -m twinkle_exp.report "$out"/*_seed*/ --group-by loss --out "$out/report"
