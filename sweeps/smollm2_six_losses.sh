#!/usr/bin/env bash
# The six losses on SmolLM2-135M-Instruct (+experiment=smollm2_addition), each as its paper defines it (the
# settings of conf/experiment/<loss>_paper.yaml: GSPO at 3e-4 / 4e-4, SAPO tau_neg 1.05, Dr.GRPO with
# unscaled advantages), into multirun/smollm2_six_losses/<timestamp>/, then its report (--group-by loss).
#   bash sweeps/smollm2_six_losses.sh                              # the six x seeds 0-4, one run at a time
#   LOSSES="grpo gspo cispo drgrpo" SEEDS=0,1,2,3,4 bash sweeps/smollm2_six_losses.sh   # a subset
#   JOBS=2 bash sweeps/smollm2_six_losses.sh                       # two runs at a time, a thread each
# Runs go seed by seed, every loss of a seed before the next seed, so a sweep stopped early still holds whole
# seeds: a paired comparison over the seeds it finished. One run at a time on two threads is the default
# (about 3.5 min a run on the 2-core CPU: docs/performance.md, sweeps); its timings are then each run's own.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS="${SEEDS:-0,1,2,3,4}"
LOSSES="${LOSSES:-grpo gspo sapo cispo bnpo drgrpo}"
JOBS="${JOBS:-1}"
export WANDB_MODE="${WANDB_MODE:-offline}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( $(nproc) / JOBS > 0 ? $(nproc) / JOBS : 1 ))}"
declare -A LOSS=(
  [grpo]="loss=grpo advantage=group"
  [gspo]="loss=gspo loss.clip_range=3e-4 loss.clip_range_high=4e-4"
  [sapo]="loss=sapo loss.tau_pos=1.0 loss.tau_neg=1.05"
  [cispo]="loss=cispo advantage=group"
  [bnpo]="loss=bnpo advantage=group"
  [drgrpo]="loss=drgrpo advantage=unscaled"
)
[[ "$SEEDS" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "smollm2_six_losses.sh: SEEDS must be a comma-separated list of seeds, got $SEEDS" >&2; exit 2; }
[[ "$JOBS" =~ ^[12]$ ]] || { echo "smollm2_six_losses.sh: JOBS must be 1 or 2, got $JOBS" >&2; exit 2; }
read -r -a losses <<<"$LOSSES"
for loss in "${losses[@]}"; do
  [ -n "${LOSS[$loss]+x}" ] || { echo "smollm2_six_losses.sh: unknown loss $loss; known: ${!LOSS[*]}" >&2; exit 2; }
done
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
      echo "smollm2_six_losses.sh: ${loss}_seed$seed done at $(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
    done
  done
}
start=$(date +%s)
if [ "$JOBS" = 1 ]; then
  stream "${losses[@]}"
else
  half=$(( (${#losses[@]} + 1) / 2 ))
  stream "${losses[@]:0:half}" & first=$!
  stream "${losses[@]:half}" & second=$!
  wait "$first" && wait "$second"
fi
echo "smollm2_six_losses.sh: $out took $(( $(date +%s) - start )) s"
python -m twinkle_exp.report "$out"/*_seed*/ --group-by loss --out "$out/report"
